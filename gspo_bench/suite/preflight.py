"""Preflight: what `run` needs beyond a valid suite, checked before any compute and apart from the
schema (`gspo_bench.config`), so that a suite for another machine still parses and plans with
`--dry-run`: the task builds with its params, the device exists, a model.path is a supported
checkpoint, every objective and correction accepts its params, the trackers are installed, every
eval task is known.
"""

from __future__ import annotations

import json
from pathlib import Path

from gspo_bench.config import SuiteConfig, SuiteError, problems_text
from gspo_bench.models.families import SUPPORTED_FAMILIES


def check_runnable(suite: SuiteConfig, source: str = "<suite>") -> None:
    """What `run` needs beyond a valid suite, checked before any compute (and not by parsing, so that
    a suite for another machine can still be planned with --dry-run): the task builds with its params
    (a JSONL file is read), the device exists, a model.path is a supported checkpoint, every
    objective accepts its clip range and kwargs, every eval task is known. SuiteError naming the file
    and the field."""
    problems = [p for check in (_check_task, _check_device, _check_model_path, _check_objectives, _check_eval_tasks,
                                _check_tracking, _check_hf_engine_options) for p in check(suite)]
    if problems:
        raise SuiteError(problems_text(source, problems))


def _check_task(suite: SuiteConfig) -> list[str]:
    try:
        suite.task.instance()
    except ValueError as err:
        return [f"task: {err}"]
    return []


def _check_device(suite: SuiteConfig) -> list[str]:
    if suite.train.device.startswith("cuda"):
        import torch

        index = int(suite.train.device.partition(":")[2] or 0)
        if not torch.cuda.is_available():
            return [f"train.device: {suite.train.device}, but this machine has no CUDA device"]
        if index >= torch.cuda.device_count():
            return [f"train.device: {suite.train.device}, but this machine has {torch.cuda.device_count()} GPU(s)"]
    return []


def _check_model_path(suite: SuiteConfig) -> list[str]:
    path = suite.model.path
    if path is None:
        return []
    config = Path(path) / "config.json"
    if not config.is_file():
        return [f"model.path: {path} is not a Hugging Face checkpoint directory (no config.json)"]
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except json.JSONDecodeError as err:
        return [f"model.path: {config} is not valid JSON ({err.msg})"]
    if model_type not in SUPPORTED_FAMILIES:
        return [f"model.path: model_type {model_type!r} is not a supported MoE family ({', '.join(SUPPORTED_FAMILIES)})"]
    return []


def _check_objectives(suite: SuiteConfig) -> list[str]:
    """Each objective once on a tiny batch with its resolved clip range and kwargs."""
    import torch

    from gspo_bench.objectives import get_objective, objective_spec

    logp = torch.zeros(2, 3)
    neutral = {"sampling_logp": logp, "router_shift": logp, "generator": torch.Generator().manual_seed(0)}
    advantages, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool)
    problems = []
    for i, entry in enumerate(suite.objectives):
        try:
            correction = entry.correction_fn()
            if correction is not None:
                correction(old_logp=logp, sampling_logp=logp, logp=logp, advantages=advantages, mask=mask)
            inputs = {name: neutral[name] for name in objective_spec(entry.objective).inputs}
            get_objective(entry.objective)(logp=logp, old_logp=logp, advantages=advantages, mask=mask, **inputs, **entry.clip_range(), **entry.kwargs)
        except (TypeError, ValueError) as err:
            problems.append(f"objectives.{i} ({entry.run_label}): {err}")
    return problems


def _check_hf_engine_options(suite: SuiteConfig) -> list[str]:
    """The hf engine takes the engine_options of every sweep point and arm (a sweep or an arm's `set:`
    may add a key, so a misspelt one is caught here rather than when its runs start)."""
    from gspo_bench.config import arm_suite, sweep_points
    from gspo_bench.rollout import make_engine

    refused: dict[str, list[str]] = {}  # the engine's error -> the labels of the arms it refuses
    for _, point in sweep_points(suite):
        for entry in point.objectives:
            rollout = arm_suite(point, entry).rollout
            if rollout.engine != "hf":
                continue
            try:
                make_engine("hf", pad_id=0, eos_id=1, **rollout.engine_options)
            except (TypeError, ValueError) as err:
                refused.setdefault(str(err), []).append(entry.run_label)
    return [f"rollout.engine_options ({', '.join(dict.fromkeys(labels))}): {err}" for err, labels in refused.items()]


def _check_tracking(suite: SuiteConfig) -> list[str]:
    from gspo_bench.train.tracking import check_available

    return [f"tracking: {p}" for p in check_available(suite.tracking)]


def _check_eval_tasks(suite: SuiteConfig) -> list[str]:
    from gspo_bench.train.evaluation import unknown_eval_tasks

    if suite.eval.lm_eval_include and not Path(suite.eval.lm_eval_include).is_dir():
        return [f"eval.lm_eval_include: {suite.eval.lm_eval_include} is not a directory"]
    problems = []
    unknown = unknown_eval_tasks(suite.eval.tasks, suite.task.name)
    if unknown:
        problems.append(f"eval.tasks: unknown task(s) {unknown}: neither a gspo-bench task nor an lm-eval task")
    unknown = unknown_eval_tasks(suite.eval.lm_eval_tasks, None, suite.eval.lm_eval_include)
    if unknown:
        problems.append(f"eval.lm_eval_tasks: {unknown} not in lm-eval's task registry"
                        + (f" nor in {suite.eval.lm_eval_include}" if suite.eval.lm_eval_include else ""))
    return problems
