"""The settings that change a run's results, and the one rule that compares two records of them.

Two callers ask "did the settings change?": `--resume` (`gspo_bench.config.run.config_changes`,
and `gspo_bench.suite.folder_checks` for a suite folder's suite.yaml) compares a run's recorded config.yaml
with the config it would resolve to now; the report (`analysis.data.suites`) compares the recorded configs
of the runs it would pool as one suite. Both flatten a config to {dotted key: value} and compare it
here, less the settings that do not change what a run computes (`NOT_RESULTS`):

- `suite.description`, `suite.output_dir`: words and where results go;
- `suite.tracking`: TensorBoard and W&B views of the rows;
- `suite.warm_start.cache_dir`: where warm starts are cached (an entry's key is its settings);
- `suite.seeds`: which seeds the suite runs. A run's own seed (`run.seed`) is compared; the list is
  not, since a run of seed 1 is the same whether seeds 0-2 or 0-4 were asked for: adding a seed to a
  suite neither stops a resume of its existing runs nor splits its folder in the report;
- `run.overrides`: how the `--set` values were given (the fields they set are compared).

A key one record lacks reads as the field's default where it is a suite field with a default, plain or
made by a factory, in a section or an optional one (a field added to the schema after that record was
written: `eval.lm_eval_tasks`, `analysis.rules`), and as None otherwise. Imports
pydantic and the schema only: no torch.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from gspo_bench.config.spelling import respell_path

NOT_RESULTS = ("suite.description", "suite.output_dir", "suite.tracking", "suite.warm_start.cache_dir", "suite.seeds",
               "run.overrides")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: leaf} of nested mappings, and of lists that hold mappings or lists (the objectives:
    `suite.objectives.0.name`); a list of plain values (seeds) is one leaf, an empty mapping none."""
    if isinstance(data, Mapping):
        return {k: v for key, value in data.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    if isinstance(data, list) and any(isinstance(x, Mapping | list) for x in data):
        return {k: v for i, value in enumerate(data) for k, v in flatten(value, f"{prefix}{i}.").items()}
    return {prefix[:-1]: data}


def changes_results(key: str) -> bool:
    """Whether the setting at dotted `key` (as config.yaml nests it: `suite.train.lr`, `run.seed`) can
    change what a run computes: False for `NOT_RESULTS` and everything under them."""
    return not any(key == name or key.startswith(f"{name}.") for name in NOT_RESULTS)


def run_settings(config: Mapping[str, Any], section: str = "") -> dict[str, Any]:
    """The settings of `config` that change a run's results, flattened, their keys in the one spelling
    (`gspo_bench.config.spelling`: a run recorded as `objectives.0.kwargs.beta` compares as
    `objectives.0.params.beta`). `section` names where `config` sits in config.yaml ("suite" for a
    suite's fields alone, as suite.yaml holds them; "" for the whole file); keys are given relative to it."""
    prefix = f"{section}." if section else ""
    flat = {respell_path(prefix + key): value for key, value in flatten(config).items()}
    return {key[len(prefix):]: value for key, value in flat.items() if changes_results(key)}


def field_default(key: str) -> Any:
    """The default of suite field `key` ("suite.model.router_scale", "suite.eval.lm_eval_tasks",
    "suite.analysis.rules"): a plain default, or what a default factory makes (a list field added since
    a record was written reads as its empty list); through an optional section (`analysis:`) as through
    a plain one. None where the key is no suite field or has no default (a required field), as a
    missing value reads."""
    from gspo_bench.config.schema import SuiteConfig

    parts = key.split(".")
    if parts[0] != "suite":
        return None
    model: type[BaseModel] = SuiteConfig
    for i, name in enumerate(parts[1:], start=1):
        field = model.model_fields.get(name)
        if field is None:
            return None
        if i == len(parts) - 1:
            takes_data = getattr(field, "default_factory_takes_validated_data", False)  # pydantic >= 2.10
            return None if field.is_required() or takes_data else field.get_default(call_default_factory=True)
        section = _section_model(field.annotation)
        if section is None:
            return None
        model = section
    return None


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings section an annotation holds: `Model` or `Model | None` (an optional section); None
    for anything else (a list, a mapping, a plain value)."""
    candidates = [annotation, *typing.get_args(annotation)]
    models = [a for a in candidates if isinstance(a, type) and issubclass(a, BaseModel)]
    return models[0] if len(models) == 1 else None


def changed_settings(old: Mapping[str, Any], new: Mapping[str, Any],
                     section: str = "") -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) for every setting where two flattened settings (`run_settings` of
    the same `section`) differ, sorted by key, a missing value given as None. A key one side lacks is
    compared as its field's default (a field added since that side was written is no change where the
    other holds the default), and as None where it has none."""
    prefix = f"{section}." if section else ""
    found = []
    for key in sorted(set(old) | set(new)):
        default = field_default(prefix + key)
        if old.get(key, default) != new.get(key, default):
            found.append((key, old.get(key), new.get(key)))
    return found


def settings_changes(recorded: Mapping[str, Any], now: Mapping[str, Any], section: str = "") -> list[str]:
    """"key: recorded -> now" for every setting that changes a run's results where two configs as
    config.yaml holds them (`section` as `run_settings` reads it) differ: what `--resume` lists."""
    return [f"{key}: {before!r} -> {after!r}" for key, before, after in
            changed_settings(run_settings(recorded, section), run_settings(now, section), section)]


def entry_differences(ran: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """"field: ran -> planned now" for each field of two dumped objective entries that differs."""
    before, now = flatten(ran), flatten(planned)
    return [f"{key}: {before.get(key)!r} ran, {now.get(key)!r} planned now" for key in dict.fromkeys([*before, *now])
            if before.get(key) != now.get(key)]
