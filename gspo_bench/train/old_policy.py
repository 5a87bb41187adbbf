"""Phase 2 of a step: the old-policy pass (no gradient) over the whole rollout batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from gspo_bench.models.forward import response_forward
from gspo_bench.moe import RoutingCapture, routing_drift
from gspo_bench.moe.confidence import routing_confidence
from gspo_bench.objectives.metrics import masked_mean
from gspo_bench.rollout.mismatch import logprob_mismatch
from gspo_bench.runtime.distributed import gather_rows
from gspo_bench.train.lag import decoupled_weights, routes_apart, sampler_gap
from gspo_bench.train.policy import Policy, captured, capturing
from gspo_bench.train.rollout import RolloutBatch

ReplaySource = Literal["old_pass", "rollout", "lagged"]


@dataclass(frozen=True)
class OldPolicy:
    logp: torch.Tensor  # [B, T] pi_old of every response token, as the objective uses it
    entropy: torch.Tensor  # [B, T] entropy of pi_old's predictive distributions
    entropy_mean: torch.Tensor  # 0-d: `entropy`'s mean over the response tokens (NaN where there are none)
    routing: torch.Tensor | None  # [L_moe, B, L, k] experts the model chose (drift is measured against it)
    replay: torch.Tensor | None  # [L_moe, B, L, k] experts the update forwards must use (replay runs), else None
    ref_logp: torch.Tensor | None = None  # [B, T] under the frozen reference, when a KL penalty is on
    gate_scores: torch.Tensor | None = None  # [L_moe, B, L, k] gate scores of `routing`'s experts (RSPO), when asked
    margin_pairs: torch.Tensor | None = None  # [L_moe, B, L, 2] each token's k-th and (k+1)-th expert (moe.margins)
    pair_logits: torch.Tensor | None = None  # [L_moe, B, L, 2] pi_old's router logits at `margin_pairs`
    route_conf: torch.Tensor | None = None  # [L_moe] pi_old's mean routing confidence per MoE layer (moe.confidence)
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)  # engine mismatch, rollout routing gap, lag/*
    weights: torch.Tensor | None = None  # [B, T] the decoupled treatment's pi_prox / mu per token (train.lag), else None
    route_diff: torch.Tensor | None = None  # [L_moe] lag/route_diff per MoE layer, where the sampler's routes are known
    replay_weights: torch.Tensor | None = None  # [L_moe, B, L, k] the combine weights of `replay` (full replay), else None

    def recorded(self, name: str) -> torch.Tensor:
        """The optional record `name` (routing, replay, gate_scores, ...); RuntimeError naming it where
        the old-policy pass did not record it."""
        value = getattr(self, name)
        if value is None:
            raise RuntimeError(f"the old-policy pass recorded no {name}, which this update needs")
        return value


def old_policy_pass(policy: Policy, batch: RolloutBatch, *, temperature: float, replay: ReplaySource | None = None,
                    record_routing: bool = True, logp_source: str = "recompute", measure: bool = True,
                    gate_scores: bool = False, head_chunk: int | None = None,
                    decoupled_cap: float | None = None, replay_weights: bool = False) -> OldPolicy:
    """pi_old's log-probs and entropies of the batch at the sampling temperature, the experts it
    routed each token to and, for replay runs, the routing the update forwards will replay:
    the old pass's own (Routing Replay: the learner's at the step's start), the engine's (R3: the
    sampler's, under `rollout.lag` those of the policy that sampled the batch) or the learner's `replay_lag`
    updates before the step (lagged R2: `given_routes`), the last two replayed by this pass too.
    `logp_source="rollout"` takes pi_old from the engine's log-probs (naive; the paper's section 5.4);
    `logp_source="decoupled"` keeps this pass's as pi_old (pi_prox) and gives every token the weight
    pi_prox / mu (`weights`; `train.lag.decoupled_weights`, capped at `decoupled_cap`);
    `gate_scores=True` records the gate scores of the experts pi_old routed to (RSPO's router shift);
    with `record_routing` and `measure`, pi_old's routing confidence (`moe/route_conf`, per layer in
    `route_conf`: `moe.confidence`);
    `head_chunk` (train.logprob_chunk_tokens) computes log-probs and entropies with the fused head;
    `replay_weights` (full replay, with `replay="old_pass"` only) keeps this pass's combine weights for the
    update forwards to replay with its experts (`replay_weights`)."""
    if replay_weights and replay != "old_pass":
        raise ValueError(f"full replay replays the old pass's combine weights; replay {replay!r} carries none")
    world, model = policy.world, policy.model
    rows = torch.arange(len(batch), device=batch.input_ids.device)
    mine = world.rows(rows)  # this rank's rows (all of them in one process)
    given = given_routes(batch, replay)
    forced = given[:, mine] if given is not None else None
    with torch.no_grad(), policy.precision.autocast(), \
            capturing(model, record_routing or gate_scores or replay is not None, replay=forced,
                      margins=record_routing, confidence=record_routing and measure) as capture:
        logp, entropy = response_forward(model, batch.input_ids[mine], batch.attention_mask[mine],
                                         batch.n_response, temperature, with_entropy=True,
                                         head_chunk=head_chunk, kept=batch.kept(mine))  # [B, T] each
    if entropy is None:
        raise RuntimeError("response_forward(with_entropy=True) returned no entropy")
    logp, entropy = gather_rows(world, logp, rows), gather_rows(world, entropy, rows)
    entropy_mean = torch.where(batch.response_mask.any(), masked_mean(entropy.double(), batch.response_mask), float("nan"))
    routing = gather_rows(world, capture.routing, rows, dim=1) if capture is not None else None
    scores = gather_rows(world, captured(capture).gate_scores, rows, dim=1) if gate_scores else None
    pairs, pair_logits = None, None
    if capture is not None and capture.margins:
        pairs = gather_rows(world, capture.margin_pairs, rows, dim=1)
        pair_logits = gather_rows(world, capture.pair_logits, rows, dim=1)
    metrics = engine_gap(logp, routing, batch) | unmasked_gap(policy, batch, temperature, forced) if measure else {}
    route_diff = metrics.pop("lag/route_diff_layer", None)
    route_conf = None
    if capture is not None and capture.confidence:  # over every attended position, as drift
        confidence = routing_confidence(gather_rows(world, capture.route_confidence, rows, dim=1), batch.attention_mask)
        metrics["moe/route_conf"], route_conf = confidence["moe/route_conf"], confidence["moe/route_conf_layer"]
    weights = None
    if logp_source == "decoupled":
        weights, masked = decoupled_weights(logp, batch.sampling_logp, batch.response_mask, decoupled_cap)
        metrics |= masked if measure else {}
    if logp_source == "rollout":
        logp = batch.sampling_logp.to(logp.device)
    replayed = routing if replay == "old_pass" else given
    combine = gather_rows(world, captured(capture).weights, rows, dim=1) if replay_weights else None
    return OldPolicy(logp=logp, entropy=entropy, entropy_mean=entropy_mean, routing=routing, replay=replayed,
                     replay_weights=combine,
                     ref_logp=reference_logp(policy, batch, temperature, head_chunk), metrics=metrics, gate_scores=scores,
                     margin_pairs=pairs, pair_logits=pair_logits, route_conf=route_conf, weights=weights,
                     route_diff=route_diff)


def given_routes(batch: RolloutBatch, replay: ReplaySource | None) -> torch.Tensor | None:
    """The routes a replay takes from outside the old pass: the sampler's (R3), or the learner's `replay_lag`
    updates before the step (lagged R2: `batch.lagged_routing`, recorded by `train.lag.record_lagged_routes`;
    the sampler's where none was recorded, the sampler being no older); None for R2 and no replay. ValueError
    where the engine returned no routing to take."""
    if replay not in ("rollout", "lagged"):
        return None
    if replay == "lagged" and batch.lagged_routing is not None:
        return batch.lagged_routing
    if batch.routing is None:
        name = "rollout routing replay (R3)" if replay == "rollout" else "lagged routing replay"
        raise ValueError(f"{name} needs the engine's routing; this rollout has none")
    return batch.routing


@torch.no_grad()
def learner_routes(policy: Policy, batch: RolloutBatch, head_chunk: int | None = None) -> torch.Tensor:
    """[L_moe, B, L, k] the experts the policy now routes every position of `batch` to (one no-grad forward in
    the training precision, no replay): what lagged R2 replays `replay_lag` updates later."""
    world, rows = policy.world, torch.arange(len(batch), device=batch.input_ids.device)
    mine = world.rows(rows)
    with policy.precision.autocast(), RoutingCapture(policy.model) as capture:
        response_forward(policy.model, batch.input_ids[mine], batch.attention_mask[mine], batch.n_response, 1.0,
                         head_chunk=head_chunk)
    return gather_rows(world, capture.routing, rows, dim=1)


def engine_gap(train_logp: torch.Tensor, train_routing: torch.Tensor | None, batch: RolloutBatch) -> dict[str, torch.Tensor]:
    """How far training is from the rollout engine (under `rollout.lag`, from the sampler S updates old):
    log-prob mismatch, the per-response k3 and the importance weights' ESS (`train.lag.sampler_gap`) and,
    where both routings are known, the routing gap (what R3 removes), as `moe/rollout_gap*` and as the lag
    map's `lag/route_diff` with its per-layer values `lag/route_diff_layer` [L] (`train.lag.routes_apart`:
    the gap leaves out the batch's last position, which generation never routes)."""
    metrics = logprob_mismatch(train_logp, batch.sampling_logp, batch.response_mask) | sampler_gap(train_logp, batch)
    if batch.routing is not None and train_routing is not None:
        gap = routes_apart(batch.routing, train_routing, batch.attention_mask)
        metrics |= {"moe/rollout_gap": gap["moe/drift"], "moe/rollout_gap_expert": gap["moe/drift_expert"],
                    "lag/route_diff": gap["moe/drift_expert"], "lag/route_diff_layer": gap["moe/drift_expert_layer"]}
    return metrics


def unmasked_gap(policy: Policy, batch: RolloutBatch, temperature: float,
                 forced: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """`mismatch/k3_kl_unmasked`: the engine's log-probs against the learner's over the full vocabulary (one
    more no-grad forward, the old pass's replay kept), the gap `train.sampling_mask` removes; beside it the
    step's `mismatch/k3_kl` is the gap left after renormalising over the kept sets. Nothing without kept sets."""
    if batch.sampling_kept is None:
        return {}
    world, rows = policy.world, torch.arange(len(batch), device=batch.input_ids.device)
    mine = world.rows(rows)
    with torch.no_grad(), policy.precision.autocast(), RoutingCapture(policy.model, replay=forced):
        full, _ = response_forward(policy.model, batch.input_ids[mine], batch.attention_mask[mine], batch.n_response,
                                   temperature)
    gap = logprob_mismatch(gather_rows(world, full, rows), batch.sampling_logp, batch.response_mask)
    return {"mismatch/k3_kl_unmasked": gap["mismatch/k3_kl"]}


def reference_logp(policy: Policy, batch: RolloutBatch, temperature: float,
                   head_chunk: int | None = None) -> torch.Tensor | None:
    """[B, T] log-probs under the frozen reference model, or None without one."""
    if policy.reference is None:
        return None
    with torch.no_grad(), policy.precision.autocast():
        logp, _ = response_forward(policy.reference, batch.input_ids, batch.attention_mask, batch.n_response,
                                   temperature, head_chunk=head_chunk, kept=batch.kept())
    return logp


def nondeterminism_floor(policy: Policy, batch: RolloutBatch, replay: ReplaySource | None = None, *,
                         temperature: float, head_chunk: int | None = None) -> dict[str, torch.Tensor]:
    """What routing and log-probs move by without any update (once per run): two identical training
    forwards (`floor/drift_repeat`, `floor/logp_repeat_max`: max |delta log-prob| over response
    tokens) and, where the rollout precision differs from training's, one under the rollout's
    (`floor/drift_precision`, `floor/logp_precision_max`). Drift at or below these is noise. Log-probs
    at the rollout's `temperature`, as the objective sees them."""
    passes = {"reference": policy.precision, "repeat": policy.precision}
    if policy.rollout_precision is not None and policy.rollout_precision != policy.precision:
        passes["precision"] = policy.rollout_precision
    world, rows = policy.world, torch.arange(len(batch), device=batch.input_ids.device)
    mine = world.rows(rows)
    given = given_routes(batch, replay)
    forced = given[:, mine] if given is not None else None  # the old pass's own replay, if any
    seen = {}
    for name, precision in passes.items():
        with torch.no_grad(), precision.autocast(), RoutingCapture(policy.model, replay=forced) as capture:
            logp, _ = response_forward(policy.model, batch.input_ids[mine], batch.attention_mask[mine],
                                       batch.n_response, temperature, head_chunk=head_chunk, kept=batch.kept(mine))
        seen[name] = (gather_rows(world, logp, rows).double(), gather_rows(world, capture.routing, rows, dim=1))
    logp, routing = seen.pop("reference")
    floor = {}
    for name, (other_logp, other_routing) in seen.items():
        floor[f"floor/drift_{name}"] = routing_drift(routing, other_routing, batch.attention_mask)["moe/drift"]
        gap = torch.where(batch.response_mask.bool(), (other_logp - logp).abs(), 0.0)
        floor[f"floor/logp_{name}_max"] = gap.max() if gap.numel() else gap.new_zeros(())
    return floor
