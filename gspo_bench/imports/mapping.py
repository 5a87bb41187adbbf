"""A library's metric names -> this project's columns, read from a small YAML file. The built-in mappings
(`trl`, `verl`) are such files in gspo_bench/imports/mappings/; any other library is imported by writing
one. A mapping that names a column this project does not have is refused, naming it: a typo would
otherwise leave the column unmeasured without a word."""

from __future__ import annotations

import fnmatch
import hashlib
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gspo_bench.config.yamlread import read_yaml
from gspo_bench.rundir.folder import REQUIRED_COLUMNS

# filled by the importer itself, never by a mapping: what the run is, and its compute
IDENTITY_COLUMNS = ("step", "objective", "label", "seed", "replay")
COMPUTE_COLUMNS = ("compute/tokens", "compute/cum_tokens", "compute/flops", "compute/cum_flops")
# the columns a mapping may fill: every column of a run folder but the above, and the KL to a reference
MAPPABLE_COLUMNS = tuple(c for c in REQUIRED_COLUMNS if c not in IDENTITY_COLUMNS + COMPUTE_COLUMNS) + ("kl/ref",)
BUILTIN = ("trl", "verl")


class MappingError(ValueError):
    """A mapping file that cannot be read or names a column this project does not have."""


class Tokens(BaseModel):
    """The key that logs tokens processed: per step, or so far (`cumulative`)."""

    model_config = ConfigDict(extra="forbid")
    key: str
    cumulative: bool = False


class Mapping(BaseModel):
    """`columns`: column -> the library's key; `tokens`: where compute per step comes from; `ignore`: keys
    (fnmatch patterns) known and left out on purpose, so they are not listed as unknown; `strip_prefixes`:
    prefixes a writer adds to every key (transformers' TensorBoard callback writes `train/KEY`); `rows`: the
    column whose logging makes a row, where a library logs some keys once per RL step and others once per
    optimizer step (TRL with steps_per_generation > 1)."""

    model_config = ConfigDict(extra="forbid")
    library: str
    columns: dict[str, str]
    tokens: Tokens | None = None
    ignore: list[str] = Field(default_factory=list)
    strip_prefixes: list[str] = Field(default_factory=list)
    rows: str | None = None  # a mapped column: one row per step its key was logged (see series.build_series)

    @field_validator("columns")
    @classmethod
    def known_columns(cls, columns: dict[str, str]) -> dict[str, str]:
        unknown = [c for c in columns if c not in MAPPABLE_COLUMNS]
        if unknown:
            raise ValueError(f"unknown column {', '.join(map(repr, unknown))} (a mapping fills one of: "
                             f"{', '.join(MAPPABLE_COLUMNS)})")
        return columns

    @model_validator(mode="after")
    def rows_mapped(self) -> Mapping:
        if self.rows is not None and self.rows not in self.columns:
            raise ValueError(f"rows: {self.rows!r} is not one of the mapped columns")
        return self

    def key_of(self, raw: str) -> str:
        """`raw` less the first of `strip_prefixes` it starts with."""
        for prefix in self.strip_prefixes:
            if raw.startswith(prefix):
                return raw[len(prefix):]
        return raw

    def known(self, key: str) -> bool:
        """Whether `key` (prefix stripped) is mapped, the token key, or ignored on purpose."""
        used = set(self.columns.values()) | ({self.tokens.key} if self.tokens else set())
        return key in used or any(fnmatch.fnmatchcase(key, pattern) for pattern in self.ignore)

    def not_measured(self) -> list[str]:
        """The columns this mapping leaves unmeasured (NaN in every row)."""
        return [c for c in MAPPABLE_COLUMNS if c not in self.columns]


def mapping_path(name_or_path: str | Path, base: Path | None = None) -> Path:
    """A built-in mapping's file (by name) or a mapping file's path (relative to `base`)."""
    if str(name_or_path) in BUILTIN:
        return Path(str(resources.files("gspo_bench.imports") / "mappings" / f"{name_or_path}.yaml"))
    path = Path(name_or_path)
    return path if path.is_absolute() or base is None else base / path


def load_mapping(name_or_path: str | Path, base: Path | None = None) -> tuple[Mapping, Path, str]:
    """The mapping, its file and that file's sha256; MappingError naming the file and the field."""
    path = mapping_path(name_or_path, base)
    try:
        raw = path.read_bytes()
        data = read_yaml(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise MappingError(f"mapping {path}: cannot be read: {str(err).splitlines()[0]}") from None
    try:
        mapping = Mapping.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise MappingError(f"mapping {path}: {where}: {first['msg'].removeprefix('Value error, ')}") from None
    return mapping, path, hashlib.sha256(raw).hexdigest()
