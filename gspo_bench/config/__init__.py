"""The suite: its typed schema (`schema`), how a file, `--set` overrides and sweep points are read
into it (`load`), and sweeps by dotted path (`sweep`). Importing it loads neither torch nor
transformers."""

from gspo_bench.config.load import (
    SuiteError,
    apply_overrides,
    arm_suite,
    check_run_names,
    dump_config,
    load_suite,
    parse_overrides,
    parse_suite,
    problems_text,
    sweep_points,
)
from gspo_bench.config.run import RunSpec
from gspo_bench.config.schema import (
    ALGORITHMS,
    AnalysisConfig,
    BudgetConfig,
    CollapseConfig,
    EvalConfig,
    ModelConfig,
    ObjectiveEntry,
    PrimaryConfig,
    RolloutConfig,
    SuiteConfig,
    TaskConfig,
    TrackingConfig,
    TrainConfig,
    WarmStartConfig,
)

__all__ = [
    "ALGORITHMS", "AnalysisConfig", "BudgetConfig", "CollapseConfig", "EvalConfig", "ModelConfig", "ObjectiveEntry", "PrimaryConfig", "RolloutConfig", "RunSpec",
    "SuiteConfig", "SuiteError", "TaskConfig", "TrackingConfig", "TrainConfig", "WarmStartConfig", "apply_overrides",
    "arm_suite",
    "check_run_names", "dump_config", "load_suite", "parse_overrides", "parse_suite", "problems_text", "sweep_points",
]
