"""Phase 3 of a step: K minibatch updates of the policy (and the drift they cause)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from gspo_bench.models.forward import response_forward, router_aux_loss
from gspo_bench.models.padding import position_ids
from gspo_bench.moe import RoutingCapture, rerouted_positions, routing_drift
from gspo_bench.moe.margins import margin_stats
from gspo_bench.moe.routers import router_parameters
from gspo_bench.objectives.kl import k3
from gspo_bench.objectives.metrics import (
    gradient_weight_metrics,
    masked_mean,
    measurements_off,
    measuring,
    term_share_metrics,
)
from gspo_bench.objectives.reduce import recording_terms, recording_token_weights
from gspo_bench.objectives.registry import LR_SCALE, Metrics
from gspo_bench.objectives.rspo import router_shift_from_scores
from gspo_bench.runtime.distributed import World, gather_rows, local_tensor, with_local_grad
from gspo_bench.train.measurements import (
    GradientCosines,
    MeanOf,
    RatioByRouting,
    StepMeasurements,
    TokenRatios,
)
from gspo_bench.train.micro_batches import MicroBatch, plan_micro_batches
from gspo_bench.train.old_policy import OldPolicy
from gspo_bench.train.optim import guarded_step, scaled_lr
from gspo_bench.train.policy import Policy, captured, capturing
from gspo_bench.train.rollout import RolloutBatch

Objective = Callable[..., tuple[torch.Tensor, Metrics]]  # objective(logp=, old_logp=, advantages=, mask=)


@dataclass(frozen=True)
class UpdateSettings:
    temperature: float = 1.0  # the rollout's: log-probs of the distribution the tokens were sampled from
    grad_clip: float = 1.0
    kl_coef: float = 0.0  # k3 KL(pi_theta || pi_ref) penalty
    measure: bool = True  # objective measurements and routing drift
    correction: Callable | None = None  # training-inference mismatch correction (objectives.corrections), bound
    inputs: frozenset[str] = frozenset()  # the objective's declared extra inputs (ObjectiveSpec.inputs)
    generator: torch.Generator | None = None  # what an objective declaring `generator` draws from (one per step)
    coupled: bool = False  # the objective couples rows (ObjectiveSpec.coupled): micro-batches need every row's logp first
    micro_batch_tokens: int | None = None  # train.micro_batch_tokens: None, one forward/backward per minibatch
    head_chunk: int | None = None  # train.logprob_chunk_tokens: log-probs from hidden states in chunks (fused head)
    aux_coef: float = 0.0  # model.router_aux_loss_coef: the family's load-balancing loss added to the update's


@dataclass(frozen=True)
class MinibatchResult:
    loss: torch.Tensor  # 0-d, detached
    grad_norm: torch.Tensor  # 0-d, before clipping
    applied: torch.Tensor  # 0-d bool: loss and gradients finite, so the optimizer stepped
    metrics: Metrics  # the objective's measurements (and kl/ref)
    drift: dict[str, torch.Tensor] | None  # routing of this forward vs the old policy's, when measured
    layers: dict[str, torch.Tensor] | None  # per MoE layer [L]: drift and router-margin figures, when measured
    rerouted: torch.Tensor | None  # [b, T] response tokens whose predicting position was rerouted, when measured
    log_ratio: torch.Tensor  # [b, T] log pi_theta - log pi_old of the response tokens, detached
    n_tokens: torch.Tensor  # valid response tokens of the minibatch
    n_responses: torch.Tensor  # non-empty responses of the minibatch
    tokens_trained: torch.Tensor  # tokens forwarded and back-propagated (prompt + response)


@dataclass(frozen=True)
class UpdateResult:
    metrics: dict[str, torch.Tensor]  # loss, grad/norm, objective measurements, moe/drift*, nonfinite count
    layers: dict[str, torch.Tensor]  # per measured minibatch and MoE layer [J, L]: moe/drift, margin figures
    tokens_trained: torch.Tensor  # 0-d


@dataclass(frozen=True)
class MinibatchForward:
    logp: torch.Tensor  # [b, T] the whole minibatch's log-probs (gradient into this rank's rows only, or none)
    router_shift: torch.Tensor | None  # [b, T] RSPO's gate-score change, when the objective declares it
    routing: torch.Tensor | None  # [L, b, L_seq - 1, k] this forward's experts, when its drift is measured
    pair_logits: torch.Tensor | None  # [L, b, L_seq, 2] router logits at pi_old's margin pairs, when measured
    aux_loss: torch.Tensor | None = None  # 0-d, with gradient: the load-balancing loss, when settings.aux_coef > 0


@dataclass(frozen=True)
class MicroForward:
    """One forward of some of this rank's rows (a micro-batch, or all of them), each field [.., m, ..]."""

    logp: torch.Tensor  # [m, T] with gradient when run with it; 0 beyond the micro-batch's columns
    router_shift: torch.Tensor | None  # [m, T] RSPO's gate-score change, when the objective declares it
    routing: torch.Tensor | None  # [L, m, L_seq, k] this forward's experts (pi_old's outside its columns), when measured
    pair_logits: torch.Tensor | None  # [L, m, L_seq, 2] router logits at pi_old's margin pairs, when measured
    aux_loss: torch.Tensor | None = None  # 0-d, with gradient: the load-balancing loss, when settings.aux_coef > 0

    def detached(self) -> MicroForward:
        return MicroForward(self.logp.detach(), self.router_shift, self.routing, self.pair_logits)


def update_minibatch(policy: Policy, objective: Objective, batch: RolloutBatch, old: OldPolicy, rows: torch.Tensor,
                     settings: UpdateSettings, measure_drift: bool = False) -> MinibatchResult:
    """One update on minibatch `rows`: forward (replaying `old.replay` where set), loss, backward,
    gradient clipping, an optimizer step that skips itself on a non-finite loss or gradient, and the
    drift of this forward's routing from the old policy's (`measure_drift`). With
    `settings.micro_batch_tokens`, the forward/backward runs in micro-batches (`accumulate_gradient`)."""
    plan = plan_micro_batches(batch.attention_mask[rows], batch.n_response, settings.micro_batch_tokens, policy.world)
    if settings.aux_coef > 0 and (len(plan) > 1 or policy.world.size > 1):
        raise ValueError("model.router_aux_loss_coef > 0 needs the whole minibatch in one forward on one process: "
                         "the load-balancing loss is a product of two means over its tokens, not a sum over "
                         "micro-batches or ranks (unset train.micro_batch_tokens, run without torchrun)")
    if len(plan) == 1:
        forward = forward_minibatch(policy, batch, old, rows, plan[0], settings, measure_drift)
        with measurements_off(not settings.measure):
            loss, metrics = policy_loss(objective, forward.logp, old, batch, rows, settings, forward.router_shift)
        if forward.aux_loss is not None:  # model.router_aux_loss_coef: the family's load-balancing loss
            loss = loss + settings.aux_coef * forward.aux_loss
            metrics = {**metrics, "loss/router_aux": forward.aux_loss.detach()}
        grad_norm, applied = backward_and_step(policy, loss, settings.grad_clip, lr_scale(metrics))
    else:
        forward, loss, metrics = accumulate_gradient(policy, objective, batch, old, rows, plan, settings, measure_drift)
        grad_norm, applied = clip_and_step(policy, loss, settings.grad_clip, lr_scale(metrics))
    drift, rerouted = minibatch_drift(old, forward.routing, batch, rows)
    layers = None
    if drift is not None:
        layers = {"moe/drift": drift["moe/drift_layer"], "moe/drift_expert": drift["moe/drift_expert_layer"],
                  **minibatch_margins(old, forward.pair_logits, batch, rows)}
    mask = batch.response_mask[rows]
    return MinibatchResult(loss=loss.detach(), grad_norm=grad_norm, applied=applied, metrics=metrics, drift=drift,
                           layers=layers,
                           rerouted=rerouted, log_ratio=(forward.logp.detach().float() - old.logp[rows].float()),
                           n_tokens=mask.sum(), n_responses=mask.any(-1).sum(),
                           tokens_trained=batch.attention_mask[rows].sum())


def forward_minibatch(policy: Policy, batch: RolloutBatch, old: OldPolicy, rows: torch.Tensor, micro: MicroBatch,
                      settings: UpdateSettings, measure_drift: bool) -> MinibatchForward:
    """The policy's forward on this rank's rows of minibatch `rows` (all of them: `micro`), gathered
    over ranks: the whole minibatch's log-probs with gradient into this rank's rows only, so loss and
    measurements are the single-process ones and the gradients summed over ranks are its gradient."""
    local = forward_micro(policy, batch, old, rows, micro, settings, measure_drift)
    forward = gathered(policy.world, local, rows)
    return MinibatchForward(logp=with_local_grad(policy.world, forward.logp, local.logp),
                            router_shift=forward.router_shift, routing=forward.routing, pair_logits=forward.pair_logits,
                            aux_loss=local.aux_loss)


def forward_micro(policy: Policy, batch: RolloutBatch, old: OldPolicy, rows: torch.Tensor, micro: MicroBatch,
                  settings: UpdateSettings, measure_drift: bool) -> MicroForward:
    """The policy's forward on the rows `rows[micro.positions]`, columns `micro.columns` (replaying
    `old.replay` where set, probing pi_old's experts when the objective declares `router_shift`),
    widened back to the batch's T response tokens and L positions."""
    index, columns = rows[micro.positions], micro.columns
    n_response = micro.n_response(batch.input_ids.shape[1], batch.n_response)

    def window(per_position: torch.Tensor) -> torch.Tensor:  # [L, B, L_seq, .] -> [L, m, w, .]
        return per_position[:, index, columns]

    experts = old_experts_to_probe(settings.inputs, old)
    replay = window(old.replay) if old.replay is not None else None
    replay_weights = window(old.replay_weights) if old.replay_weights is not None else None  # full replay
    probe = window(experts) if experts is not None else None
    pairs = window(old.margin_pairs) if measure_drift and old.margin_pairs is not None else None
    balance: AbstractContextManager[list[torch.Tensor]] = (
        router_aux_loss(policy.model) if settings.aux_coef > 0 else nullcontext([]))  # model.router_aux_loss_coef
    with policy.precision.autocast(), \
            capturing(policy.model, measure_drift, replay=replay, probe=probe, pairs=pairs,
                      replay_weights=replay_weights) as capture, balance as aux:
        logp, _ = response_forward(policy.model, batch.input_ids[index, columns], batch.attention_mask[index, columns],
                                   n_response, settings.temperature, head_chunk=settings.head_chunk,
                                   kept=batch.kept(index, n_response))  # [m, T']
    if n_response < batch.n_response:
        logp = torch.nn.functional.pad(logp, (0, batch.n_response - n_response))  # [m, T]
    width, shift = batch.input_ids.shape[1], None
    if probe is not None:  # RSPO: how far the gate scores of pi_old's experts moved, per response token
        moved = router_shift_from_scores(window(old.recorded("gate_scores")), captured(capture).probe_scores)  # [m, w]
        shift = response_positions(widen(moved, micro, width, lambda: moved.new_zeros(len(index), width), 1), batch)
    routing, pair_logits = None, None
    if measure_drift and old.routing is not None:  # this forward ran after the earlier updates
        old_routing = old.routing
        routing = widen(captured(capture).routing, micro, width, lambda: old_routing[:, index])
    if pairs is not None:
        old_pair_logits = old.recorded("pair_logits")
        pair_logits = widen(captured(capture).pair_logits, micro, width, lambda: old_pair_logits[:, index])
    return MicroForward(logp=logp, router_shift=shift, routing=routing, pair_logits=pair_logits,
                        aux_loss=aux[0] if aux else None)


def widen(inside: torch.Tensor, micro: MicroBatch, width: int, outside: Callable[[], torch.Tensor],
          dim: int = 2) -> torch.Tensor:
    """`inside` (values at the micro-batch's columns, along `dim`) placed into `outside()` (what every
    other position keeps: pi_old's routing, so padding shows no drift), of `width` positions;
    `inside` itself when the micro-batch keeps every column."""
    if inside.shape[dim] == width:
        return inside
    out = outside().clone()
    out.narrow(dim, micro.start, micro.stop - micro.start).copy_(inside)
    return out


def gathered(world: World, local: MicroForward, rows: torch.Tensor) -> MinibatchForward:
    """This rank's forward results (its rows of the minibatch, in order) gathered over ranks: the whole
    minibatch's, detached."""
    def gather(t: torch.Tensor | None, dim: int = 0) -> torch.Tensor | None:
        return gather_rows(world, t, rows, dim=dim) if t is not None else None

    return MinibatchForward(logp=gather_rows(world, local.logp, rows), router_shift=gather(local.router_shift),
                            routing=gather(local.routing, 1), pair_logits=gather(local.pair_logits, 1))


def accumulate_gradient(policy: Policy, objective: Objective, batch: RolloutBatch, old: OldPolicy, rows: torch.Tensor,
                        plan: list[MicroBatch], settings: UpdateSettings,
                        measure_drift: bool) -> tuple[MinibatchForward, torch.Tensor, Metrics]:
    """The minibatch's gradient accumulated over its micro-batches, exactly: each micro-batch's loss is
    the objective on the whole minibatch's log-probs [b, T] with only its own rows carrying gradient
    (so every count, normaliser and batch quantity is the minibatch's), the other rows their true
    values for a coupled objective (a no-grad pass first) and pi_old's for a row-separable one, whose
    gradient they cannot change; a drawing objective draws the same numbers every time. Gradients
    synchronise over ranks on the last micro-batch only. Returns the gathered forward and the loss and
    measurements of the whole minibatch (the objective once more on its log-probs, no gradient)."""
    world, draws = policy.world, settings.generator.get_state() if settings.generator is not None else None
    others = no_grad_pass(policy, batch, old, rows, plan, settings) if settings.coupled else None
    others_logp = others.logp if others is not None else old.logp[rows].detach()
    pieces: list[tuple[MicroBatch, MicroForward]] = []
    policy.trainer().zero_grad(set_to_none=True)
    try:
        for i, micro in enumerate(plan):
            out = forward_micro(policy, batch, old, rows, micro, settings, measure_drift and not micro.filler)
            if micro.filler:  # keeps this rank's collectives in step with the others; adds nothing
                backward(policy, out.logp.sum() * 0.0, sync=i == len(plan) - 1)
                continue
            pieces.append((micro, out.detached()))
            shift = None
            if out.router_shift is not None:
                if others is None:
                    shift = placed(out.router_shift.new_zeros(others_logp.shape), micro, out.router_shift)
                elif others.router_shift is None:
                    raise RuntimeError("the no-grad pass measured no router shift where the update's forward did")
                else:
                    shift = placed(others.router_shift, micro, out.router_shift)
            rewind(settings.generator, draws)
            with measurements_off():
                loss, _ = policy_loss(objective, placed(others_logp, micro, out.logp), old, batch, rows, settings, shift)
            backward(policy, loss, sync=i == len(plan) - 1)
    finally:
        set_gradient_sync(policy.model, True)
    forward = gathered(world, joined(pieces), rows)
    rewind(settings.generator, draws)
    # the gradient reaches these log-probs only (for the gradient weights), never the model
    probe = forward.logp.detach().requires_grad_(settings.measure)
    with measurements_off(not settings.measure):
        loss, metrics = policy_loss(objective, probe, old, batch, rows, settings, forward.router_shift)
    return forward, loss.detach(), metrics


def no_grad_pass(policy: Policy, batch: RolloutBatch, old: OldPolicy, rows: torch.Tensor, plan: list[MicroBatch],
                 settings: UpdateSettings) -> MinibatchForward:
    """Every row's log-probs (and router shift) before any gradient, micro-batch by micro-batch, gathered."""
    with torch.no_grad():
        pieces = [(micro, forward_micro(policy, batch, old, rows, micro, settings, False)) for micro in plan]
    return gathered(policy.world, joined([(m, out) for m, out in pieces if not m.filler]), rows)


def joined(pieces: list[tuple[MicroBatch, MicroForward]]) -> MicroForward:
    """The micro-batches' results as one MicroForward over this rank's rows in minibatch order."""
    order = torch.argsort(torch.cat([micro.positions for micro, _ in pieces]))

    def join(name: str, dim: int) -> torch.Tensor | None:
        values = [getattr(out, name) for _, out in pieces]
        if values[0] is None:
            return None
        return torch.cat(values, dim).index_select(dim, order.to(values[0].device))

    logp = join("logp", 0)
    if logp is None:
        raise RuntimeError("a micro-batch's forward returned no log-probs")
    return MicroForward(logp=logp, router_shift=join("router_shift", 0), routing=join("routing", 1),
                        pair_logits=join("pair_logits", 1))


def placed(others: torch.Tensor, micro: MicroBatch, values: torch.Tensor) -> torch.Tensor:
    """[b, T] `others` (detached) with the micro-batch's rows replaced by `values`, which carry its gradient."""
    out = others.detach().clone()
    out[micro.positions.to(out.device)] = values
    return out


def rewind(generator: torch.Generator | None, state: torch.Tensor | None) -> None:
    """Every evaluation of the objective in one update draws the same numbers (Clip-Cov)."""
    if generator is not None:
        if state is None:
            raise RuntimeError("a generator to rewind but no state saved to rewind it to")
        generator.set_state(state)


def policy_loss(objective: Objective, logp: torch.Tensor, old: OldPolicy, batch: RolloutBatch, rows: torch.Tensor,
                settings: UpdateSettings = UpdateSettings(),
                router_shift: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """The objective on minibatch `rows` (log-probs `logp` [b, T] of those rows, in that order), its
    per-token terms weighted by `settings.correction` (from pi_old, the engine's mu and pi_theta) when
    given, or by the decoupled treatment's pi_prox / mu (`old.weights`; never both), plus kl_coef * KL(pi_theta || pi_ref) (k3, samples from pi_old ~ pi_theta) when a reference
    is given. The objective gets the extra inputs it declares (`settings.inputs`, see
    `objectives.registry.EXTRA_INPUTS`). `loss/max_token_share`: the largest share of one token's
    |contribution| in the objective's sum of them (`objectives.metrics.term_share_metrics`); where `logp`
    carries a gradient, each token's gradient weight against the plain policy gradient's
    (`objectives.metrics.gradient_weight_metrics`, the objective's loss alone, KL to pi_ref left out)."""
    mask = batch.response_mask[rows]  # [b, T]
    advantages = batch.token_advantages if batch.token_advantages is not None else batch.advantages  # [B, T] or [B]
    weights, corrected = (None if old.weights is None else old.weights[rows]), {}
    if settings.correction is not None:
        if weights is not None:
            raise ValueError("the decoupled treatment weights every token already: a correction beside it would "
                             "weight it by the sampler's ratio twice")
        weights, corrected = settings.correction(old_logp=old.logp[rows], sampling_logp=batch.sampling_logp[rows],
                                                 logp=logp.detach(), advantages=advantages[rows], mask=mask)
    # the per-token contributions of the loss (how much one token makes of it) and the reduction's weights
    with recording_terms() as terms, recording_token_weights() as token_weights:
        loss, metrics = objective(logp=logp, old_logp=old.logp[rows], advantages=advantages[rows], mask=mask,
                                  weights=weights, **extra_inputs(settings, batch, rows, router_shift))
    metrics = {**metrics, **corrected, **term_share_metrics(terms),
               **gradient_weights(loss, logp, token_weights, advantages[rows], mask)}
    if old.ref_logp is not None and settings.kl_coef > 0:
        kl_ref = masked_mean(k3(old.ref_logp[rows].float() - logp.float()), mask)
        loss = loss + settings.kl_coef * kl_ref
        metrics = {**metrics, "kl/ref": kl_ref.detach()}
    return loss, metrics


def gradient_weights(loss: torch.Tensor, logp: torch.Tensor, token_weights: list[torch.Tensor],
                     advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """`gradient_weight_metrics` of `loss` at `logp` under the reduction of the objective's first
    `aggregate` (its main term's); {} where measurements are off, `logp` carries no gradient or nothing
    was reduced. The gradient reaches `logp` only, not the model: the update's backward is unchanged."""
    if not token_weights or not logp.requires_grad or not loss.requires_grad or not measuring():
        return {}
    (grad_logp,) = torch.autograd.grad(loss, logp, retain_graph=True, allow_unused=True)
    if grad_logp is None:
        return {}
    return gradient_weight_metrics(grad_logp, token_weights[0], advantages, mask)


def extra_inputs(settings: UpdateSettings, batch: RolloutBatch, rows: torch.Tensor,
                 router_shift: torch.Tensor | None) -> dict[str, object]:
    """The extra inputs the objective declares: the engine's mu of `rows`, the router shift measured by
    the update forward, the step's generator."""
    available = {"sampling_logp": batch.sampling_logp[rows], "router_shift": router_shift,
                 "generator": settings.generator}
    missing = sorted(name for name in settings.inputs if available[name] is None)
    if missing:
        raise ValueError(f"this objective declares the inputs {missing}, which this update was not given "
                         "(router_shift: update_minibatch measures it; generator: UpdateSettings.generator)")
    return {name: available[name] for name in settings.inputs}


def lr_scale(metrics: Metrics) -> torch.Tensor | None:
    """The factor on this update's learning rate where the objective returned one (LR_SCALE: those that
    declare `scales_lr` do, measurements on or off); None else."""
    scale = metrics.get(LR_SCALE)
    return None if scale is None else torch.as_tensor(scale)


def backward_and_step(policy: Policy, loss: torch.Tensor, grad_clip: float,
                      scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Backward, gradient clipping and an optimizer step that skips itself on a non-finite loss or
    gradient (at the learning rate times `scale`, where given); returns (the gradient norm before
    clipping, whether the step was applied)."""
    policy.trainer().zero_grad(set_to_none=True)
    backward(policy, loss)
    return clip_and_step(policy, loss, grad_clip, scale)


def backward(policy: Policy, loss: torch.Tensor, sync: bool = True) -> None:
    """Gradients of `loss` added to the parameters'; under FSDP2, reduced over ranks only when `sync`."""
    set_gradient_sync(policy.model, sync)
    (loss * policy.world.size).backward()  # FSDP2 averages gradients over ranks: undo the 1/W


def set_gradient_sync(model: torch.nn.Module, sync: bool) -> None:
    """FSDP2's switch for reducing gradients over ranks in backward (a model without it: nothing to do)."""
    switch = getattr(model, "set_requires_gradient_sync", None)
    if switch is not None:
        switch(sync)


def clip_and_step(policy: Policy, loss: torch.Tensor, grad_clip: float,
                  scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient clipping and the guarded optimizer step after the gradients are in (its learning rate
    times `scale`, where given: `optim.scaled_lr`)."""
    grad_norm = local_tensor(torch.nn.utils.clip_grad_norm_(policy.model.parameters(), grad_clip))
    applied = torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)
    with scaled_lr(policy.trainer(), scale if scale is None or bool(applied) else None):
        guarded_step(policy.trainer(), applied)
    return grad_norm, applied


def minibatch_drift(old: OldPolicy, routing: torch.Tensor | None, batch: RolloutBatch,
                    rows: torch.Tensor) -> tuple[dict[str, torch.Tensor] | None, torch.Tensor | None]:
    """The drift of this forward's `routing` from the old policy's on `rows`, and the response tokens
    whose predicting position was rerouted [b, T]; (None, None) when not measured."""
    if routing is None:
        return None, None
    old_routing = old.recorded("routing")[:, rows]
    drift = routing_drift(old_routing, routing, batch.attention_mask[rows])
    return drift, response_positions(rerouted_positions(old_routing, routing), batch)


def minibatch_margins(old: OldPolicy, pair_logits: torch.Tensor | None, batch: RolloutBatch,
                      rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-layer router-margin figures [L] of `rows` (`moe.margins.margin_stats`): pi_old's logits at
    each token's margin pair against this forward's; {} when not measured."""
    if pair_logits is None or old.pair_logits is None:
        return {}
    return margin_stats(old.pair_logits[:, rows], pair_logits, batch.attention_mask[rows])


def response_positions(per_position: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    """[b, L] values per input position -> [b, T] per response token: token t is predicted at L - T - 1 + t."""
    length, n = batch.input_ids.shape[1], batch.n_response
    return per_position[:, length - n - 1 : length - 1]


def old_experts_to_probe(inputs: frozenset[str], old: OldPolicy) -> torch.Tensor | None:
    """pi_old's experts [L, B, L, k], when the objective declares the router shift; else None."""
    if "router_shift" not in inputs:
        return None
    if old.gate_scores is None or old.routing is None:
        raise ValueError("this objective needs the router shift: the old-policy pass must record the gate scores "
                         "of its experts (old_policy_pass(..., gate_scores=True))")
    return old.routing


def update_policy(policy: Policy, objective: Objective, batch: RolloutBatch, old: OldPolicy, order: torch.Tensor,
                  minibatches: int, settings: UpdateSettings) -> UpdateResult:
    """K = `minibatches` updates over the rows of `batch` in `order`; the step's update measurements:
    loss and grad norm (means over applied updates), the objective's measurements (token- or
    response-weighted over applied updates), the token ratios' median, trimmed mean and tail counts
    over every applied update (`TokenRatios`), the drift of minibatches 2..K from the old policy
    (means) and that of minibatch 2 alone, after exactly one update (`moe/drift_1`, `moe/drift_expert_1`:
    NaN where minibatch 1's update was skipped as non-finite, so that minibatch 2 ran after none)."""
    measured, drift, by_routing, ratios = StepMeasurements(), MeanOf(), RatioByRouting(), TokenRatios()
    cosines = GradientCosines(lambda: list(policy.model.parameters()), lambda: router_parameters(policy.model),
                              policy.world.distributed) if settings.measure else None
    after_one: dict[str, torch.Tensor] = {}
    first_applied = torch.tensor(False)
    per_layer: list[dict[str, torch.Tensor]] = []
    losses: list[torch.Tensor] = []
    grad_norms: list[torch.Tensor] = []
    skipped: torch.Tensor | int = 0
    tokens_trained: torch.Tensor | int = 0
    for j, rows in enumerate(torch.tensor_split(order.to(batch.input_ids.device), minibatches)):  # exactly K parts
        # minibatch j > 0 runs after j updates from the old policy: its forward measures their drift
        result = update_minibatch(policy, objective, batch, old, rows, settings,
                                  measure_drift=settings.measure and j > 0)
        measured.add(result.metrics, result.n_tokens, result.n_responses, result.applied)
        first_applied = result.applied if j == 0 else first_applied
        losses.append(torch.where(result.applied, result.loss.double(), float("nan")))
        grad_norms.append(torch.where(result.applied, result.grad_norm.double(), float("nan")))
        skipped = skipped + (~result.applied).long()
        tokens_trained = tokens_trained + result.tokens_trained
        if settings.measure:
            ratios.add(result.log_ratio, batch.response_mask[rows], result.applied)
        if cosines is not None:
            cosines.add(result.applied)
        if result.drift is not None and result.layers is not None:  # measured together
            drift.add({**result.drift, **layer_means(result.layers)})
            per_layer.append(result.layers)
            after_one = after_one or drift_after_one(result.drift, first_applied)  # minibatch 2: after minibatch 1's
        if result.rerouted is not None and settings.measure:
            by_routing.add(result.log_ratio, batch.response_mask[rows], result.rerouted)
    means = drift.result()
    metrics = {"loss": torch.stack(losses).nanmean(), "grad/norm": torch.stack(grad_norms).nanmean(),
               **measured.result(), "nonfinite/minibatches": torch.as_tensor(skipped), **ratios.result(), **after_one,
               **(cosines.result() if cosines is not None else {})}
    metrics |= {k: v for k, v in means.items() if not k.endswith("_layer")} | by_routing.result()
    layers = {key: torch.stack([p[key] for p in per_layer]) for key in per_layer[0]} if per_layer else {}
    return UpdateResult(metrics=metrics, layers=layers, tokens_trained=torch.as_tensor(tokens_trained))


def layer_means(layers: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The step's summary of per-layer margin figures: their mean over MoE layers (drift has its own)."""
    return {key: values.mean() for key, values in layers.items() if key not in ("moe/drift", "moe/drift_expert")}


def drift_after_one(drift: dict[str, torch.Tensor], applied: torch.Tensor) -> dict[str, torch.Tensor]:
    """The paper's drift (section 5.3: after exactly one gradient update), from `routing_drift` of a
    forward that ran after one update attempt: `moe/drift_1`, `moe/drift_expert_1`; NaN where that
    update was not `applied` (0-d bool: skipped as non-finite, the forward ran after zero updates)."""
    return {"moe/drift_1": torch.where(applied, drift["moe/drift"], float("nan")),
            "moe/drift_expert_1": torch.where(applied, drift["moe/drift_expert"], float("nan"))}


def drift_after_update(policy: Policy, batch: RolloutBatch, old: OldPolicy) -> dict[str, torch.Tensor]:
    """Routing of the whole batch after the step's last update against the old policy's (one extra
    no-grad pass, at the old pass's positions): `moe/drift_after`, `moe/drift_expert_after`, the
    per-layer vectors `moe/drift_layer` and `moe/drift_expert_layer` and the per-layer router-margin
    figures (`moe.margins`) as `layer:<name>` vectors [L]."""
    world = policy.world
    rows = torch.arange(len(batch), device=batch.input_ids.device)
    mine = world.rows(rows)
    ids, attention = batch.input_ids[mine], batch.attention_mask[mine]
    pairs = old.margin_pairs[:, mine] if old.margin_pairs is not None else None
    with torch.no_grad(), policy.precision.autocast(), RoutingCapture(policy.model, pairs=pairs) as capture:
        policy.model(input_ids=ids, attention_mask=attention, position_ids=position_ids(attention), logits_to_keep=1)
    stats = routing_drift(old.recorded("routing"), gather_rows(world, capture.routing, rows, dim=1), batch.attention_mask)
    pair_logits = gather_rows(world, capture.pair_logits, rows, dim=1) if pairs is not None else None
    margins = minibatch_margins(old, pair_logits, batch, rows)
    return {"moe/drift_after": stats["moe/drift"], "moe/drift_expert_after": stats["moe/drift_expert"],
            "moe/drift_layer": stats["moe/drift_layer"], "moe/drift_expert_layer": stats["moe/drift_expert_layer"],
            **{f"layer:{k}": v for k, v in margins.items()}}
