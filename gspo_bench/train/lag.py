"""Rollout lag (`rollout.lag`): the batch step t trains on was sampled by the policy of L_t updates
before, the policy at the start of step t - L_t, as an asynchronous trainer's batches are.

The mechanism is a queue of sampled batches, exact and cheap at these sizes: at the start of step s the
learner's policy (s - 1 updates old) samples every batch whose sampling step is s, each with the prompts
and sampling seed of the step that will train on it (so a lagged run sees the same prompts in the same
order as a synchronous one, only from an older policy), and those batches wait, keyed by that step,
until it comes. Nothing is forwarded twice and no weights are copied: a waiting batch is its tokens,
the sampler's log-probs mu and routes, and its rewards (a few kB here), kept in host memory until its
step, and any engine can fill it.

Step u's lag is L_u = min(drawn, u - 1), drawn = the fixed lag S, or (`{uniform: S}`) an integer drawn
uniformly from 0..S by a generator seeded with (run seed, u) alone (stream 5 of `step_seed`), so the
draws need no state of their own and a resumed run draws what an uninterrupted one did. Over the first
S steps no policy S updates old exists: step u trains on a batch of the starting policy, lag u - 1 (the
warm-up an asynchronous trainer has too). Step u's batch is sampled at step max(1, u - L_u).

The waiting batches are part of the run's state (`RunState.waiting`), saved in its checkpoint. A batch is
not sampled for a step beyond the run's last possible step (the step budget or `budget.max_steps`); a
step whose batch is not waiting (a resume with a larger budget or another lag, `--allow-changed`) samples
its own at once, with the lag that makes (0), as its row says."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gspo_bench.config import BudgetConfig
from gspo_bench.config.schema import UniformLag
from gspo_bench.moe import routing_drift
from gspo_bench.objectives.inputs import safe_exp
from gspo_bench.objectives.kl import k3
from gspo_bench.train.rollout import RolloutBatch

LAG_STREAM = 5  # `step_seed` stream of the lag draws


@dataclass(frozen=True)
class LagSchedule:
    """Which step's start policy samples each step's batch (module docstring)."""

    setting: int | UniformLag  # rollout.lag
    draw_seed: Callable[[int], int]  # step -> the seed of its lag draw (`step_seed(seed, step, LAG_STREAM)`)
    last_step: int  # no batch is sampled for a later step

    @property
    def largest(self) -> int:
        return self.setting.uniform if isinstance(self.setting, UniformLag) else self.setting

    def drawn(self, step: int) -> int:
        """Step `step`'s lag before the warm-up bound: the fixed lag, or its uniform draw."""
        if isinstance(self.setting, UniformLag):
            return random.Random(self.draw_seed(step)).randint(0, self.setting.uniform)
        return self.setting

    def lag(self, step: int) -> int:
        """The updates between the policy that samples step `step`'s batch and the one that trains on it."""
        return min(self.drawn(step), step - 1)

    def sampled_at(self, step: int) -> int:
        """The step at whose start step `step`'s batch is sampled."""
        return step - self.lag(step)

    def to_sample(self, step: int) -> list[int]:
        """The steps whose batches the policy at the start of step `step` samples, in order."""
        return [u for u in range(step, min(step + self.largest, self.last_step) + 1) if self.sampled_at(u) == step]


def last_step(budget: BudgetConfig) -> int:
    """The last step a run may reach: its step budget (rounded up) or its step cap."""
    return min(budget.max_steps, math.ceil(budget.value)) if budget.kind == "steps" else budget.max_steps


@dataclass(frozen=True)
class Sampled:
    """A sampled batch and when: `step` trains on it; the policy at the start of `sampled_at` sampled it."""

    batch: RolloutBatch
    step: int
    sampled_at: int

    @property
    def lag(self) -> int:
        return self.step - self.sampled_at

    def on(self, device: torch.device | str) -> Sampled:
        """The same batch with its tensors on `device` (rewards stay on the host), copied exactly."""
        moved = {f.name: getattr(self.batch, f.name) for f in dataclasses.fields(self.batch)}
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) and k != "rewards" else v for k, v in moved.items()}
        return dataclasses.replace(self, batch=RolloutBatch(**moved))

    def record(self) -> dict[str, Any]:
        """What a checkpoint keeps of it: plain tensors and numbers (`from_record` reads them back)."""
        batch = {f.name: getattr(self.batch, f.name) for f in dataclasses.fields(self.batch)}
        return {"step": self.step, "sampled_at": self.sampled_at, "batch": batch}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Sampled:
        """The batch as `record` kept it (its tensors where the checkpoint was loaded to; rewards on the host)."""
        batch = record["batch"]
        return cls(RolloutBatch(**batch), record["step"], record["sampled_at"]).on("cpu")


def take_batch(waiting: dict[int, Sampled], schedule: LagSchedule, step: int,
               sample: Callable[[int], RolloutBatch], device: torch.device | str = "cpu") -> Sampled:
    """Step `step`'s batch, on `device` (the training device): the policy now (at the start of `step`)
    samples, with `sample(u)`, the batch of every step u the schedule gives it (one not already waiting);
    those for later steps wait in `waiting`, in host memory (S batches of routes and log-probs need not
    hold device memory), and the one for `step` is taken (sampled now if it was not waiting)."""
    for u in schedule.to_sample(step):
        if u not in waiting:
            sampled = Sampled(sample(u), step=u, sampled_at=step)
            waiting[u] = sampled if u == step else sampled.on("cpu")
    taken = waiting.pop(step, None)
    return taken.on(device) if taken is not None else Sampled(sample(step), step=step, sampled_at=step)


def record_lagged_routes(waiting: dict[int, Sampled], step: int, delta: int,
                         routes_of: Callable[[RolloutBatch], torch.Tensor], device: torch.device | str = "cpu") -> None:
    """Lagged R2 (`replay_from: lagged`, `replay_lag` delta): at the start of step `step`, the learner's routes
    (`routes_of`, a no-grad forward on `device`) on the waiting batch of step `step` + delta, kept with it
    (`lagged_routing`, in host memory) for that step to replay: the routes of the policy delta updates before
    it. Only where that batch was sampled before `step`: a sampler no older than delta updates leaves the batch
    its own routes, which the step replays instead. The forward is counted in the compute of the step that
    trains on the batch, as its generation is."""
    later = waiting.get(step + delta)
    if later is None or later.sampled_at >= step or later.batch.lagged_routing is not None:
        return
    routes = routes_of(later.on(device).batch).cpu()
    waiting[step + delta] = dataclasses.replace(later, batch=dataclasses.replace(later.batch, lagged_routing=routes))


def lag_columns(sampled: Sampled) -> dict[str, torch.Tensor]:
    """`lag/mean`, `lag/max`: the lag of the trained tokens' sampler (one batch, one sampler: equal), as 0-d
    tensors on the host (the row's other values are copied with them)."""
    lag = torch.tensor(float(sampled.lag), dtype=torch.float64)
    return {"lag/mean": lag, "lag/max": lag.clone()}


@torch.no_grad()
def sampler_gap(learner_logp: torch.Tensor, batch: RolloutBatch) -> dict[str, torch.Tensor]:
    """How far the sampler mu is from the learner at the step's start, pi_old (recomputed), on the
    trained batch's response tokens [B, T]: `lag/k3_response`, the k3 estimate of KL(mu || pi_old) summed
    over each response's tokens and averaged over the non-empty responses (its token mean is
    `mismatch/k3_kl`), and `lag/ess`, the effective sample size of the importance weights w = pi_old / mu
    normalised by the token count, (sum w)^2 / (n sum w^2), in (0, 1] (1: w constant); NaN without a
    token. 0-d fp64 tensors, no host copy."""
    valid = batch.response_mask.bool().to(learner_logp.device)
    log_w = torch.where(valid, learner_logp.double() - batch.sampling_logp.to(learner_logp.device).double(), 0.0)
    responses = valid.any(-1)
    per_response = torch.where(valid, k3(log_w), 0.0).sum(-1)  # [B]
    w = torch.where(valid, safe_exp(log_w), 0.0)
    n = valid.sum()
    return {"lag/k3_response": per_response[responses].sum() / responses.sum(),  # 0 / 0: NaN
            "lag/ess": w.sum() ** 2 / (n * (w**2).sum())}


def routes_apart(sampler_routing: torch.Tensor, learner_routing: torch.Tensor,
                 attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """`routing_drift` of the learner's routes at the step's start against the sampler's, over the
    positions both routed (every attended one but the batch's last, which generation never routes:
    `train.rollout.routing_for_training`, and on which no log-prob depends): its `moe/drift_expert` is
    `lag/route_diff`, the share of activated experts whose choice differs between sampler and learner
    (`moe/rollout_gap_expert` too: at lag 0 the engine's own routing gap), `moe/drift_expert_layer` its
    value per MoE layer."""
    routed = attention_mask.clone()
    routed[:, -1] = 0
    return routing_drift(sampler_routing, learner_routing, routed)


@torch.no_grad()
def decoupled_weights(prox_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor,
                      cap: float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The decoupled treatment's per-token weights (AReaL's `behav_imp_weight`, arXiv 2505.24298):
    w_t = pi_prox(y_t) / mu(y_t), pi_prox the learner at the step's start and mu the sampler, [B, T] fp32
    detached, 0 at padding and, with `cap`, where w_t > cap (AReaL's `behav_imp_weight_cap`: the token
    leaves the loss); the log-ratio clamped as every ratio here (`safe_exp`). The objective multiplies
    each token's term by it, its own normalisers unchanged (`objectives.reduce`). `decoupled/masked_frac`:
    the share of valid tokens the cap removed."""
    valid = mask.bool()
    w = safe_exp(torch.where(valid, prox_logp.double() - sampling_logp.to(prox_logp.device).double(), 0.0))
    keep = valid & (w <= cap) if cap is not None else valid
    masked = (valid & ~keep).sum() / valid.sum().clamp(min=1)
    return torch.where(keep, w, 0.0).float(), {"decoupled/masked_frac": masked.double()}
