"""The import plan: which runs of another library make one suite of run folders, read from a YAML file.

    name: trl-grpo-vs-gspo          # the suite: OUT/<name>/<arm>-s<seed>/
    mapping: trl                    # a built-in mapping (trl, verl) or a mapping file, relative to this file
    compute: {flops_per_token: 6.0e8}   # FLOPs per logged token; or flops_per_step; tokens_per_step if none logged
    runs:
      - {arm: grpo, seed: 0, files: [grpo-0/trainer_state.json]}
      - {arm: gspo, seed: 0, files: [gspo-0/runs], resumed: true}   # a folder: its event files
    analysis: {primary: {each_vs: grpo}}   # the declared family, as in a suite file

Two runs claiming one (arm, seed) are refused, naming both, before anything is read."""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    field_validator,
    model_validator,
)

from gspo_bench.config.schema import AnalysisConfig
from gspo_bench.config.yamlread import read_yaml
from gspo_bench.rundir.names import is_folder_name


class PlanError(ValueError):
    """An import plan that cannot be read or is not consistent; the message names the file and field."""


class Compute(BaseModel):
    """Compute per step: FLOPs given per step, or per token times the tokens of the step (logged, or
    `tokens_per_step`). The report's x-axis is training FLOPs, so one of the two FLOP figures is needed."""

    model_config = ConfigDict(extra="forbid")
    flops_per_token: PositiveFloat | None = None
    flops_per_step: PositiveFloat | None = None
    tokens_per_step: PositiveFloat | None = None

    @field_validator("flops_per_token", "flops_per_step", "tokens_per_step")
    @classmethod
    def finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{value} is not a finite number: the report compares runs at equal compute")
        return value

    @model_validator(mode="after")
    def one_flop_figure(self) -> Compute:
        if (self.flops_per_token is None) == (self.flops_per_step is None):
            raise ValueError("give one of flops_per_token (with tokens logged or tokens_per_step) or flops_per_step: "
                             "the report's x-axis is training compute in FLOPs")
        return self


class ImportedRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    arm: str = Field(min_length=1)
    seed: int = Field(ge=0)
    files: list[str] = Field(min_length=1)
    objective: str | None = None  # the objective the run trained with (default: the arm)
    resumed: bool = False  # repeated steps: keep the values logged after the restart


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    mapping: str
    compute: Compute
    runs: list[ImportedRun] = Field(min_length=1)
    analysis: AnalysisConfig | None = None

    @model_validator(mode="after")
    def consistent(self) -> Plan:
        if not is_folder_name(self.name):
            raise ValueError(f"name {self.name!r} must be a folder name (letters, digits, _ . , = @ + -)")
        seen: dict[tuple[str, int], int] = {}
        for i, run in enumerate(self.runs):
            first = seen.setdefault((run.arm, run.seed), i)
            if first != i:
                raise ValueError(f"runs {first} and {i} both claim arm {run.arm!r} seed {run.seed}")
        if self.analysis is not None and self.analysis.primary is not None:
            self.analysis.primary.check_arms(self.arms())
        return self

    def arms(self) -> list[str]:
        return list(dict.fromkeys(run.arm for run in self.runs))


def load_plan(path: Path) -> Plan:
    """The plan in `path`; PlanError naming the file and the field."""
    try:
        data = read_yaml(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise PlanError(f"{path}: cannot be read: {str(err).splitlines()[0]}") from None
    try:
        return Plan.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise PlanError(f"{path}: {where + ': ' if where else ''}{first['msg'].removeprefix('Value error, ')}") from None
