"""Preflight: what `run` needs beyond a valid suite, checked before any compute and apart from the
schema (`gspo_bench.config`), so that a suite for another machine still parses and plans with
`--dry-run`: the task builds with its params (and has the test problems the warm start scores), the
devices exist, a model.path is a supported checkpoint, every objective and correction accepts its
params, the trackers are installed, every eval task is known, and the optimizer, the rollout engine
with its options and the router noise accept the model, each by the function the run calls on it
(on the model built on the meta device: no weights, no memory), so `validate` and `run` cannot
disagree.
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
    problems = [p for check in (_check_task, _check_device, _check_model, _check_objectives, _check_eval_tasks,
                                _check_tracking, _check_warm_start) for p in check(suite)]
    if problems:
        raise SuiteError(problems_text(source, problems))


def _check_task(suite: SuiteConfig) -> list[str]:
    try:
        suite.task.instance()
    except ValueError as err:
        return [f"task: {err}"]
    return []


def _check_device(suite: SuiteConfig) -> list[str]:
    """The devices the run and its warm start train on (`require_device`, as they call it)."""
    from gspo_bench.runtime.hardware import require_device

    devices = {"train.device": suite.train.device}
    if _warm_starts(suite):
        devices["warm_start.device"] = suite.warm_start.device
    problems = []
    for field, name in devices.items():
        try:
            require_device(name, field)
        except ValueError as err:
            problems.append(str(err))
    return problems


def _warm_starts(suite: SuiteConfig) -> bool:
    """Whether the run's starting weights are a warm start (a tiny model with warm_start enabled)."""
    return suite.model.path is None and suite.warm_start.enabled


def _check_warm_start(suite: SuiteConfig) -> list[str]:
    """The warm start's test problems: the task's test split holds `eval_examples` distinct ones
    (`test_examples`, as the warm start calls it)."""
    try:
        task = suite.task.instance()
    except ValueError:  # _check_task names it
        return []
    if not _warm_starts(suite):
        return []
    try:
        task.test_examples(suite.warm_start.eval_examples)
    except ValueError as err:
        return [f"warm_start.eval_examples: {err}"]
    return []


def _check_model(suite: SuiteConfig) -> list[str]:
    """A model.path is a supported checkpoint; then the optimizer and the engine on the model."""
    problems = _check_model_path(suite)
    if problems:
        return problems
    model, tokenizer = _meta_model(suite)
    return _check_optimizer(suite, model) + _check_engine(suite, model, tokenizer)


def _meta_model(suite: SuiteConfig):
    """(the run's model on the meta device: its modules and shapes, no weights; its tokenizer)."""
    import torch

    if suite.model.path is None:
        from gspo_bench.models import build_char_tokenizer, build_tiny_moe

        tokenizer = build_char_tokenizer()
        sizes = suite.model.model_dump(exclude={"family", "path", "architecture"})
        with torch.device("meta"):
            return build_tiny_moe(suite.model.family, vocab_size=len(tokenizer), **sizes), tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(suite.model.path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return model, AutoTokenizer.from_pretrained(suite.model.path, local_files_only=True)


def _check_optimizer(suite: SuiteConfig, model) -> list[str]:
    """The optimizer of every learning rate the entries train at (`make_optimizer`, as the run
    builds it: betas, weight decay, router groups)."""
    from gspo_bench.train.optim import make_optimizer

    problems = []
    for lr in sorted({entry.lr or suite.train.lr for entry in suite.objectives}):
        try:
            make_optimizer(model, suite.train, lr=lr)
        except (ValueError, RuntimeError) as err:
            problems.append(f"train: {err}")
    return list(dict.fromkeys(problems))


def _check_engine(suite: SuiteConfig, model, tokenizer) -> list[str]:
    """The rollout engine with its options (`make_run_engine`, as the run makes it), the router noise
    it was given on this model's routers (`RouterNoise`, as the engine attaches it), and the entries
    that replay the engine's routing (`check_replay_engine`)."""
    import torch

    from gspo_bench.rollout.router_noise import RouterNoise
    from gspo_bench.train.setup import check_replay_engine, make_run_engine

    weights = Path(suite.model.path or "the starting weights")
    try:
        engine = make_run_engine(suite, tokenizer, weights, torch.device(suite.train.device))
    except ImportError as err:
        return [f"rollout.engine: {err}"]
    except (ValueError, TypeError) as err:
        return [f"rollout.engine_options: {err}"]
    problems = []
    sigma = getattr(engine, "router_noise", 0.0)
    if sigma:
        try:
            RouterNoise(model, sigma, seed=0, keys=torch.zeros(1, dtype=torch.long), prompt_width=0)
        except ValueError as err:
            problems.append(f"rollout.engine_options: {err}")
    for i, entry in enumerate(suite.objectives):
        try:
            check_replay_engine(entry, engine, suite)
        except ValueError as err:
            problems.append(f"objectives.{i} ({entry.run_label}): {err}")
    return problems


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
