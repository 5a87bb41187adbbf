"""Setting up one run: the policy (fp32 master weights) and its optimizer, engine, task, objective,
results folder and loop state, fresh or from the run's last checkpoint."""

from __future__ import annotations

import contextlib
import json
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
import yaml

from gspo_bench.config import ObjectiveEntry, SuiteConfig
from gspo_bench.config.load import load_suite_plugins
from gspo_bench.config.run import RunSpec, code_edited, resume_changes
from gspo_bench.models.chat import PromptFormat, resolve_prompt_format
from gspo_bench.rollout import RolloutEngine, make_engine
from gspo_bench.rundir.folder import RunDir, provenance
from gspo_bench.rundir.lock import RunBusyError, RunLock
from gspo_bench.rundir.records import ProvenanceRecord, TaskBaselineRecord, WarmStartRecord
from gspo_bench.runtime.distributed import World, device_for, shard, world_from_env
from gspo_bench.runtime.hardware import require_device
from gspo_bench.runtime.kernels import kernel_state
from gspo_bench.tasks import Task
from gspo_bench.train.checkpoint import find_checkpoint, remove_half_written, restore
from gspo_bench.train.compute import active_parameters
from gspo_bench.train.evaluation import EngineEvaluator, Evaluator
from gspo_bench.train.optim import make_optimizer
from gspo_bench.train.policy import Policy, checkpoint_activations
from gspo_bench.train.precision import DTYPES, Precision
from gspo_bench.train.state import RunState
from gspo_bench.train.tracking import Tracker, open_tracker
from gspo_bench.train.update import Objective

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class Run:
    """Everything a step needs, set up once per run."""

    spec: RunSpec
    out: RunDir
    policy: Policy
    tokenizer: PreTrainedTokenizerBase
    engine: RolloutEngine
    task: Task
    objective: Objective
    n_active: int  # active parameters per token (FLOP accounting)
    provenance: ProvenanceRecord
    evaluator: Evaluator | EngineEvaluator | None
    lock: RunLock | None = None  # this process's hold on the run folder (rank 0)
    prompt_format: PromptFormat = PromptFormat()  # raw prompts, or rendered with the chat template
    tracker: Tracker | None = None  # TensorBoard / W&B views of the rows (rank 0, when configured)

    @property
    def suite(self) -> SuiteConfig:
        return self.spec.suite

    @property
    def world(self) -> World:
        return self.policy.world


def open_run(spec: RunSpec, resume: bool, allow_changed: bool = False) -> tuple[Run, RunState]:
    """The run of `spec`, and its state: fresh, or at its last checkpoint with `resume` (refused if
    the suite changed since, unless `allow_changed`). Takes the run folder's lock (RunBusyError if
    another process holds it) and writes the resolved config, provenance and a `running` status
    (rank 0 only under torchrun). The caller releases `run.lock` when the run ends."""
    suite, train = spec.suite, spec.suite.train
    plugins = load_suite_plugins(suite.plugins, suite.name)  # a worker process (--parallel, Ray) registers them first
    edited = code_edited(spec)
    if edited is not None:
        raise ValueError(f"{spec.name}: {edited}")
    if spec.init_weights is None:
        raise ValueError(f"{spec.name}: no starting weights (the runner prepares them: RunSpec.with_weights)")
    init_weights = spec.init_weights
    device = require_device(train.device, "train.device")
    world = world_from_env(device)
    device = device_for(world, device)
    out = RunDir(spec.run_dir, writable=world.is_main)  # only rank 0 writes
    lock = RunLock(out.path).acquire() if world.is_main else None
    try:
        status = out.read_status() if lock is not None else None  # under the lock: another process may
        if status is not None and (not resume or status["status"] in ("done", "collapsed")):  # have run it since
            raise RunBusyError(f"{out.path} already holds a run ({status['status']}, written meanwhile by another "
                               "process); use --resume to continue an unfinished run, or --out to write elsewhere")
        if lock is not None:  # this process owns the folder now: what a killed one left half-written goes
            remove_half_written(out.path)
        checkpoint = find_checkpoint(out.path) if resume else None
        changes = resume_changes(spec, out.path, allow_changed) if checkpoint is not None else []
        if world.distributed:
            check_distributed(suite, world)
        weights = checkpoint / "model" if checkpoint is not None else init_weights
        policy, tokenizer, n_active = load_policy(spec, weights, init_weights, device, world)
        state, prov = RunState(), provenance(str(device))
        prov["overrides"], prov["kernels"], prov["suite_sha256"] = spec.overrides, kernel_state(), spec.suite_sha256
        if checkpoint is not None:
            state, prov = restore(spec, out, checkpoint, policy, device, changes)
        prov["warm_start"] = warm_start_record(spec, init_weights)
        prov["plugins"] = [plugin.record() for plugin in plugins]
        prov["task_baseline"] = recorded_task_baseline(suite)
        prompt_format = run_prompt_format(suite, tokenizer)
        engine = make_run_engine(suite, tokenizer, weights, device)
        check_replay_engine(spec.entry, engine, suite)
        evaluator = make_evaluator(suite, out.path, engine, prompt_format, policy)
        out.write_text("config.yaml", spec.config)
        out.write_provenance(prov)
        out.write_status("running", step=state.step)
        task = suite.task.instance()  # a task that fails to build here ends the run failed, its folder freed
        objective = spec.entry.loss()
        tracker = open_tracker(suite.tracking, out.path, suite.name, yaml.safe_load(spec.config), state.step, world.is_main)
    except BaseException as err:
        if lock is not None:
            end_unresumed(out, err, resume)
            lock.release()
        raise
    return Run(spec, out, policy, tokenizer, engine, task, objective, n_active, prov, evaluator,
               lock, prompt_format, tracker), state


def make_evaluator(suite: SuiteConfig, out: Path, engine: RolloutEngine, prompt_format: PromptFormat,
                   policy: Policy) -> Evaluator | EngineEvaluator | None:
    """The run's held-out evaluation (`eval:`): lm-eval's, or its rollout engine's with router and logit noise off; None
    without eval tasks."""
    if not suite.eval.enabled:
        return None
    where = (suite.task.name, suite.task.params, suite.rollout.max_new_tokens, suite.rollout.temperature, prompt_format)
    if suite.eval.engine == "rollout":
        return EngineEvaluator(suite.eval, engine, *where, precision=policy.rollout_precision or policy.precision)
    return Evaluator(suite.eval, out / "eval_tasks", *where)


def warm_start_record(spec: RunSpec, start: Path) -> WarmStartRecord:
    """The starting weights `start` of the run, for provenance.json (the analysis stratifies by them): the
    warm start's seed, its folder and, from its warmstart.json, its cache key, accuracy and steps."""
    record = {"seed": spec.warm_start_seed, "path": str(start)}
    info = Path(start) / "warmstart.json"
    if info.is_file():
        record |= {k: v for k, v in json.loads(info.read_text()).items() if k in ("key", "accuracy", "steps", "in_band")}
    return cast(WarmStartRecord, record)


def end_unresumed(out: RunDir, err: BaseException, resume: bool) -> None:
    """A run that failed as it opened after saying `running` (this process's, or one left by a killed
    process), or `failed` (stopped, or failed before) whose `--resume` failed, is `failed` with why, its
    traceback in error.log as the loop leaves one: status.json never says `running` once no process runs
    it, nor keeps a stop's advice that `--resume` continues it once a resume did not."""
    from gspo_bench.rundir.failure import failure_message

    try:
        status = out.read_status()
    except ValueError:  # status.json is damaged: the error on its way up names it (or one before it)
        return
    if status is not None and (status["status"] == "running" or resume and status["status"] == "failed"):
        with contextlib.suppress(OSError):  # a full disk may refuse it: status.json still says why
            out.write_text("error.log", "".join(traceback.format_exception(err)))
        why = failure_message(err, out.path)
        out.write_status("failed", f"not resumed: {why}" if resume else why, step=status.get("step", 0))


def run_prompt_format(suite: SuiteConfig, tokenizer: PreTrainedTokenizerBase) -> PromptFormat:
    """How the run renders prompts (rollout.chat_template resolved against the run's tokenizer)."""
    return resolve_prompt_format(suite.rollout.chat_template, suite.rollout.system_prompt, tokenizer,
                                 tiny=suite.model.path is None, source=suite.model.path or "the tiny model")


def check_replay_engine(entry: ObjectiveEntry, engine: RolloutEngine, suite: SuiteConfig) -> None:
    """ValueError where `entry` replays the rollout's routing (R3, or lagged R2 where the sampler is no older than
    its replay_lag) and `engine` returns none."""
    if entry.use_replay and entry.replay_source in ("rollout", "lagged") and not getattr(engine, "returns_routing", False):
        kind = "rollout routing replay (R3)" if entry.replay_source == "rollout" else "lagged routing replay"
        raise ValueError(f"{entry.run_label}: {kind} needs an engine that returns "
                         f"routed experts; rollout.engine {suite.rollout.engine} does not (hf does)")


def load_policy(spec: RunSpec, weights: Path, start: Path, device: torch.device, world: World) -> tuple[Policy, PreTrainedTokenizerBase, int]:
    """The model from `weights` in fp32 (master weights; bf16 runs compute under autocast), sharded
    under torchrun, its AdamW, the frozen reference for a KL penalty (the starting weights `start`); the
    tokenizer; active parameters."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    train = spec.suite.train
    tokenizer = AutoTokenizer.from_pretrained(weights, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(weights, local_files_only=True, dtype=torch.float32).to(device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) reads as unbound
    n_active = active_parameters(model)
    if train.activation_checkpointing:
        checkpoint_activations(model)
    if world.distributed:
        shard(model)
    model.train()
    reference = None
    if train.kl_coef > 0:  # frozen copy of the starting weights, in the compute dtype (it is never updated)
        reference = AutoModelForCausalLM.from_pretrained(start, local_files_only=True,
                                                         dtype=DTYPES[train.dtype])
        reference = reference.to(device).eval().requires_grad_(False)  # type: ignore[arg-type]  # (as above)
    optimizer = make_optimizer(model, train, lr=spec.lr, distributed=world.distributed)
    precision = Precision.named(train.dtype, device)
    rollout_precision = Precision.named(spec.suite.rollout.dtype or train.dtype, device)
    return Policy(model, optimizer, precision, world, reference, rollout_precision), tokenizer, n_active


def make_run_engine(suite: SuiteConfig, tokenizer: PreTrainedTokenizerBase, weights: Path, device: torch.device) -> RolloutEngine:
    from gspo_bench.models.tokenizer import EOS_ID

    eos_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else EOS_ID
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    limits = {"kv_cache_gib": suite.rollout.kv_cache_gib, "max_prompt_tokens": suite.rollout.max_prompt_tokens}
    if suite.train.sampling_mask and suite.rollout.engine == "vllm":  # vLLM returns kept sets only when built to
        limits["record_kept"] = True
    return make_engine(suite.rollout.engine, pad_id=pad_id, eos_id=eos_id, model_path=weights,
                       dtype=suite.rollout.dtype or suite.train.dtype, device=str(device), **suite.rollout.engine_options,
                       **{name: value for name, value in limits.items() if value is not None})


def check_distributed(suite: SuiteConfig, world: World) -> None:
    """What a torchrun run cannot do (yet), refused before any work."""
    if suite.eval.enabled:
        raise ValueError("eval: is not supported under torchrun; evaluate checkpoints afterwards with "
                         "`gspo-bench eval RUN_DIR`")
    if suite.rollout.engine != "hf":
        raise ValueError(f"rollout.engine {suite.rollout.engine} under torchrun: only hf is supported so far")
    per_minibatch = suite.rollout.prompts_per_step * suite.rollout.group_size // suite.train.minibatches
    if per_minibatch < world.size:
        raise ValueError(f"a minibatch has {per_minibatch} responses, fewer than the {world.size} ranks")
    if suite.train.kl_coef > 0:
        raise ValueError("kl_coef > 0 under torchrun is not supported yet (the reference model is not sharded)")


def recorded_task_baseline(suite: SuiteConfig) -> TaskBaselineRecord | None:
    """The chance baseline of the suite's task as its run records it (provenance.json's `task_baseline`;
    None for a task that declares none): the report reads it there and never builds a plugin's task."""
    from gspo_bench.tasks import task_baseline

    found = task_baseline(suite.task.name, suite.task.params)
    return None if found is None else {"mean": found.mean, "std": found.std, "samples": found.samples,
                                       "policy": found.policy}
