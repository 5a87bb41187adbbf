"""The RL training loop of one run (one objective, one seed), read top to bottom.

Per step:  P prompts x G responses -> rewards -> group advantages
           -> old-policy pass (no grad): old log-probs, routed experts, entropy, engine mismatch
           -> K minibatches: forward (routing replay for replay runs), objective loss, backward,
              grad clip, optimizer step; measurements accumulated over every minibatch
           -> one row of metrics, per-layer drift rows, checkpoint
until the suite's compute budget is spent. Every random draw of a step is seeded from
(seed, step), so a resumed run replays exactly what an uninterrupted one would have done.
"""

from __future__ import annotations

import math
import random
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from gspo_bench.compute import StepCompute, active_parameters
from gspo_bench.config import ObjectiveEntry, SuiteConfig
from gspo_bench.distributed import (
    World,
    device_for,
    gather_rows,
    shard,
    to_float,
    with_local_grad,
    world_from_env,
)
from gspo_bench.models.forward import response_forward
from gspo_bench.models.tokenizer import EOS_ID
from gspo_bench.moe import RoutingCapture, routing_drift
from gspo_bench.objectives import get_objective, group_advantages
from gspo_bench.objectives.metrics import measurements_off
from gspo_bench.results import RunDir, now, provenance
from gspo_bench.rollout import SamplingParams, make_engine, position_ids
from gspo_bench.rollout.mismatch import logprob_mismatch
from gspo_bench.tasks import make_task
from gspo_bench.train.measurements import MeanOf, StepMeasurements


@dataclass(frozen=True)
class RunSpec:
    suite: SuiteConfig
    entry: ObjectiveEntry
    seed: int
    run_dir: Path
    init_weights: Path  # directory of the (warm-started) weights every objective of this seed starts from


class Collapsed(Exception):
    pass


def step_seed(seed: int, step: int, stream: int) -> int:
    """An independent seed per (run seed, step, purpose)."""
    return (seed * 1_000_003 + step * 7_919 + stream * 104_729) % (2**31 - 1)


def budget_spent(suite: SuiteConfig, step: int, cum_tokens: float, cum_flops: float) -> bool:
    budget = suite.budget
    if step >= budget.max_steps:
        return True
    spent = {"steps": step, "tokens": cum_tokens, "flops": cum_flops}[budget.kind]
    return spent >= budget.value


def train_run(spec: RunSpec, resume: bool = False, on_step: Callable[[dict], None] | None = None) -> dict:
    """Run one objective x seed to its budget; returns the final status dict. Never raises for a
    collapsed run; a crash is recorded as `failed` with its message and re-raised."""
    from transformers import AutoModelForCausalLM

    suite, entry, seed = spec.suite, spec.entry, spec.seed
    train_cfg, rollout_cfg = suite.train, suite.rollout

    # ------------------------------------------------------------------ setup
    if train_cfg.threads:
        torch.set_num_threads(train_cfg.threads)
    device = torch.device(train_cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"train.device is {train_cfg.device} but this machine has no CUDA device")
    world = world_from_env(device)  # one process, or this rank of a torchrun job (FSDP2)
    device = device_for(world, device)
    out = RunDir(spec.run_dir, writable=world.is_main)  # only rank 0 writes
    if world.distributed:
        check_distributed(suite, world)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[train_cfg.dtype]
    from transformers import AutoTokenizer

    checkpoint = find_checkpoint(out.path) if resume else None
    weights = checkpoint / "model" if checkpoint is not None else spec.init_weights
    tokenizer = AutoTokenizer.from_pretrained(weights, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(weights, local_files_only=True, dtype=dtype).to(device)
    n_active = active_parameters(model)
    if world.distributed:
        shard(model)
    model.train()
    reference = None
    if train_cfg.kl_coef > 0:  # frozen copy of the starting weights
        reference = AutoModelForCausalLM.from_pretrained(spec.init_weights, local_files_only=True, dtype=dtype)
        reference = reference.to(device).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(  # fused: one kernel for all parameters (4x faster than the default on CPU)
        model.parameters(), lr=entry.lr or train_cfg.lr, betas=train_cfg.betas, weight_decay=train_cfg.weight_decay,
        fused=device.type in ("cpu", "cuda") and not world.distributed,
    )
    task = make_task(suite.task.name, **suite.task.params)
    eos_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else EOS_ID
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    engine = make_engine(rollout_cfg.engine, pad_id=pad_id, eos_id=eos_id, model_path=weights,
                         dtype=train_cfg.dtype, device=str(device), **rollout_cfg.engine_options)
    objective = get_objective(entry.objective)
    objective_kwargs = {**entry.clip_range(), **entry.kwargs}
    group = rollout_cfg.group_size
    measure = train_cfg.measure
    rollout_replay = entry.use_replay and entry.replay_source == "rollout"  # R3
    if rollout_replay and not getattr(engine, "returns_routing", False):
        raise ValueError(f"{entry.run_label}: rollout routing replay (R3) needs an engine that returns routed "
                         f"experts; rollout.engine {rollout_cfg.engine} does not (hf does)")

    step, cum_tokens, cum_flops, bad_steps, peak_reward = 0, 0.0, 0.0, 0, -math.inf
    rows: list[dict] = []
    layer_rows: list[dict] = []
    eval_rows: list[dict] = []
    if checkpoint is not None:
        state = torch.load(checkpoint / "state.pt", map_location=device, weights_only=False)
        load_optimizer_state(model, optimizer, state["optimizer"], world)
        step, cum_tokens, cum_flops = state["step"], state["cum_tokens"], state["cum_flops"]
        bad_steps, peak_reward = state["bad_steps"], state["peak_reward"]
        rows = [r for r in out.read_rows("metrics.parquet") if r["step"] <= step]  # drop rows past the checkpoint
        layer_rows = [r for r in out.read_rows("layers.parquet") if r["step"] <= step]
        eval_rows = [r for r in out.read_rows("eval.parquet") if r["step"] <= step]
        prov = out.read_json("provenance.json") or provenance(str(device))
        prov.setdefault("resumed", []).append({"at_step": step, "time": now()})
    else:
        prov = provenance(str(device))
    out.write_text("config.yaml", resolved_config(suite, entry, seed, lr=optimizer.param_groups[0]["lr"]))
    out.write_json("provenance.json", prov)
    out.write_status("running", step=step)
    evaluator = Evaluator(suite, entry, seed, out) if suite.eval.tasks else None

    try:
        if evaluator is not None and step == 0:  # the starting point of every eval curve
            eval_rows += evaluator(model, tokenizer, step=0, cum_flops=0.0)
            out.write_rows("eval.parquet", eval_rows)
        while not budget_spent(suite, step, cum_tokens, cum_flops):
            step += 1
            t_step = time.perf_counter()

            # ---------------------------------------------------------- rollout
            rng = random.Random(step_seed(seed, step, 0))
            examples = [task.train_example(rng) for _ in range(rollout_cfg.prompts_per_step)]
            params = SamplingParams(
                group_size=group, max_new_tokens=rollout_cfg.max_new_tokens, temperature=rollout_cfg.temperature,
                top_p=rollout_cfg.top_p, seed=step_seed(seed, step, 1), capture_routing=measure or rollout_replay,
                ignore_eos=rollout_cfg.ignore_eos, synced=world.distributed,
            )
            engine.sync_weights(model)
            try:
                rollout = engine.generate(model, [tokenizer.encode(ex.prompt) for ex in examples], params)
            except FloatingPointError as err:  # NaN/inf logits: the policy diverged
                raise Collapsed(f"rollout at step {step}: {err}") from None
            ids, attention, response_mask = rollout.input_ids, rollout.attention_mask, rollout.response_mask
            n_response = response_mask.shape[1]
            texts = tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True)
            rewards = torch.tensor([task.reward(t, examples[i // group]) for i, t in enumerate(texts)])
            advantages = group_advantages(rewards, group, scale=train_cfg.advantage_scale).to(device)  # [B]
            t_rollout = time.perf_counter() - t_step

            # ---------------------------------------------------------- old-policy pass (no grad)
            t_update = time.perf_counter()
            rollout_routing = None  # [L, B, L_seq, k] experts chosen while generating
            if rollout.routing is not None:
                rollout_routing = routing_for_training(rollout.routing, ids.shape[1]).to(device)
            all_rows = torch.arange(ids.shape[0], device=ids.device)
            mine = world.rows(all_rows)  # this rank's rows (all of them in one process)
            with torch.no_grad(), capturing(model, measure or entry.use_replay,
                                            replay=rollout_routing[:, mine] if rollout_replay else None) as old_capture:
                old_logp, entropy = response_forward(
                    model, ids[mine], attention[mine], n_response, rollout_cfg.temperature, with_entropy=True
                )  # [B, T] each
            old_logp, entropy = gather_rows(world, old_logp, all_rows), gather_rows(world, entropy, all_rows)
            old_routing = None  # [L, B, L_seq, k] the model's choice
            if old_capture is not None:
                old_routing = gather_rows(world, old_capture.routing, all_rows, dim=1)
            mismatch = logprob_mismatch(old_logp, rollout.sampling_logp, response_mask) if measure else {}
            if measure and rollout_routing is not None:  # routing gap rollout -> training (what R3 removes)
                gap = routing_drift(rollout_routing, old_routing, attention)
                mismatch.update({"moe/rollout_gap": gap["moe/drift"], "moe/rollout_gap_expert": gap["moe/drift_expert"]})
            replayed = rollout_routing if rollout_replay else old_routing  # what replay runs force
            if train_cfg.old_logp == "rollout":  # section 5.4: trust the engine's log-probs as pi_old
                old_logp = rollout.sampling_logp.to(old_logp.device)
            ref_logp = None
            if reference is not None:
                with torch.no_grad():
                    ref_logp, _ = response_forward(reference, ids, attention, n_response, rollout_cfg.temperature)
            n_seq_tokens = int(attention.sum())
            compute_forward = int(attention.sum()) + n_seq_tokens * (1 + (reference is not None))  # generation + passes
            compute_trained = 0

            # ---------------------------------------------------------- K minibatch updates
            order = torch.randperm(len(rewards), generator=torch.Generator().manual_seed(step_seed(seed, step, 2)))
            measured, drift, layer_drift = StepMeasurements(), MeanOf(), MeanOf()
            losses, grad_norms, nonfinite = [], [], 0
            for j, idx in enumerate(order.chunk(train_cfg.minibatches)):
                idx = idx.to(device)
                local = world.rows(idx)  # this rank's rows of the minibatch
                replay = replayed[:, local] if entry.use_replay else None
                with capturing(model, measure or replay is not None, replay=replay) as capture:
                    logp, _ = response_forward(model, ids[local], attention[local], n_response, rollout_cfg.temperature)
                # the whole minibatch's log-probs, with gradient into this rank's rows only: loss and
                # measurements are the single-process ones, gradients sum over ranks to its gradient
                logp = with_local_grad(world, gather_rows(world, logp, idx), logp)
                with measurements_off(not measure):
                    loss, metrics = objective(
                        logp=logp, old_logp=old_logp[idx], advantages=advantages[idx], mask=response_mask[idx],
                        **objective_kwargs,
                    )
                if ref_logp is not None:  # k3 KL(pi_theta || pi_ref) over response tokens
                    log_ref_ratio = (ref_logp[idx] - logp).clamp(-20, 20)
                    kl_ref = ((log_ref_ratio.exp() - log_ref_ratio - 1) * response_mask[idx]).sum() / response_mask[idx].sum().clamp(min=1)
                    loss = loss + train_cfg.kl_coef * kl_ref
                    metrics["kl/ref"] = kl_ref.detach()
                compute_trained += int(attention[idx].sum())
                optimizer.zero_grad(set_to_none=True)
                if not torch.isfinite(loss):
                    nonfinite += 1
                    continue
                (loss * world.size).backward()  # FSDP2 averages gradients over ranks: undo the 1/W
                grad_norm = to_float(torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip))
                if not math.isfinite(grad_norm):
                    nonfinite += 1
                    optimizer.zero_grad(set_to_none=True)
                    continue
                optimizer.step()
                losses.append(float(loss.detach()))
                grad_norms.append(float(grad_norm))
                mask_idx = response_mask[idx]
                measured.add(metrics, n_tokens=float(mask_idx.sum()), n_responses=float(mask_idx.any(-1).sum()))
                if measure and j > 0:  # minibatch j ran after j updates from the old policy: its routing drifted
                    stats = routing_drift(old_routing[:, idx], gather_rows(world, capture.routing, idx, dim=1),
                                          attention[idx])
                    drift.add({k: stats[k] for k in ("moe/drift", "moe/drift_expert")})
                    layer_drift.add({k: v for k, v in stats.items() if k.startswith("moe/drift_layer_")})

            after = {}
            if measure and (train_cfg.drift_after_update or train_cfg.minibatches == 1):
                with torch.no_grad(), RoutingCapture(model) as capture:  # same positions as the old pass
                    model(input_ids=ids[mine], attention_mask=attention[mine],
                          position_ids=position_ids(attention[mine]), logits_to_keep=1)
                compute_forward += n_seq_tokens
                stats = routing_drift(old_routing, gather_rows(world, capture.routing, all_rows, dim=1), attention)
                after = {"moe/drift_after": stats["moe/drift"], "moe/drift_expert_after": stats["moe/drift_expert"]}
                if train_cfg.minibatches == 1:  # no minibatch 2..K: the drift of the step is the one after it
                    drift.add({"moe/drift": stats["moe/drift"], "moe/drift_expert": stats["moe/drift_expert"]})
                    layer_drift.add({k: v for k, v in stats.items() if k.startswith("moe/drift_layer_")})
            t_update = time.perf_counter() - t_update

            # ---------------------------------------------------------- the row of this step
            compute = StepCompute(tokens_forward=compute_forward, tokens_trained=compute_trained)
            cum_tokens += compute.tokens
            cum_flops += compute.flops(n_active)
            valid_entropy = entropy[response_mask]
            row = {
                "step": step, "objective": entry.objective, "label": entry.run_label, "seed": seed,
                "replay": entry.use_replay,
                "reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()),
                "reward/accuracy": float((rewards >= 1.0).float().mean()),
                "response/len_mean": float(response_mask.sum(-1).float().mean()),
                "response/len_max": int(response_mask.sum(-1).max()),
                "loss": sum(losses) / len(losses) if losses else math.nan,
                **measured.result(),
                "entropy/mean": float(valid_entropy.mean()) if valid_entropy.numel() else math.nan,
                "grad/norm": sum(grad_norms) / len(grad_norms) if grad_norms else math.nan,
                **drift.result(), **after, **mismatch,
                "nonfinite/minibatches": nonfinite,
                "time/rollout_s": t_rollout, "time/update_s": t_update, "time/step_s": time.perf_counter() - t_step,
                "compute/tokens": compute.tokens, "compute/cum_tokens": cum_tokens,
                "compute/flops": compute.flops(n_active), "compute/cum_flops": cum_flops,
                "lr": optimizer.param_groups[0]["lr"],
            }
            rows.append(row)
            for key, value in layer_drift.result().items():
                layer_rows.append({"step": step, "label": entry.run_label, "seed": seed,
                                   "layer": int(key.rsplit("_", 1)[1]), "moe/drift": value})
            out.write_rows("metrics.parquet", rows)
            out.write_rows("layers.parquet", layer_rows)

            # ---------------------------------------------------------- collapse checks
            bad_steps = bad_steps + 1 if nonfinite else 0
            reason = None
            if bad_steps >= suite.collapse.nonfinite_patience:
                reason = f"non-finite loss or gradients in {bad_steps} consecutive steps"
            elif not all_finite(model, world):
                reason = "non-finite parameters"
            elif suite.collapse.reward_floor is not None and len(rows) >= suite.collapse.reward_window:
                window = sum(r["reward/mean"] for r in rows[-suite.collapse.reward_window :]) / suite.collapse.reward_window
                peak_reward = max(peak_reward, window)
                if peak_reward >= 2 * suite.collapse.reward_floor and window <= suite.collapse.reward_floor:
                    reason = f"reward collapsed to {window:.3f} (windowed peak {peak_reward:.3f})"
            if on_step is not None and world.is_main:
                on_step(row)
            if reason:
                raise Collapsed(reason)

            last = budget_spent(suite, step, cum_tokens, cum_flops)
            if evaluator is not None and (last or (suite.eval.every and step % suite.eval.every == 0)):
                eval_rows += evaluator(model, tokenizer, step=step, cum_flops=cum_flops)
                out.write_rows("eval.parquet", eval_rows)
            if step % train_cfg.checkpoint_every == 0 or last:
                save_checkpoint(out.path, model, tokenizer, optimizer, world, step=step, cum_tokens=cum_tokens,
                                cum_flops=cum_flops, bad_steps=bad_steps, peak_reward=peak_reward)
    except Collapsed as why:
        prov["end"] = now()
        out.write_json("provenance.json", prov)
        out.write_status("collapsed", str(why), step=step)
        return {"status": "collapsed", "message": str(why), "step": step}
    except BaseException as err:
        prov["end"] = now()
        out.write_json("provenance.json", prov)
        tail = "".join(traceback.format_exception_only(type(err), err)).strip()
        out.write_text("error.log", traceback.format_exc())  # the whole traceback, next to status.json
        out.write_status("failed", tail, step=step)
        raise
    prov["end"] = now()
    out.write_json("provenance.json", prov)
    out.write_status("done", step=step, cum_flops=cum_flops, cum_tokens=cum_tokens)
    return {"status": "done", "message": "", "step": step}


def all_finite(model, world: World = World()) -> bool:
    """Whether every parameter is finite, in one pass: per-parameter max |x| is finite exactly then.
    Under FSDP2 each rank checks its shards and the ranks agree on the answer."""
    shards = [p.detach().to_local() if hasattr(p, "to_local") else p.detach() for p in model.parameters()]
    largest = torch._foreach_norm([t for t in shards if t.numel()], ord=float("inf"))
    finite = torch.isfinite(torch.stack([m.float() for m in largest])).all().float()
    if world.distributed:
        torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
    return bool(finite)


def check_distributed(suite: SuiteConfig, world: World) -> None:
    """What a torchrun run cannot do (yet), refused before any work."""
    if suite.eval.tasks:
        raise ValueError("eval: is not supported under torchrun; evaluate checkpoints afterwards with "
                         "`gspo-bench eval RUN_DIR`")
    if suite.rollout.engine != "hf":
        raise ValueError(f"rollout.engine {suite.rollout.engine} under torchrun: only hf is supported so far")
    per_minibatch = suite.rollout.prompts_per_step * suite.rollout.group_size // suite.train.minibatches
    if per_minibatch < world.size:
        raise ValueError(f"a minibatch has {per_minibatch} responses, fewer than the {world.size} ranks")
    if suite.train.kl_coef > 0:
        raise ValueError("kl_coef > 0 under torchrun is not supported yet (the reference model is not sharded)")


def load_optimizer_state(model, optimizer, state: dict, world: World) -> None:
    """Optimizer state from a checkpoint's full state dict (keyed by parameter name), sharded as the
    model is (one process or FSDP2)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def routing_for_training(routing: torch.Tensor, length: int) -> torch.Tensor:
    """Rollout routing [L, B, L_seq - 1, k] extended to the training forward's L_seq positions.

    Generation never routes its last sampled token (nothing is sampled after it); that position
    only predicts beyond the response, so no log-prob depends on it: it gets the experts of the
    position before it.
    """
    missing = length - routing.shape[2]
    if missing < 0 or routing.shape[2] == 0:
        raise ValueError(f"rollout routing covers {routing.shape[2]} positions, the batch has {length}")
    if missing == 0:
        return routing
    return torch.cat([routing, routing[:, :, -1:].expand(-1, -1, missing, -1)], dim=2)


def capturing(model, enabled: bool, replay: torch.Tensor | None = None):
    """A RoutingCapture (recording, and replaying `replay`), or a block yielding None when not `enabled`."""
    return RoutingCapture(model, replay=replay) if enabled else nullcontext()


def resolved_config(suite: SuiteConfig, entry: ObjectiveEntry, seed: int, lr: float) -> str:
    """The suite plus everything this run resolved: objective, replay, clip range, lr, seed."""
    run = {"label": entry.run_label, "objective": entry.objective, "replay": entry.use_replay,
           "replay_from": entry.replay_source if entry.use_replay else None, "seed": seed,
           "lr": lr, **entry.clip_range(), "kwargs": entry.kwargs}
    return yaml.safe_dump({"run": run, "suite": suite.model_dump(mode="json")}, sort_keys=False)


class Evaluator:
    """Held-out evaluation through lm-eval at chosen steps; rows for eval.parquet."""

    def __init__(self, suite: SuiteConfig, entry: ObjectiveEntry, seed: int, out: RunDir):
        from gspo_bench.evaluation import resolve_tasks, write_task_files

        cfg = suite.eval
        self.cfg, self.seed, self.entry = cfg, seed, entry
        self.include = out.path / "eval_tasks"
        self.names = []
        for name, params in resolve_tasks(cfg.tasks, suite.task.name, suite.task.params):
            if params is None:
                self.names.append(name)
                continue
            self.names.append(write_task_files(
                self.include, name, params, limit=cfg.limit, samples=cfg.samples,
                max_new_tokens=cfg.max_new_tokens or suite.rollout.max_new_tokens,
                temperature=cfg.temperature or suite.rollout.temperature, greedy=cfg.greedy,
            ))

    def __call__(self, model, tokenizer, step: int, cum_flops: float) -> list[dict]:
        from gspo_bench.evaluation import evaluate

        start = time.perf_counter()
        scores = evaluate(model, tokenizer, self.names, self.include, batch_size=self.cfg.batch_size,
                          seed=step_seed(self.seed, step, 3))
        elapsed = time.perf_counter() - start
        return [{"step": step, "label": self.entry.run_label, "seed": self.seed, "task": task,
                 "score": s["score"], "stderr": s["stderr"], "metric": s["metric"], "samples": self.cfg.samples,
                 "compute/cum_flops": cum_flops, "time/eval_s": elapsed} for task, s in scores.items()]


def find_checkpoint(run_dir: Path) -> Path | None:
    """The latest complete checkpoint of a run (also one left mid-swap by a crash), or None."""
    for name in ("checkpoint", ".checkpoint-old"):
        path = Path(run_dir) / name
        if (path / "state.pt").is_file() and (path / "model" / "config.json").is_file():
            return path
    return None


def save_checkpoint(run_dir: Path, model, tokenizer, optimizer, world: World = World(), **scalars) -> None:
    """Write `run_dir/checkpoint/` (model/ in Hugging Face format + state.pt) by building it aside
    and swapping it in, so a crash never leaves a half-written checkpoint as the latest one.
    The optimizer state is a full state dict keyed by parameter name, the same whether one process
    or FSDP2 ranks wrote it; under FSDP2 every rank takes part in gathering it and rank 0 writes."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # the model state first: under FSDP2 the optimizer state dict needs what gathering it sets up
    model_state = get_model_state_dict(model, options=options) if world.distributed else None
    optim_state = get_optimizer_state_dict(model, optimizer, options=options)
    if not world.is_main:
        return
    run_dir = Path(run_dir)
    tmp = Path(tempfile.mkdtemp(prefix=".checkpoint-new-", dir=run_dir))
    try:
        model.save_pretrained(tmp / "model", state_dict=model_state)
        tokenizer.save_pretrained(tmp / "model")
        torch.save({"optimizer": optim_state, **scalars}, tmp / "state.pt")
        final, old = run_dir / "checkpoint", run_dir / ".checkpoint-old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
