"""The parts of `make gpu-check`, each run by `run.py` in its own process under its own time limit.

    python experiments/gpu_check/check_parts.py PART --raw DIR --work DIR [--dry]

A part writes RAW/PART.json as it goes (`Progress`: the stage it is at and what it has measured so
far), so a part killed at its time limit still says how far it got and brings back its figures;
`check_table.py` reads these files. Big files (weights, checkpoints, run folders) go under --work,
never under RAW. `--dry`: the same set-up, code paths and outputs on a tiny model on the CPU (no
CUDA), so that the GPU call cannot fail on a typo; its figures mean nothing.

Parts (docs/gpu-check.md says what each measures and why):
    env        the machine: device, memory, versions
    tests      the gpu-marked tests (JUnit XML)
    mid        one RL step of the 1.25 B mid-size MoE by phase, and TRL's step at the same settings
    granite    Granite-3.0-1B-A400M's shape: the dry-run memory plan against one real step's peaks
    olmoe      OLMoE-1B-7B's shape (layers cut to fit one GPU and the time limit): likewise
    fsdp       one process against torchrun FSDP2 at world size 1 (NCCL on a GPU), step for step
    stability  one cell of the stability map (GRPO and GSPO, router noise, routers' lr x3) at the mid size
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments" / "perf"))  # bench.py: the perf benchmark's set-up and timers

import torch  # noqa: E402
import yaml  # noqa: E402

if TYPE_CHECKING:
    import bench

# transformers, gspo_bench and bench.py are imported by the parts that use them (`perf`, `training`):
# the parts that only start other processes (env, tests, fsdp) start in a second, not ten

GIB = 2**30


def perf():
    """experiments/perf/bench.py, imported on first use (it imports transformers and gspo_bench)."""
    import bench

    return bench


class Progress:
    """RAW/<part>.json, rewritten whole (atomically) at every stage and every result: how far the part
    got (`stage`), whether it finished (`done`), and what it measured so far."""

    def __init__(self, raw: Path, part: str) -> None:
        self.path = raw / f"{part}.json"
        self.data: dict[str, Any] = {"part": part, "stage": "starting", "done": False}
        self.write()

    def stage(self, text: str) -> None:
        self.data["stage"] = text
        print(f"[{self.data['part']}] {text}", flush=True)
        self.write()

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.write()

    def finish(self) -> None:
        self.data |= {"stage": "done", "done": True}
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        tmp.replace(self.path)


# ---------------------------------------------------------------------------- the loop's phases, timed
class PhaseClock:
    """Seconds and peak GPU memory of each phase of every RL step the loop takes in this process: the
    loop's own phase functions are wrapped (`install`), each call synchronised and its peak counted
    from its own start. A step's row keeps `time/rollout_s` and `time/update_s` (everything after the
    rollout); the old-policy pass and the K minibatch updates are timed here, and the measurements
    (drift after the update, the step-1 floor, the row's host copy) are the rest of the step."""

    PHASES = (("rollout", "collect_rollout"), ("old_pass", "old_policy_pass"), ("update", "update_policy"))

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.steps: list[dict[str, float]] = []

    def install(self) -> PhaseClock:
        from gspo_bench.train import loop

        for phase, name in self.PHASES:
            setattr(loop, name, self.wrap(phase, getattr(loop, name)))
        loop.save_checkpoint = skip_checkpoint  # type: ignore[assignment]  # the check times steps, not disk writes
        return self

    def wrap(self, phase: str, fn):
        from gspo_bench.runtime.hardware import peak_memory_gib, reset_peak_memory

        sync = perf().sync

        def timed(*args, **kwargs):
            if phase == "rollout":  # the first phase of a step: a new record
                self.steps.append({})
            sync(str(self.device))
            reset_peak_memory(self.device)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sync(str(self.device))
                self.steps[-1] |= {f"{phase}_s": time.perf_counter() - start,
                                   f"{phase}_peak_gib": peak_memory_gib(self.device)}
        return timed


def skip_checkpoint(*args, **kwargs) -> None:
    """Stands in for the loop's checkpoint write (15 GB at the mid size): not what the check measures."""


def with_phases(timings: list[dict], clock: PhaseClock) -> list[dict]:
    """bench.time_ours' counted steps (the first, a warm-up, left out) with their phases from `clock`;
    `measure_s` = the step after its rollout less the old-policy pass and the updates."""
    counted = clock.steps[len(clock.steps) - len(timings):]
    rows = []
    for timing, phases in zip(timings, counted, strict=True):
        rest = timing["update_s"] - phases.get("old_pass_s", math.nan) - phases.get("update_s", math.nan)
        rows.append(phases | timing | {"phase_update_s": phases.get("update_s", math.nan), "measure_s": rest})
    return rows


def device_of(dry: bool) -> str:
    if dry:
        return "cpu"
    if not torch.cuda.is_available():
        raise SystemExit("this machine has no CUDA device; run with --dry for the CPU rehearsal")
    return "cuda"


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------- env
def part_env(progress: Progress, work: Path, dry: bool) -> None:
    import importlib.metadata as metadata

    versions = {}
    for name in ("torch", "transformers", "trl", "datasets", "torchao", "pydantic", "pandas", "pyarrow"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cuda = torch.cuda.is_available()
    git = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False) \
        if shutil.which("git") else None
    progress.put("env", {
        "device": torch.cuda.get_device_name() if cuda else f"cpu ({platform.machine()})",
        "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / GIB if cuda else None,
        "cuda": torch.version.cuda, "python": platform.python_version(), "packages": versions,
        "commit": git.stdout.strip() if git is not None and git.returncode == 0 else None, "dry": dry,
    })


# ---------------------------------------------------------------------------- tests
GPU_MARK = re.compile(r"^\s*(@pytest\.mark\.gpu\b|pytestmark\s*=.*\bpytest\.mark\.gpu\b)", re.MULTILINE)


def gpu_test_files() -> list[str]:
    """The test files that hold gpu-marked tests (collecting only these keeps the part short)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py") if GPU_MARK.search(p.read_text()))


def part_tests(progress: Progress, work: Path, dry: bool) -> None:
    files = gpu_test_files()
    xml = progress.path.parent / "gpu-tests.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:randomly", "-p", "no:cacheprovider",
               f"--junitxml={xml}", *files]
    progress.put("command", " ".join(command[1:]))
    progress.stage(f"pytest -m gpu on {len(files)} files")
    done = subprocess.run(command, cwd=ROOT, check=False)
    progress.put("returncode", done.returncode)
    if not xml.is_file():
        raise SystemExit(f"pytest wrote no JUnit XML (exit code {done.returncode})")


# ---------------------------------------------------------------------------- mid: ours by phase, and TRL
DRY_MODEL = dict(num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4, top_k=2, num_heads=4, num_kv_heads=2)


def mid_setting(dry: bool) -> bench.Setting:
    """The perf benchmark's mid-size preset (1.25 B MoE, P=32 G=8 T=128, bf16 on CUDA), or a tiny CPU stand-in."""
    bench = perf()
    if dry:
        return bench.Setting(prompts=2, group=2, max_new_tokens=4, minibatches=2, threads=1, **DRY_MODEL)
    return replace(bench.Setting(), **bench.PRESETS["mid"])


def part_mid(progress: Progress, work: Path, dry: bool) -> None:
    bench, setting = perf(), mid_setting(dry)
    steps = 1 if dry else 2
    progress.put("setting", asdict(setting))
    progress.stage("initial weights")
    weights = bench.save_initial_weights(setting, work / "mid-init")
    clock = PhaseClock(setting.device).install()
    progress.stage(f"gspo-bench: 1 warm-up + {steps} steps")
    progress.put("ours", with_phases(bench.time_ours(setting, weights, work, steps), clock))
    free_memory()
    progress.stage(f"TRL GRPOTrainer: 1 warm-up + {steps} steps")
    progress.put("trl", bench.time_trl(setting, weights, work, steps))


# ---------------------------------------------------------------------------- real shapes: plan against peak
@dataclass(frozen=True)
class Shape:
    """A real MoE's suite, run on random weights of its architecture: what changes for one short step."""

    suite: str
    layers: int | None = None  # decoder layers kept (None: all)
    max_new_tokens: int | None = None  # None: the suite's
    dry_config: dict = field(default_factory=dict)  # the tiny CPU stand-in's config changes


SHAPES = {
    # 1.33 B parameters, all 24 layers, responses of 512 tokens, as configured (43 GiB planned before prompts)
    "granite": Shape("experiments/granite_1b.yaml", dry_config={
        "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 32, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2}),
    # 6.92 B parameters at 16 layers need the H200; 4 of them (1.9 B) fit one H100, and responses of 256
    # tokens (2,048 configured) keep one step within the part's time limit; every setting of the suite
    # (8-bit AdamW, checkpointing, micro-batches, the chunked head, rollout chunks) stays
    "olmoe": Shape("experiments/olmoe_1b_7b.yaml", layers=4, max_new_tokens=256, dry_config={
        "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 32, "num_attention_heads": 4,
        "num_key_value_heads": 4, "num_experts": 4, "num_experts_per_tok": 2}),
}


def random_checkpoint(shape: Shape, path: Path, dry: bool) -> dict:
    """Random weights of the suite's architecture (seeded), saved with the project's char tokenizer (the
    real tokenizer is not here; the vocabulary stays the model's, so the logits are the real size).
    Returns the config changes made."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from gspo_bench.models import build_char_tokenizer, save_model
    from gspo_bench.models.tokenizer import BOS_ID, EOS_ID, PAD_ID

    suite = yaml.safe_load((ROOT / shape.suite).read_text())
    config = AutoConfig.from_pretrained(ROOT / suite["model"]["architecture"], local_files_only=True)
    changes: dict = {"pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID}
    if shape.layers is not None:
        changes["num_hidden_layers"] = shape.layers
    changes |= shape.dry_config if dry else {}
    for key, value in changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    with torch.device("cpu" if dry else "cuda"):
        model = AutoModelForCausalLM.from_config(config)
    save_model(model.to(torch.float32 if dry else torch.bfloat16), build_char_tokenizer(), path)
    del model
    free_memory()
    return changes


def shape_suite(shape: Shape, weights: Path, steps: int, dry: bool):
    """The suite on the random weights: the countdown task (its data and tokenizer are here), the
    prompts' own lengths (no max_prompt_tokens: plan and step see the same prompts), one objective."""
    data = yaml.safe_load((ROOT / shape.suite).read_text())
    data["model"] = {"family": data["model"]["family"], "path": str(weights)}
    data["task"] = {"name": "countdown", "params": {"count": 3}}
    data["rollout"] |= {"max_prompt_tokens": None, "ignore_eos": True}
    if shape.max_new_tokens is not None:
        data["rollout"]["max_new_tokens"] = shape.max_new_tokens
    data["train"] |= {"checkpoint_every": 10**6}
    data["budget"] = {"kind": "steps", "value": steps}
    data["objectives"] = data["objectives"][:1]
    if dry:
        data["rollout"] |= {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8}
        data["train"] |= {"device": "cpu", "dtype": "float32", "optimizer": "adamw", "minibatches": 2, "threads": 1}
    from gspo_bench.config import parse_suite

    return parse_suite(data, shape.suite)


def plan_record(suite) -> dict:
    """The dry run's plan of `suite` on one GPU (`gspo-bench run --dry-run`'s numbers, and its table)."""
    from gspo_bench.suite.plan import plan_rows, plan_suite

    plan = plan_suite(suite, ranks=1)
    return {**{key: getattr(plan.memory, key) for key in
               ("state", "activations", "logits", "kv_cache", "rollout_copy", "engine", "peak")},
            "params_total": plan.params_total, "batching": asdict(plan.batching), "fits": plan.fit.fits,
            "gpu_memory_gb": suite.train.gpu_memory_gb,
            "dry_run": [f"{what}: {value}" for what, value in plan_rows(suite, plan, [suite.objectives[0].run_label])]}


def part_shape(progress: Progress, work: Path, dry: bool) -> None:
    from gspo_bench.config import RunSpec
    from gspo_bench.train import train_run

    name = progress.data["part"]
    shape, steps = SHAPES[name], 2
    device_of(dry)
    progress.stage("random weights of the architecture")
    weights = work / f"{name}-weights"
    progress.put("config_changes", random_checkpoint(shape, weights, dry))
    suite = shape_suite(shape, weights, steps, dry)
    progress.put("settings", {"rollout": suite.rollout.model_dump(mode="json"),
                              "train": suite.train.model_dump(mode="json")})
    progress.stage("the dry-run plan")
    progress.put("plan", plan_record(suite))
    clock = PhaseClock(suite.train.device).install()
    progress.stage(f"{steps} real steps")
    step_s: list[float] = []

    def record(row: dict) -> None:  # after every step: its phases so far, a step cut short keeps the others
        step_s.append(row["time/step_s"])
        progress.put("steps", [phases | {"step_s": t} for phases, t in zip(clock.steps, step_s, strict=False)])

    train_run(RunSpec(suite=suite, entry=suite.objectives[0], seed=0, run_dir=work / f"{name}-run",
                      init_weights=weights), on_step=record)


# ---------------------------------------------------------------------------- FSDP2 at world size 1
def fsdp_suite(dry: bool) -> dict:
    """gpu_tiny's model, fp32 (equal steps, not float noise of bf16), the decoding both processes share
    (transformers' generate on the fp32 weights: under FSDP2 there is no rollout copy nor CUDA graph)."""
    model = dict(DRY_MODEL) if dry else {"num_layers": 8, "hidden_size": 128, "expert_hidden": 128, "num_experts": 8,
                                         "top_k": 2}
    rollout = {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4} if dry else \
        {"prompts_per_step": 16, "group_size": 8, "max_new_tokens": 24}
    return {"name": "fsdp", "model": model, "task": {"name": "sort", "params": {"max_len": 3}},
            "warm_start": {"enabled": False},
            "rollout": rollout | {"engine_options": {"decode": "generate", "copy_weights": False}},
            "train": {"lr": 1.0e-3, "minibatches": 2, "threads": 1, "device": device_of(dry), "dtype": "float32",
                      "drift_after_update": True},
            "budget": {"kind": "steps", "value": 2}, "objectives": [{"name": "gspo"}], "seeds": [0]}


def part_fsdp(progress: Progress, work: Path, dry: bool) -> None:
    path = work / "fsdp.yaml"
    path.write_text(yaml.safe_dump(fsdp_suite(dry)))
    rank_script = str(Path(__file__).with_name("check_fsdp_rank.py"))
    launches = {"single": [sys.executable, rank_script],
                "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                             rank_script]}
    for name, command in launches.items():
        progress.stage(f"{name}: 2 steps")
        out = work / f"fsdp-{name}"
        start = time.perf_counter()
        done = subprocess.run([*command, str(path), str(out)], cwd=ROOT, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the {name} run failed (exit code {done.returncode}; its output is in this part's log)")
        shutil.copy(out / "fsdp" / "gspo-s0" / "metrics.parquet", progress.path.parent / f"fsdp-{name}.parquet")
        world = json.loads((out / "world.json").read_text())
        progress.put(name, world | {"wall_s": time.perf_counter() - start})


# ---------------------------------------------------------------------------- a cell of the stability map
def stability_suite(setting: bench.Setting, steps: int, dry: bool) -> dict:
    """Stage 2's cell (experiments/stability/stage2_arms.yaml: router noise 3, routers' lr x3, the sort
    task, 8 x 8 responses of <= 12 tokens, 4 minibatches, held-out evaluation of 100 problems by the
    engine) on the mid-size model, no warm start (random weights: the time of a step and of an
    evaluation, not learning)."""
    rollout = {"prompts_per_step": 2, "group_size": 2} if dry else {"prompts_per_step": 8, "group_size": 8}
    return {"name": "stability-cell", "model": {key: getattr(setting, key) for key in DRY_MODEL},
            "task": {"name": "sort", "params": {"max_len": 3}}, "warm_start": {"enabled": False},
            "rollout": rollout | {"max_new_tokens": 12, "engine_options": {"router_noise": 3.0}},
            "train": {"lr": 3.0e-4, "minibatches": 2 if dry else 4, "threads": setting.threads, "router_lr_scale": 3.0,
                      "device": setting.device, "dtype": setting.dtype, "checkpoint_every": 10**6},
            "budget": {"kind": "steps", "value": steps},
            "eval": {"tasks": ["sort"], "every": steps, "limit": 4 if dry else 100, "engine": "rollout"},
            "objectives": [{"name": "grpo"}, {"name": "gspo"}], "seeds": [0]}


def part_stability(progress: Progress, work: Path, dry: bool) -> None:
    import pandas as pd

    from gspo_bench.config import RunSpec, parse_suite
    from gspo_bench.train import train_run

    bench, setting = perf(), mid_setting(dry)
    steps = 2 if dry else 4
    suite = parse_suite(stability_suite(setting, steps, dry), "the stability cell")
    progress.put("settings", {"steps": steps, "model": suite.model.model_dump(mode="json"),
                              "rollout": suite.rollout.model_dump(mode="json")})
    weights = work / "mid-init"  # the mid part's, where it ran (the same model and seed)
    if not (weights / "config.json").is_file():
        progress.stage("initial weights")
        bench.save_initial_weights(setting, weights)
    PhaseClock(setting.device).install()
    results = {}
    for entry in suite.objectives:
        progress.stage(f"{entry.run_label}: {steps} steps and 2 evaluations")
        step_s: list[float] = []
        run_dir = work / f"stability-{entry.run_label}"
        train_run(RunSpec(suite=suite, entry=entry, seed=0, run_dir=run_dir, init_weights=weights),
                  on_step=lambda row, step_s=step_s: step_s.append(row["time/step_s"]))
        evals = pd.read_parquet(run_dir / "eval.parquet")
        results[entry.run_label] = {"step_s": step_s, "eval_s": evals["time/eval_s"].tolist(),
                                    "eval_score": evals["score"].tolist()}
        progress.put("runs", results)


PARTS = {"env": part_env, "tests": part_tests, "mid": part_mid, "granite": part_shape, "olmoe": part_shape,
         "fsdp": part_fsdp, "stability": part_stability}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=list(PARTS))
    parser.add_argument("--raw", type=Path, required=True, help="where the part's small outputs go")
    parser.add_argument("--work", type=Path, required=True, help="where its big files go (weights, runs)")
    parser.add_argument("--dry", action="store_true", help="the tiny model on the CPU")
    args = parser.parse_args(argv)
    args.raw.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1 if args.dry else 8)
    progress = Progress(args.raw, args.part)
    PARTS[args.part](progress, args.work, args.dry)
    progress.finish()


if __name__ == "__main__":
    from gspo_bench.runtime.kernels import pin_kernels

    pin_kernels()  # as `gspo-bench` does, before anything computes
    main()
