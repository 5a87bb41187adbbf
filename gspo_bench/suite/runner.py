"""Running a suite: expand objectives x seeds, prepare the shared starting weights, run each to the
same budget, show progress. A run that collapses is recorded and the suite goes on."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import torch

from gspo_bench.config import SuiteConfig, WarmStartConfig, dump_config, sweep_points
from gspo_bench.config.run import RunSpec
from gspo_bench.runtime.distributed import World, barrier
from gspo_bench.suite.launch import Observer, run_local_processes, run_on_ray, run_sequential


def plan_runs(suite: SuiteConfig, out: Path, only: list[str] | None = None, seeds: list[int] | None = None,
              overrides: dict[str, Any] | None = None) -> list[RunSpec]:
    """Every objective x seed at every sweep point, each with its own results folder and its own suite
    (the point's, with the entry's `set:` values). `only` keeps the entries of those labels (the labels
    before a sweep point is added); `overrides`: the `--set` values `suite` was loaded with, recorded
    with each run."""
    from gspo_bench.config import arm_suite, sweep
    from gspo_bench.rundir.names import run_folder_name

    entries = suite.objectives
    if only:
        labels = [e.run_label for e in entries]
        unknown = sorted(set(only) - set(labels))
        if unknown:
            raise ValueError(f"--only {', '.join(unknown)}: no such label in the suite; labels: {', '.join(labels)}")
        entries = [e for e in entries if e.run_label in only]
    runs = []
    for point, point_suite in sweep_points(suite):
        names = sweep.short_names(list(point))
        for s in seeds if seeds is not None else suite.seeds:
            for e in entries:
                entry = e.model_copy(update={"label": sweep.run_label(e.run_label, point)}) if point else e
                runs.append(RunSpec(suite=arm_suite(point_suite, e), entry=entry, seed=s, arm=e.run_label,
                                       run_dir=out / suite.name / run_folder_name(entry.run_label, s),
                                       sweep={names[p]: v for p, v in point.items()}, overrides=dict(overrides or {}),
                                       weights_suite=point_suite))
    return runs


def default_cache_dir() -> Path:
    return Path(os.environ.get("GSPO_BENCH_CACHE", Path.home() / ".cache" / "gspo-bench"))


def starting_weights(suite: SuiteConfig, seed: int, log: Callable[[str], None] = print,
                     on_eval: Callable[[int, float], None] | None = None, shipped: bool = True) -> Path:
    """Directory of the weights (with tokenizer) every objective of `seed` starts from.

    Tiny models: built from the config with `seed`, then warm-started (cached under a hash of
    everything that affects them; where the cache holds none, the entry of that hash shipped with the
    package, unless not `shipped`); each of its evaluations goes to `on_eval(step, accuracy)` (a
    progress bar), or as a line to `log`. Real models: the checkpoint directory itself.
    """
    from gspo_bench import __version__
    from gspo_bench.models import build_char_tokenizer, build_tiny_moe
    from gspo_bench.models.chat import TINY_CHAT_TEMPLATE, resolve_prompt_format
    from gspo_bench.models.tokenizer import DEFAULT_ALPHABET
    from gspo_bench.runtime.kernels import torch_threads
    from gspo_bench.tasks import make_task
    from gspo_bench.train import WarmStartParams, warm_start

    if suite.model.path is not None:
        if not (Path(suite.model.path) / "config.json").is_file():
            raise FileNotFoundError(f"model.path {suite.model.path} is not a Hugging Face checkpoint directory")
        return Path(suite.model.path)
    seed = init_seed(suite, seed)
    tokenizer = build_char_tokenizer()
    if suite.rollout.chat_template:  # a tiny model asked to chat: its tokenizer gets the tiny template
        tokenizer.chat_template = TINY_CHAT_TEMPLATE
    prompt_format = resolve_prompt_format(suite.rollout.chat_template, suite.rollout.system_prompt, tokenizer, tiny=True)
    sizes = suite.model.tiny_sizes()

    def build():
        return build_tiny_moe(suite.model.family, seed=seed, vocab_size=len(tokenizer), **sizes)

    ws = suite.warm_start
    cache = Path(ws.cache_dir) if ws.cache_dir else default_cache_dir()
    key_parts = {
        # router_scale only where it is set: at 1 the key (and the cache) of before it existed; the warm start
        # never adds the load-balancing loss (router_aux_loss_coef is the RL update's)
        "model": suite.model.model_dump(mode="json", exclude={"architecture", "router_aux_loss_coef"} | (
            {"router_scale"} if suite.model.router_scale == 1.0 else set())), "task": suite.task.model_dump(mode="json"),
        "alphabet": DEFAULT_ALPHABET, "seed": seed, "gspo_bench": __version__, "torch": torch.__version__,
        "enabled": ws.enabled, **({"prompt_format": asdict(prompt_format)} if prompt_format.chat else {}),
    }
    params = WarmStartParams(
        lr=ws.lr, batch_size=ws.batch_size, max_steps=ws.max_steps if ws.enabled else 0, eval_every=ws.eval_every,
        eval_examples=ws.eval_examples, band=ws.band if ws.enabled else (0.0, 1.0),
        temperature=suite.rollout.temperature, max_new_tokens=suite.rollout.max_new_tokens, seed=seed,
        prompt_format=prompt_format, device=ws.device, steps=ws.steps if ws.enabled else None,
    )
    log(f"starting weights for seed {seed}: {'warm start' if ws.enabled else 'fresh init'} (cache {cache})")
    # warm_start.threads, else the runs' thread count: fixed by the suite, so the same sums on any machine
    with torch_threads(ws.threads or suite.train.threads):
        _, info = warm_start(
            build, tokenizer, make_task(suite.task.name, **suite.task.params), params, key_parts, cache,
            on_eval=on_eval or (lambda step, acc: log(f"  warm start step {step}: sampled test accuracy {acc:.3f}")),
            shipped=shipped)
    for why in filter(None, (info.get("rebuilt") and f"the cached warm start was damaged ({info['rebuilt']}): removed "
                             "and rebuilt", info.get("shipped_damaged") and f"{info['shipped_damaged']}: trained instead")):
        log(f"  {why}")
    done = "shipped with the package" if info.get("shipped") else "reused" if info["cached"] else "trained"
    log(f"  {done}: accuracy {info['accuracy']:.3f} after {info['steps']} steps")
    return Path(info["path"])


def suite_file_sha256(suite: SuiteConfig) -> str:
    """The sha256 of the suite file `write_suite_file` writes for `suite` (each run records it in its
    provenance; the report checks its suite.yaml against it)."""
    return hashlib.sha256(dump_config(suite).encode("utf-8")).hexdigest()


def write_suite_file(suite: SuiteConfig, out: Path) -> None:
    from gspo_bench.rundir.folder import atomic_write_text

    atomic_write_text(out / suite.name / "suite.yaml", dump_config(suite))


def weights_key(planned: RunSpec) -> tuple[int, str]:
    """What the starting weights of a run depend on."""
    return init_seed(planned.start, planned.seed), planned.start.model_dump_json(include={"model", "task", "warm_start", "rollout"})


def init_seed(suite: SuiteConfig, seed: int) -> int:
    """The seed a run's starting model is built and warm-started with (`WarmStartConfig.seed_for`)."""
    return suite.warm_start.seed_for(seed)


def _warm_start_eval(observer: Observer, seed: int, cfg: WarmStartConfig, step: int, accuracy: float) -> None:
    if cfg.enabled:  # a fresh init is only scored once: no warm-start bar for it
        observer.warm_start(seed, step, accuracy, cfg)


def run_suite(suite: SuiteConfig, todo: list[RunSpec], root: Path, *, resume: bool = False,
              allow_changed: bool = False, world: World = World(),
              log: Callable[[str], None] = print, observer: Observer | None = None, parallel: int = 1,
              ray_address: str | None | Literal[False] = False) -> list[tuple[RunSpec, dict]]:
    """Train the planned runs; returns (run, final status) pairs. The starting weights of every seed
    are prepared first (under torchrun rank 0 trains or finds them, then the others reuse them), then
    the runs go one after another, `parallel` at a time as local processes, or as Ray tasks
    (`ray_address`: None for a local cluster, an address for an existing one, False for no Ray).
    A run that fails is recorded as failed and the others go on. suite.yaml is written first, except
    where --resume --allow-changed continues runs with new settings: then it is written after them, and
    only where one of them did not fail (a failed resume, its settings refused by the checkpoint, left
    suite.yaml saying settings no run ran with, and the next resume with the run's own was refused)."""
    observer = observer or Observer()
    continuing, suite_sha256 = resume and allow_changed, suite_file_sha256(suite)
    if world.is_main and not continuing:
        write_suite_file(suite, root)
    weights = {}
    for planned in todo:  # cached on disk: the first call per (model, task, seed) trains, the others find it
        key = weights_key(planned)
        if key not in weights:
            seed, cfg = init_seed(planned.start, planned.seed), planned.start.warm_start
            on_eval = functools.partial(_warm_start_eval, observer, seed, cfg)
            if not world.is_main:  # under torchrun the other ranks wait for rank 0 to train or find them
                barrier(world)
            weights[key] = starting_weights(planned.start, planned.seed, log=log, on_eval=on_eval)
            if world.is_main:
                observer.warm_start_done(seed)
                barrier(world)
    specs = [p.with_weights(weights[weights_key(p)], suite_sha256) for p in todo]
    mode = {"resume": resume, "allow_changed": allow_changed}
    if ray_address is not False:
        statuses = run_on_ray(specs, mode, observer, ray_address)
    elif parallel > 1:
        statuses = run_local_processes(specs, mode, observer, parallel)
    else:
        statuses = run_sequential(specs, mode, observer)
    if world.is_main and continuing and any(status["status"] != "failed" for status in statuses):
        write_suite_file(suite, root)
    return list(zip(todo, statuses, strict=True))
