"""Synthetic runs with held-out evaluations, their suite recording its evaluation settings and outcome
rules: what the stability map's rules and resolution text read."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers.results import make_run


def evaluated_run(root: Path, suite: str, seed: int, scores: list[float], steps: list[float],
                  suite_fields: dict | None = None):
    """A 20-step grpo run of suite `suite` evaluated at `steps` with `scores` (standard error 0.02), its
    suite recording the sort task and `suite_fields` (e.g. eval: {limit, samples}, analysis: {rules})."""
    run = make_run(root, "grpo", seed, suite=suite, steps=int(max(steps)) or 1)
    run.write_rows("eval.parquet", [{"step": step, "label": "grpo", "seed": seed, "task": "gspo_sort", "score": score,
                                     "stderr": 0.02, "compute/cum_flops": 1e9 * step}
                                    for step, score in zip(steps, scores)])
    config = yaml.safe_load((run.path / "config.yaml").read_text())
    config["suite"] = {**config["suite"], "task": {"name": "sort", "params": {}}, **(suite_fields or {})}
    (run.path / "config.yaml").write_text(yaml.safe_dump(config))
    return run
