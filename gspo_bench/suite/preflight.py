"""Preflight: what `run` needs beyond a valid suite, checked before any compute and apart from the
schema (`gspo_bench.config`), so that a suite for another machine still parses and plans with
`--dry-run`: the task builds with its params (and has the test problems the warm start scores), the
devices exist, a model.path is a supported checkpoint, every objective and correction accepts its
params, the trackers are installed, every eval task is known, and, for every run (each sweep point,
each entry's `set:`), the optimizer, the rollout engine with its options and the router noise accept
the model, each by the function the run calls on it (on the model built on the meta device: no
weights, no memory), so `validate` and `run` cannot disagree.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from gspo_bench.config import ObjectiveEntry, SuiteConfig, SuiteError, problems_text
from gspo_bench.models.families import SUPPORTED_FAMILIES

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase


def check_runnable(suite: SuiteConfig, source: str = "<suite>") -> None:
    """What `run` needs beyond a valid suite, checked before any compute (and not by parsing, so that
    a suite for another machine can still be planned with --dry-run): the task builds with its params
    (a JSONL file is read), a model.path is a supported checkpoint, every objective accepts its clip
    range and kwargs (a plugin's objective passes the conformance kit), every eval task is known, and
    every run's devices, optimizer and engine work (`_check_runs`). SuiteError naming the file and the
    field."""
    problems = [p for check in (_check_task, _check_model_path, _check_objectives, _check_plugin_objectives,
                                _check_tuning_spaces, _check_eval_tasks, _check_tracking, _check_cache, _check_runs)
                for p in check(suite)]
    if problems:
        raise SuiteError(problems_text(source, problems))


def check_seeds(suite: SuiteConfig, seeds: list[int] | None) -> None:
    """ValueError for --seeds that are a tuned suite's trial seeds (the comparison runs on other seeds)."""
    if suite.tuning is not None and set(seeds or []) & set(suite.tuning.seeds):
        raise ValueError(f"--seeds {seeds}: {sorted(set(seeds or []) & set(suite.tuning.seeds))} are trial seeds "
                         "(tuning.seeds); the comparison runs on other seeds")


def _check_cache(suite: SuiteConfig) -> list[str]:
    """The warm-start cache of every sweep point that warm-starts can be made: its nearest existing
    folder is a folder this process may write in. Named with where it was set (warm_start.cache_dir,
    GSPO_BENCH_CACHE or the default), before the warm start (which would find out after its compute,
    or blame --out)."""
    import os

    from gspo_bench.config import sweep_points
    from gspo_bench.suite.runner import default_cache_dir

    problems = []
    for _, point in sweep_points(suite):
        ws = point.warm_start
        if point.model.path is not None or not ws.enabled:
            continue
        cache = Path(ws.cache_dir) if ws.cache_dir else default_cache_dir()
        source = ("warm_start.cache_dir" if ws.cache_dir else
                  "GSPO_BENCH_CACHE" if "GSPO_BENCH_CACHE" in os.environ else "the default warm-start cache")
        existing = next(p for p in (cache, *cache.parents) if p.exists() or p.is_symlink())
        why = (f"{existing} is a file" if not existing.is_dir() else
               f"{existing} is not writable" if not os.access(existing, os.W_OK | os.X_OK) else None)
        problem = f"{source}: the warm-start cache {cache} cannot be written: {why}"
        if why is not None and problem not in problems:
            problems.append(problem)
    return problems


def _check_task(suite: SuiteConfig) -> list[str]:
    try:
        suite.task.instance()
    except ValueError as err:
        return [f"task: {err}"]
    return []


def _check_runs(suite: SuiteConfig) -> list[str]:
    """What every run needs of the suite it runs with (each sweep point's, with its entry's `set:`),
    each by the function the run calls: its devices, its optimizer, its rollout engine with its
    options and router noise (on the model built on the meta device), R3's engine. A problem is named
    once, with the labels of the objective entries whose runs have it. Nothing here where model.path
    is not a checkpoint (`_check_model_path` names that)."""
    from gspo_bench.config import arm_suite, sweep_points

    if _check_model_path(suite):
        return []
    found: dict[tuple[str, str], list[str]] = {}  # (field, problem) -> labels
    models: dict[str, tuple] = {}  # the meta model and tokenizer of each model section
    for _, point in sweep_points(suite):
        key = point.model.model_dump_json()
        if key not in models:
            models[key] = _meta_model(point)
        model, tokenizer = models[key]
        for entry in point.objectives:
            run = arm_suite(point, entry)
            for field, problem in (_devices(run) + _optimizer(run, entry, model) + _engine(run, entry, model, tokenizer)
                                   + _rollout_sizes(run, model)):
                found.setdefault((field, problem), []).append(entry.run_label)
    return [f"{field} ({', '.join(dict.fromkeys(labels))}): {problem}" for (field, problem), labels in found.items()]


def _devices(suite: SuiteConfig) -> list[tuple[str, str]]:
    """The devices the run and its warm start train on (`require_device`, as they call it)."""
    from gspo_bench.runtime.hardware import require_device

    devices = {"train.device": suite.train.device}
    if suite.model.path is None and suite.warm_start.enabled:
        devices["warm_start.device"] = suite.warm_start.device
    problems = []
    for field, name in devices.items():
        try:
            require_device(name, field)
        except ValueError as err:
            problems.append((field, str(err).removeprefix(f"{field}: ")))
    return problems


def _meta_model(suite: SuiteConfig) -> tuple:
    """(the run's model on the meta device: its modules and shapes, no weights; its tokenizer)."""
    import torch

    if suite.model.path is None:
        from gspo_bench.models import build_char_tokenizer, build_tiny_moe

        tokenizer = build_char_tokenizer()
        sizes = suite.model.tiny_sizes()
        with torch.device("meta"):
            return build_tiny_moe(suite.model.family, vocab_size=len(tokenizer), **sizes), tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(suite.model.path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return model, AutoTokenizer.from_pretrained(suite.model.path, local_files_only=True)


def _optimizer(suite: SuiteConfig, entry: ObjectiveEntry, model: torch.nn.Module) -> list[tuple[str, str]]:
    """The entry's optimizer (`make_optimizer`, as the run builds it: betas, weight decay, router
    groups, the 8-bit one's library)."""
    from gspo_bench.train import make_optimizer

    try:
        make_optimizer(model, suite.train, lr=entry.lr or suite.train.lr)
    except (ValueError, RuntimeError) as err:
        return [("train", str(err))]
    return []


def _engine(suite: SuiteConfig, entry: ObjectiveEntry, model: torch.nn.Module,
            tokenizer: PreTrainedTokenizerBase) -> list[tuple[str, str]]:
    """The rollout engine with its options (`make_run_engine`, as the run makes it), the router noise
    it was given on the model's routers (`RouterNoise`, as the engine attaches it), and R3's need of
    an engine that returns routing (`check_replay_engine`)."""
    import torch

    from gspo_bench.rollout.router_noise import RouterNoise
    from gspo_bench.train import check_replay_engine, make_run_engine

    weights = Path(suite.model.path or "the starting weights")
    try:
        engine = make_run_engine(suite, tokenizer, weights, torch.device(suite.train.device))
    except ImportError as err:
        return [("rollout.engine", str(err))]
    except (ValueError, TypeError) as err:
        return [("rollout.engine_options", str(err))]
    problems = []
    sigma = getattr(engine, "router_noise", 0.0)
    if sigma:
        try:
            RouterNoise(model, sigma, seed=0, keys=torch.zeros(1, dtype=torch.long), prompt_width=0)
        except ValueError as err:
            problems.append(("rollout.engine_options", str(err)))
    try:
        check_replay_engine(entry, engine, suite)
    except ValueError as err:
        problems.append(("rollout.engine", str(err)))
    return problems


def _rollout_sizes(suite: SuiteConfig, model: torch.nn.Module) -> list[tuple[str, str]]:
    """What the rollout meets at the run's first step, on the first step's own prompts (`first_prompts`,
    as `--dry-run` plans them; nothing where the task's data or tokenizer is not here): a prompt longer
    than rollout.max_prompt_tokens (`check_prompt_length`), a KV-cache budget below one row of the hf
    engine (`rows_per_chunk`, at the width the engine pads the batch to)."""
    from gspo_bench.models.families import hf_model
    from gspo_bench.rollout.chunks import kv_bytes_per_token, rows_per_chunk
    from gspo_bench.rollout.engine import check_prompt_length
    from gspo_bench.suite.plan import BYTES, first_prompts

    measured = first_prompts(suite)
    if measured is None:
        return []
    longest, rollout = max(measured[0]), suite.rollout
    problems = []
    try:
        check_prompt_length(longest, rollout.max_prompt_tokens)
    except ValueError as err:
        problems.append(("rollout.max_prompt_tokens", str(err)))
    if rollout.engine == "hf" and rollout.kv_cache_gib is not None:
        element = BYTES[rollout.dtype or suite.train.dtype]
        per_row = (longest + rollout.max_new_tokens) * kv_bytes_per_token(hf_model(model, "the KV-cache budget").config,
                                                                           element)
        try:
            rows_per_chunk(rollout.prompts_per_step * rollout.group_size, per_row, rollout.kv_cache_gib)
        except ValueError as err:
            problems.append(("rollout.kv_cache_gib", str(err)))
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


def suite_entries(suite: SuiteConfig) -> list[tuple[str, ObjectiveEntry]]:
    """(where, entry) of each of the suite's objective entries, `where` as a problem names it."""
    return [(f"objectives.{i} ({entry.run_label})", entry) for i, entry in enumerate(suite.objectives)]


def _check_tuning_spaces(suite: SuiteConfig) -> list[str]:
    """Each value a tuning space can give (`gspo_bench.config.tuning.space_entries`: a list's values, a
    range's two ends) on its arm's entry, checked as the suite's own entries are: the objective and its
    correction on a tiny batch (a plugin's: the conformance kit) and, for a `rollout.`/`train.` path, its
    arm's suite. A value every trial drawing it would fail with is refused before any trial, named by
    the space's key, its path and the value (a trial that failed so failed again on every --resume)."""
    if suite.tuning is None:
        return []
    from gspo_bench.config import arm_suite
    from gspo_bench.config.tuning import space_entries

    entries = space_entries(suite)
    problems = _check_objectives(suite, entries) + _check_plugin_objectives(suite, entries)
    for where, entry in entries:
        if entry.set:
            try:
                arm_suite(suite, entry)
            except SuiteError as err:
                problems.append(f"{where}: {err}")
    return problems


def _check_objectives(suite: SuiteConfig, entries: list[tuple[str, ObjectiveEntry]] | None = None) -> list[str]:
    """Each objective once on a tiny batch with its resolved clip range and kwargs (a plugin's: the
    conformance kit, `_check_plugin_objectives`), and its correction: those of `entries` ((where,
    entry) pairs; default: the suite's own, `suite_entries`). A value the tiny batch cannot take (a clip
    range beyond float range: torch's RuntimeError) is refused as the run would fail on it."""
    import torch

    from gspo_bench.config.plugins import loaded_plugins

    kit_checked = {entry for plugin in loaded_plugins() for entry in plugin.registered}  # _check_plugin_objectives
    logp = torch.zeros(2, 3)
    neutral = {"sampling_logp": logp, "router_shift": logp, "generator": torch.Generator().manual_seed(0)}
    advantages, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool)
    problems = []
    for where, entry in suite_entries(suite) if entries is None else entries:
        try:
            correction = entry.correction_fn()
            if correction is not None:
                correction(old_logp=logp, sampling_logp=logp, logp=logp, advantages=advantages, mask=mask)
            if f"objective:{entry.objective}" in kit_checked:
                continue
            inputs = {name: neutral[name] for name in entry.spec().inputs}
            entry.loss()(logp=logp, old_logp=logp, advantages=advantages, mask=mask, **inputs)
        except (TypeError, ValueError, RuntimeError, ArithmeticError) as err:
            problems.append(f"{where}: {err}")
    return problems


def _check_plugin_objectives(suite: SuiteConfig, entries: list[tuple[str, ObjectiveEntry]] | None = None) -> list[str]:
    """The conformance kit on every objective a plugin registered, with the entry's clip range and
    kwargs (the built-in ones pass it in the package's tests): a loss that is not finite at extreme
    ratios, leaks padding, points the wrong way or raises is refused before compute."""
    from gspo_bench.config.plugins import loaded_plugins
    from gspo_bench.objectives.conformance import ContractError, check_objective

    from_plugins = {entry.split(":", 1)[1]: plugin.path for plugin in loaded_plugins() for entry in plugin.registered
                    if entry.startswith("objective:")}
    problems = []
    for where, entry in suite_entries(suite) if entries is None else entries:
        if entry.objective not in from_plugins:
            continue
        try:
            findings = check_objective(entry.objective, settings={**entry.clip_range(), **entry.params})
        except ContractError as err:  # a broken contract, a raise or a time limit passed: named, with the check
            problems.append(f"{where}: {err} ({from_plugins[entry.objective]})")
            continue
        except Exception as err:  # the user's code: whatever it raises is its problem, named
            problems.append(f"{where}: the loss raised {type(err).__name__}: {err} ({from_plugins[entry.objective]})")
            continue
        failed = [f"{f.property} ({f.measured:.3g}, needs {f.bound})" for f in findings if f.passed is False]
        if failed:
            given = "".join(f" --param {shlex.quote(f'{key}={json.dumps(value)}')}" for key, value in
                            {**entry.clip_range(), **entry.params}.items())
            problems.append(f"{where}: fails the conformance kit: {', '.join(failed)}; `gspo-bench check "
                            f"{entry.objective} --plugin {from_plugins[entry.objective]}{given}` shows every property "
                            "(declare exempt={property: why} where one does not apply)")
    return problems


def _check_tracking(suite: SuiteConfig) -> list[str]:
    from gspo_bench.train import check_available

    return [f"tracking: {p}" for p in check_available(suite.tracking)]


def _check_eval_tasks(suite: SuiteConfig) -> list[str]:
    from gspo_bench.train import unknown_eval_tasks

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
    return problems or _eval_limits(suite)


def _eval_limits(suite: SuiteConfig) -> list[str]:
    """Each of our eval tasks has `eval.limit` distinct test problems (both engines evaluate that many),
    with the params it is evaluated with, at every sweep point (a sweep of `task.params.max_len` makes
    a smaller split at some points): a small problem space would fail every run at its first
    evaluation. Each (task, params, limit) is searched once."""
    import json

    from gspo_bench.config import sweep_points
    from gspo_bench.config.sweep import describe
    from gspo_bench.tasks import make_task
    from gspo_bench.train import resolve_tasks

    problems, searched = [], set()
    for values, point in sweep_points(suite):
        limit = point.eval.limit
        for name, params in resolve_tasks(point.eval.tasks, point.task.name, point.task.params):
            key = (name, json.dumps(params, sort_keys=True, default=str), limit)
            if params is None or key in searched:
                continue  # an lm-eval task (lm-eval reads its own documents), or searched at another point
            searched.add(key)
            try:
                make_task(name, **params).test_examples(limit)
            except ValueError as err:
                where = f" at sweep point {describe(values)}" if values else ""
                problems.append(f"eval.limit ({limit}){where}: task {name} {params}: {err}; evaluate on fewer "
                                "problems or widen the task")
    return problems
