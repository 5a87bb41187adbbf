"""The RL training loop of one run (one objective, one seed), read top to bottom.

Per step (`run_step`), each phase a tested function of `gspo_bench.train`:
    rollout          P prompts x G responses -> rewards -> group advantages         (RolloutBatch)
                     (under rollout.lag, a batch sampled that many updates before: train.lag)
    old-policy pass  no grad: pi_old log-probs, routed experts, entropy, mismatch    (OldPolicy)
    K updates        forward (replaying routing for replay runs), objective, backward,
                     clip, optimizer step; measurements of every minibatch           (UpdateResult)
    row              one host copy of everything measured -> one row of metrics      (StepRow)
`train_run` repeats it until the suite's compute budget is spent, writing rows, checkpoints and
status as it goes. Every random draw of a step is seeded from (seed, step), so a resumed run
replays exactly what an uninterrupted one would have done.
"""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from gspo_bench.config import RunSpec
from gspo_bench.rollout import SamplingParams
from gspo_bench.rundir.failure import failure_message
from gspo_bench.rundir.folder import REQUIRED_COLUMNS, now
from gspo_bench.runtime.distributed import World
from gspo_bench.runtime.hardware import device_peak_flops, peak_memory_gib, reset_peak_memory, step_figures
from gspo_bench.runtime.kernels import torch_threads
from gspo_bench.train.checkpoint import save_checkpoint
from gspo_bench.train.lag import (
    LAG_STREAM,
    LagSchedule,
    Sampled,
    lag_columns,
    last_step,
    record_lagged_routes,
    take_batch,
)
from gspo_bench.train.old_policy import learner_routes, nondeterminism_floor, old_policy_pass
from gspo_bench.train.replay_scoring import SCORING_PASSES, step_replay_scores
from gspo_bench.train.rollout import RolloutBatch, collect_rollout, draw_examples
from gspo_bench.train.row import StepRow, build_row, step_values, with_route_confidence, with_sampler_routes
from gspo_bench.train.setup import Run, open_run
from gspo_bench.train.state import Collapsed, RunState, budget_spent, collapse_reason
from gspo_bench.train.update import (
    UpdateSettings,
    drift_after_one,
    drift_after_update,
    layer_means,
    update_policy,
)

if TYPE_CHECKING:
    from gspo_bench.config import SuiteConfig

__all__ = ["run_step", "step_seed", "train_run"]


def sweep_cell(value: Any) -> Any:
    """A sweep point's value as a metrics row holds it: a mapping or list as its JSON text (a table
    cannot hold an empty struct, `engine_options: {}`, nor mix shapes across points), anything else as
    it is."""
    return json.dumps(value) if isinstance(value, dict | list) else value


def step_seed(seed: int, step: int, stream: int) -> int:
    """An independent seed per (run seed, step, purpose). One stream per purpose, never shared (two
    purposes on one stream draw coupled numbers): 0 the step's prompts, 1 the rollout's sampling, 2 the
    minibatch order, 3 the evaluation's sampling, 4 an objective's own draws (Clip-Cov's generator), 5 the
    step's rollout lag (`{uniform: S}`: `train.lag.LAG_STREAM`)."""
    return (seed * 1_000_003 + step * 7_919 + stream * 104_729) % (2**31 - 1)


def train_run(spec: RunSpec, resume: bool = False, on_step: Callable[[dict], None] | None = None,
              allow_changed: bool = False) -> dict:
    """Run one objective x seed to its budget, at the suite's `train.threads` (the process's own count
    restored after); returns the final status dict. Never raises for a collapsed run; a crash is
    recorded as `failed` (traceback in error.log) and re-raised."""
    with torch_threads(spec.suite.train.threads):
        return _train_run(spec, resume, on_step, allow_changed)


def _train_run(spec: RunSpec, resume: bool, on_step: Callable[[dict], None] | None, allow_changed: bool) -> dict:
    # ------------------------------------------------------------------ setup
    run, state = open_run(spec, resume, allow_changed)
    suite, out = run.suite, run.out
    try:
        if run.evaluator is not None and state.step == 0:  # the starting point of every eval curve
            evaluate(run, state)
        # -------------------------------------------------------------- the loop
        while not budget_spent(suite.budget, state):
            state.step += 1
            outcome = run_step(run, state.step, state.waiting)
            state.rows.append(outcome.row | state.add_compute(outcome.compute, run.n_active))
            state.layer_rows += outcome.layer_rows
            out.write_rows("metrics.parquet", state.rows, columns=REQUIRED_COLUMNS)
            out.write_status("running", step=state.step)
            out.write_rows("layers.parquet", state.layer_rows)
            if on_step is not None and run.world.is_main:
                on_step(state.rows[-1])
            if run.tracker is not None:
                run.tracker.log_row(state.rows[-1])
            reason = collapse_reason(suite.collapse, state, rollout_finite=outcome.rollout_finite,
                                     params_finite=outcome.params_finite)
            if reason:
                raise Collapsed(reason)
            # ---------------------------------------------------------- evaluation, checkpoint
            last = budget_spent(suite.budget, state)
            if run.evaluator is not None and (last or (suite.eval.every and state.step % suite.eval.every == 0)):
                evaluate(run, state)
            if state.step % suite.train.checkpoint_every == 0 or last:
                save_checkpoint(out.path, run.policy.model, run.tokenizer, run.policy.trainer(), run.world,
                                **state.scalars())
    except Collapsed as why:
        return finish(run, state, "collapsed", str(why))
    except BaseException as err:
        with contextlib.suppress(OSError):  # a full disk may refuse these too: the error itself still comes
            out.write_text("error.log", traceback.format_exc())  # the whole traceback, next to status.json
        with contextlib.suppress(OSError):
            finish(run, state, "failed", failure_message(err, out.path))
        raise
    else:
        if run.world.is_main:  # a resumed run that ends well keeps no old traceback
            (out.path / "error.log").unlink(missing_ok=True)
        return finish(run, state, "done", "", cum_flops=state.cum_flops, cum_tokens=state.cum_tokens)
    finally:
        if run.lock is not None:
            run.lock.release()


def update_settings(run: Run, step: int) -> UpdateSettings:
    """What the step's K minibatch updates take from the suite, the run's entry and its objective."""
    suite, entry, train = run.suite, run.spec.entry, run.suite.train
    objective = entry.spec()
    return UpdateSettings(temperature=suite.rollout.temperature, grad_clip=train.grad_clip, kl_coef=train.kl_coef,
                          measure=train.measure, correction=entry.correction_fn(), inputs=objective.inputs,
                          # objectives that draw at random (clip_cov) repeat per run, on their own stream
                          generator=torch.Generator().manual_seed(step_seed(run.spec.seed, step, 4)),
                          coupled=objective.coupled,
                          micro_batch_tokens=train.micro_batch_tokens, head_chunk=train.logprob_chunk_tokens,
                          aux_coef=suite.model.router_aux_loss_coef)


def run_step(run: Run, step: int, waiting: dict[int, Sampled] | None = None) -> StepRow:
    """One RL step: its batch (sampled now, or under `rollout.lag` earlier and kept in `waiting`, the
    run's batches sampled ahead) -> old-policy pass -> K minibatch updates -> the step's row."""
    suite, entry, seed, policy = run.suite, run.spec.entry, run.spec.seed, run.policy
    rollout_cfg, train = suite.rollout, suite.train
    objective = entry.spec()  # its inputs: the extra inputs the objective declares
    start = time.perf_counter()
    reset_peak_memory(policy.device)  # gpu/peak_mem_gib: this step's own peak
    # ------------------------------------------------------------------ rollout (this step's, and those it samples ahead)
    sampled = step_batch(run, step, {} if waiting is None else waiting)
    batch, replay = sampled.batch, entry.replay_source if entry.use_replay else None
    t_rollout = time.perf_counter() - start
    # ------------------------------------------------------------------ old-policy pass (no grad)
    old = old_policy_pass(policy, batch, temperature=rollout_cfg.temperature, replay=replay,
                          record_routing=train.measure, logp_source=train.old_logp, measure=train.measure,
                          gate_scores="router_shift" in objective.inputs, head_chunk=train.logprob_chunk_tokens,
                          decoupled_cap=train.decoupled_cap, replay_weights=entry.use_replay and entry.replays_weights)
    scores = step_replay_scores(policy, batch, train.replay_scoring, temperature=rollout_cfg.temperature,
                                head_chunk=train.logprob_chunk_tokens)  # before any update: replay_scoring
    # ------------------------------------------------------------------ K minibatch updates
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(step_seed(seed, step, 2)))
    update = update_policy(policy, run.objective, batch, old, order, train.minibatches, update_settings(run, step))
    after = {}
    if train.measure and (train.drift_after_update or train.minibatches == 1):
        after = drift_after_update(policy, batch, old)
    # once per run: what identical forwards and the rollout precision give
    floor = nondeterminism_floor(policy, batch, replay, temperature=rollout_cfg.temperature,
                                 head_chunk=train.logprob_chunk_tokens) if train.measure and step == 1 else {}
    # ------------------------------------------------------------------ the row (one host copy)
    passes = 2 + (policy.reference is not None) + bool(after) + SCORING_PASSES * bool(scores)  # gen, old, ref, after, scoring
    passes += batch.lagged_routing is not None  # lagged R2's routes: a forward of this batch, replay_lag steps ago
    # the sampler's forwards are this batch's generation, counted once, here, whenever it was sampled
    lag = lag_columns(sampled)
    values = step_values(batch, old, update, after, tokens_forward=passes * batch.attention_mask.sum()) | floor | scores | lag
    layers = update.layers
    if train.minibatches == 1 and after:  # no minibatch 2..K: the step's drift is the one after its update
        layers, one = one_update_drift(after, applied=update.metrics["nonfinite/minibatches"] == 0)
        values |= one
    layers = with_sampler_routes(with_route_confidence(layers, old), old)
    identity = {"step": step, "objective": entry.objective, "label": entry.run_label, "seed": seed,
                "replay": entry.use_replay, **{f"sweep/{name}": sweep_cell(value) for name, value in run.spec.sweep.items()},
                **({} if run.spec.warm_start_seed is None else {"warm_start/seed": run.spec.warm_start_seed})}
    outcome = build_row(identity, values, layers, {"rollout_finite": batch.finite,
                                                   "params_finite": all_finite(policy.model, policy.world)})
    t_step = time.perf_counter() - start
    outcome.row.update({"time/rollout_s": t_rollout, "time/update_s": t_step - t_rollout, "time/step_s": t_step,
                        "lr": policy.trainer().param_groups[0]["lr"]})
    # ------------------------------------------------------------------ GPU figures (gspo_bench.runtime.hardware)
    outcome.row.update(step_figures(
        response_tokens=outcome.row["response/len_mean"] * len(batch), rollout_s=t_rollout,
        tokens_trained=outcome.compute.tokens_trained, update_s=t_step - t_rollout,
        flops=outcome.compute.flops(run.n_active), step_s=t_step, peak_flops=device_peak_flops(policy.device),
        gpus=policy.world.size, peak_mem_gib=peak_memory_gib(policy.device)))
    return outcome


def step_batch(run: Run, step: int, waiting: dict[int, Sampled]) -> Sampled:
    """Step `step`'s batch, on the training device: sampled now, or under `rollout.lag` earlier and taken
    from `waiting`, where the batches the policy now samples for later steps go (`train.lag`)."""
    seed, entry, policy = run.spec.seed, run.spec.entry, run.policy
    schedule = LagSchedule(run.suite.rollout.lag, lambda u: step_seed(seed, u, LAG_STREAM), last_step(run.suite.budget))
    if entry.use_replay and entry.replay_source == "lagged" and entry.replay_lag is not None:  # before any update
        record_lagged_routes(waiting, step, entry.replay_lag,
                             lambda b: learner_routes(policy, b, run.suite.train.logprob_chunk_tokens), policy.device)
    return take_batch(waiting, schedule, step, lambda u: sample_batch(run, u), policy.device)


def sample_batch(run: Run, step: int) -> RolloutBatch:
    """Step `step`'s batch (its prompts and sampling seed) sampled by the policy now, scored and with its
    advantages (under `rollout.lag` the policy now is that of an earlier step than `step`)."""
    suite, entry, seed, policy = run.suite, run.spec.entry, run.spec.seed, run.policy
    train = suite.train
    replay = entry.replay_source if entry.use_replay else None
    params = sampling_params(suite, seed, step, policy.world,
                             routing=train.measure or replay in ("rollout", "lagged") or train.replay_scoring)
    examples = draw_examples(run.task, suite.rollout.prompts_per_step, step_seed(seed, step, 0))
    return collect_rollout(policy, run.engine, run.tokenizer, run.task, examples, params, train.advantage_scale,
                           step_penalty=entry.step_penalty if entry.credit == "step" else None,
                           prompt_format=run.prompt_format)


def one_update_drift(after: dict, applied: torch.Tensor) -> tuple[dict, dict]:
    """A step of one minibatch: its drift is the one measured after its only update (`applied`, 0-d bool: that update
    was taken; a skipped one leaves no drift after one update). (per-layer values [1, L], the row's values)."""
    layers = {"moe/drift": after["moe/drift_layer"][None], "moe/drift_expert": after["moe/drift_expert_layer"][None],
              **{key.removeprefix("layer:"): v[None] for key, v in after.items() if key.startswith("layer:")}}
    drift = {"moe/drift": after["moe/drift_after"], "moe/drift_expert": after["moe/drift_expert_after"]}
    return layers, {**drift, **drift_after_one(drift, applied), **layer_means({key: v[0] for key, v in layers.items()})}


def sampling_params(suite: SuiteConfig, seed: int, step: int, world: World, routing: bool) -> SamplingParams:
    r = suite.rollout
    return SamplingParams(group_size=r.group_size, max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                          top_p=r.top_p, top_k=r.top_k, seed=step_seed(seed, step, 1), capture_routing=routing,
                          ignore_eos=r.ignore_eos, synced=world.distributed, record_kept=suite.train.sampling_mask)


def evaluate(run: Run, state: RunState) -> None:
    """Held-out scores of the policy now, appended to eval.parquet."""
    if run.evaluator is None:
        raise RuntimeError("evaluate: this run has no evaluator (eval is off)")
    start = time.perf_counter()
    scores = run.evaluator(run.policy.model, run.tokenizer, seed=step_seed(run.spec.seed, state.step, 3))
    elapsed = time.perf_counter() - start
    state.eval_rows += [{"step": state.step, "label": run.spec.entry.run_label, "seed": run.spec.seed, "task": task,
                         "score": s["score"], "stderr": s["stderr"], "metric": s["metric"], "engine": s["engine"],
                         "samples": run.suite.eval.samples, "compute/cum_flops": state.cum_flops,
                         "time/eval_s": elapsed} for task, s in scores.items()]
    run.out.write_rows("eval.parquet", state.eval_rows)
    if run.tracker is not None:
        run.tracker.log_eval(state.step, scores)


def finish(run: Run, state: RunState, status: str, message: str, **extra: Any) -> dict[str, Any]:
    run.provenance["end"] = now()
    run.out.write_provenance(run.provenance)
    run.out.write_status(status, message, step=state.step, **extra)
    if run.tracker is not None:
        run.tracker.close(status)
    return {"status": status, "message": message, "step": state.step}


def all_finite(model: torch.nn.Module, world: World = World()) -> torch.Tensor:
    """0-d bool: every parameter is finite, from one pass (per-parameter max |x| is finite exactly
    then), on the device. Under FSDP2 each rank checks its shards and the ranks agree on the answer."""
    shards = [_local_shard(p.detach()) for p in model.parameters()]
    largest = torch._foreach_norm([t for t in shards if t.numel()], ord=float("inf"))
    finite = torch.isfinite(torch.stack([m.float() for m in largest])).all().float()
    if world.distributed:
        torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
    return finite.bool()


def _local_shard(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (FSDP2), or `t` itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None else t
