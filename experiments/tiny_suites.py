"""The tests' tiny suites, in one place: a 2-layer MoE sorting lists of up to 3 numbers, a few steps of
GRPO, GRPO + Routing Replay and GSPO, each a suite file's data (a dict `gspo-bench run` reads as YAML).

The tests build theirs from `tiny_suite` and `signal_suite` (tests/helpers/runs.py); `baseline_suite` is
the baseline of tests/test_regress.py and of experiments/regress_margins.py; `parallel_suite` is the
4-run suite tests/test_suite_processes.py stops and resumes and experiments/reliability/stop_stress.py
stops round after round. A script loads this file by its path (experiments/ is no package):
`runpy.run_path(".../experiments/tiny_suites.py")`.
"""

from __future__ import annotations

from pathlib import Path

from gspo_bench.config import parse_suite
from gspo_bench.suite.runner import plan_runs, starting_weights
from gspo_bench.train import train_run


def tiny_suite(cache: Path, **changes) -> dict:
    """The tiny suite, its warm start cached in `cache`; `changes` replace its sections, a dict section's
    keys merged into it (`train={"lr": 1e-2}` keeps the other train settings)."""
    suite = {
        "name": "tiny",
        "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
        "task": {"name": "sort", "params": {"max_len": 3}},
        # a short warm start so that rewards (and so gradients) are not all zero
        "warm_start": {"cache_dir": str(cache), "band": [0.1, 1.0], "eval_every": 20, "eval_examples": 32},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8},
        "train": {"lr": 1e-3, "minibatches": 2, "threads": 1},
        "budget": {"kind": "steps", "value": 3},
        "objectives": [{"name": "grpo"}, {"name": "grpo_rr"}, {"name": "gspo"}],
    }
    for key, value in changes.items():
        suite[key] = {**suite[key], **value} if isinstance(value, dict) and key in suite else value
    return suite


def signal_suite(cache: Path, steps: int = 1, **changes) -> dict:
    """`tiny_suite`, warm-started further and with 16 responses a step, so that every step has rewards
    that differ within groups (non-zero advantages: every update is a real one)."""
    base = tiny_suite(cache, warm_start={"band": [0.4, 0.9]}, rollout={"prompts_per_step": 4},
                      budget={"kind": "steps", "value": steps})
    for key, value in changes.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    return base


def baseline_suite(cache: Path) -> dict:
    """Seeds 0 and 1 of GRPO, GRPO + Routing Replay and GSPO, 6 steps each: a regress baseline with a spread."""
    return signal_suite(cache, steps=6, seeds=[0, 1])


def parallel_suite(cache: Path) -> dict:
    """GRPO + Routing Replay and GSPO, seeds 0 and 1, 6 steps, a checkpoint every step: 4 runs, so that
    under `--parallel 2` two train while two wait, and a stop lands while runs train, queue and checkpoint."""
    return signal_suite(cache, steps=6, objectives=[{"name": "grpo_rr"}, {"name": "gspo"}], seeds=[0, 1],
                        train={"checkpoint_every": 1})


def run_suite(data: dict, out: Path, resume: bool = False, on_step=None) -> dict[str, dict]:
    """Every run of suite `data` into `out`, one after another in this process, each from the first seed's
    starting weights (cached after the first); {run name: its status}."""
    suite = parse_suite(data)
    statuses = {}
    for planned in plan_runs(suite, out):
        weights = starting_weights(planned.suite, suite.seeds[0], log=lambda m: None)
        statuses[planned.name] = train_run(planned.with_weights(weights), resume=resume, on_step=on_step)
    return statuses
