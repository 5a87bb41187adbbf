"""One run: the RL step as phases (rollout, old-policy pass, minibatch updates, the row) and the loop
that runs them to a compute budget (`loop.train_run`), with what a run needs around it: its compute
accounting (`compute`), the supervised warm start (`warmstart`), held-out evaluation (`evaluation`)
and live tracking (`tracking`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gspo_bench.train.compute import (
        StepCompute as StepCompute,
    )
    from gspo_bench.train.compute import (
        active_parameters as active_parameters,
    )
    from gspo_bench.train.evaluation import (
        eval_config as eval_config,
    )
    from gspo_bench.train.evaluation import (
        evaluate_saved as evaluate_saved,
    )
    from gspo_bench.train.evaluation import (
        lm_eval_name as lm_eval_name,
    )
    from gspo_bench.train.evaluation import (
        resolve_tasks as resolve_tasks,
    )
    from gspo_bench.train.evaluation import (
        unknown_eval_tasks as unknown_eval_tasks,
    )
    from gspo_bench.train.loop import (
        step_seed as step_seed,
    )
    from gspo_bench.train.loop import (
        train_run as train_run,
    )
    from gspo_bench.train.old_policy import (
        OldPolicy as OldPolicy,
    )
    from gspo_bench.train.old_policy import (
        old_policy_pass as old_policy_pass,
    )
    from gspo_bench.train.optim import (
        make_optimizer as make_optimizer,
    )
    from gspo_bench.train.policy import (
        Policy as Policy,
    )
    from gspo_bench.train.rollout import (
        RolloutBatch as RolloutBatch,
    )
    from gspo_bench.train.rollout import (
        draw_examples as draw_examples,
    )
    from gspo_bench.train.row import (
        to_host as to_host,
    )
    from gspo_bench.train.setup import (
        check_replay_engine as check_replay_engine,
    )
    from gspo_bench.train.setup import (
        make_run_engine as make_run_engine,
    )
    from gspo_bench.train.setup import (
        run_prompt_format as run_prompt_format,
    )
    from gspo_bench.train.tracking import (
        check_available as check_available,
    )
    from gspo_bench.train.update import (
        UpdateSettings as UpdateSettings,
    )
    from gspo_bench.train.update import (
        update_policy as update_policy,
    )
    from gspo_bench.train.warmstart import (
        WarmStartParams as WarmStartParams,
    )
    from gspo_bench.train.warmstart import (
        warm_start as warm_start,
    )

FACE = {  # name -> the module of this package that defines it, imported on first use (no torch at import)
    "OldPolicy": "old_policy",
    "Policy": "policy",
    "RolloutBatch": "rollout",
    "StepCompute": "compute",
    "UpdateSettings": "update",
    "WarmStartParams": "warmstart",
    "active_parameters": "compute",
    "check_available": "tracking",
    "check_replay_engine": "setup",
    "draw_examples": "rollout",
    "eval_config": "evaluation",
    "evaluate_saved": "evaluation",
    "lm_eval_name": "evaluation",
    "make_optimizer": "optim",
    "make_run_engine": "setup",
    "old_policy_pass": "old_policy",
    "resolve_tasks": "evaluation",
    "run_prompt_format": "setup",
    "step_seed": "loop",
    "to_host": "row",
    "train_run": "loop",
    "unknown_eval_tasks": "evaluation",
    "update_policy": "update",
    "warm_start": "warmstart",
}
__all__ = sorted(FACE)


def __getattr__(name: str) -> Any:
    if name not in FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{FACE[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *FACE])
