"""Static-cache decoding, replayed as one CUDA graph per decode step on a GPU (`hf` engine, `decode: static`).

`model.generate` decodes a token per step through Python: on a 1.25 B MoE a decode forward is ~1,250
kernel launches, 28 ms of wall time for ~5.5 ms of GPU work. Here the whole step (forward on a
static KV cache, temperature, top-p, the sampling log-prob, the keyed Gumbel noise, argmax, the
end-of-response bookkeeping and the routed experts) reads and writes only tensors that live as long
as the batch, so on CUDA it is captured once per batch shape and replayed: one launch per token.

It samples what `generate` samples, by the same rule: token t of row r is
argmax(processed scores + Gumbel noise of (seed, key_r, t)) (`rollout.sampling`), the processed scores
being the fp32 logits (plus the logit noise of (seed, key_r, t), `rollout.logit_noise`, where set) with
</s> masked while t < min_new_tokens, then temperature, then top-p; the
sampling log-prob is the log-softmax of the processed scores. So every row is still a function of
(seed, row key) and the model's logits, and a finished row feeds the pad token, as `generate` does.
Routing is recorded from the routing sites into a static [L, B, positions, k] buffer, so R3 and
`moe/rollout_gap` keep working. Under `train.sampling_mask` with top-k alone, each token's kept set goes into
a static [B, T, 2k] buffer too (`record_kept_sets`). On CPU the same step runs eagerly (what the tests check).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from transformers import StaticCache, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from gspo_bench.models.families import hf_model
from gspo_bench.moe.routers import find_routers
from gspo_bench.moe.sites import Handle, OnRoute, attach
from gspo_bench.rollout.logit_noise import noisy_logits
from gspo_bench.rollout.router_noise import RouterNoise
from gspo_bench.rollout.sampling import uniform


@dataclass(frozen=True)
class DecodeRule:
    """How scores become a token: what `generate` applies before and after our processors."""

    eos_id: int
    pad_id: int
    min_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    top_k: int = 0  # the k most probable tokens only (0: off), before top_p
    logit_noise: float = 0.0  # std of the noise on the final logits (`rollout.logit_noise`; 0: off)
    kept_width: int = 0  # ids of each token's kept set recorded, up to this many (0: none; `record_kept_sets`)


class DecodeState:
    """The batch's static tensors: everything a decode step reads or writes."""

    def __init__(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int,
                 keys: torch.Tensor, n_moe: int, top_k: int, kept_width: int = 0):
        batch, width = prompt_ids.shape
        device = prompt_ids.device
        self.width, self.max_new_tokens = width, max_new_tokens
        self.keys = keys.to(device)
        self.key_valid = torch.zeros(batch, width + max_new_tokens, dtype=torch.bool, device=device)
        self.key_valid[:, :width] = prompt_mask.bool()
        self.tokens = torch.zeros(batch, max_new_tokens, dtype=torch.long, device=device)  # [B, T]
        self.logp = torch.zeros(batch, max_new_tokens, dtype=torch.float32, device=device)  # [B, T]
        self.step = torch.zeros((), dtype=torch.long, device=device)  # index of the token sampled next
        self.position = prompt_mask.long().sum(-1, keepdim=True)  # [B, 1] rotary position of the fed token
        self.fed = torch.zeros(batch, 1, dtype=torch.long, device=device)  # [B, 1] token fed to the next forward
        self.unfinished = torch.ones(batch, dtype=torch.bool, device=device)
        self.finite = torch.ones((), dtype=torch.bool, device=device)
        self.routing = (torch.zeros(n_moe, batch, width + max_new_tokens - 1, top_k, dtype=torch.long, device=device)
                        if n_moe else None)  # [L, B, L_seq - 1, k]
        self.route_at = torch.arange(width, device=device)  # positions the next forward routes
        self.kept = (torch.full((batch, max_new_tokens, kept_width), -1, dtype=torch.long, device=device)
                     if kept_width else None)  # [B, T, W] each token's kept ids by id, -1 past its set
        self.kept_count = torch.zeros(batch, max_new_tokens, dtype=torch.long, device=device)  # [B, T] its size


def processed_scores(logits: torch.Tensor, state: DecodeState, rule: DecodeRule) -> torch.Tensor:
    """[B, V] fp32 scores of the sampling distribution at `state.step` (before the Gumbel noise): the
    logits plus the logit noise where the rule has it, then </s> blocked, temperature, top-k, top-p; a row of
    NaN or +inf scores (a diverged policy) is zeroed and turns `state.finite` False."""
    scores = logits.float()
    if rule.logit_noise:
        scores = noisy_logits(scores, rule.logit_noise, rule.seed, state.keys, state.step)
    if rule.min_new_tokens:
        blocked = (state.step < rule.min_new_tokens) & (torch.arange(scores.shape[-1], device=scores.device) == rule.eos_id)
        scores = scores.masked_fill(blocked, float("-inf"))
    if rule.temperature != 1.0:
        scores = TemperatureLogitsWarper(rule.temperature)(None, scores)
    if rule.top_k > 0:
        scores = TopKLogitsWarper(rule.top_k)(None, scores)
    if rule.top_p < 1.0:
        scores = TopPLogitsWarper(rule.top_p)(None, scores)
    if state.kept is not None:
        record_kept_sets(scores, state.kept, state.kept_count, state.step)
    bad = (torch.isnan(scores) | torch.isposinf(scores)).any(-1, keepdim=True)  # [B, 1]
    state.finite &= ~bad.any()
    return torch.where(bad, 0.0, scores)


def record_kept_sets(scores: torch.Tensor, kept: torch.Tensor, counts: torch.Tensor, step: torch.Tensor) -> None:
    """Write the kept set of token `step` of every row (the ids whose score top-k left finite, by id) into
    the fixed-width `kept` [B, T, W], and its size into `counts` [B, T] (tensor ops only: capturable). A
    set wider than the buffer (a tie at the k-th score) is cut here; its size says so."""
    finite = torch.isfinite(scores)  # [B, V]
    vocab, width = scores.shape[-1], kept.shape[-1]
    values, ids = torch.topk(scores.masked_fill(~finite, float("-inf")), min(width, vocab), dim=-1)
    ids = torch.where(torch.isfinite(values), ids, vocab).sort(-1).values  # past the set: vocab, sorted last
    ids = torch.nn.functional.pad(torch.where(ids == vocab, -1, ids), (0, width - ids.shape[-1]), value=-1)
    column = step.view(1)
    kept.index_copy_(1, column, ids[:, None])
    counts.index_copy_(1, column, finite.sum(-1)[:, None])


def static_kept_sets(kept: torch.Tensor, counts: torch.Tensor, finite: torch.Tensor, response_mask: torch.Tensor,
                     width: int) -> torch.Tensor:
    """[B, width, K] the kept ids (`kept`, sizes `counts`: `record_kept_sets`) of the first `width` sampled
    positions, K the widest set among them (as `generate`'s recorder pads them). A response token whose set
    outgrew the buffer is refused (where the rollout is `finite`): its set was cut, and a mask from it
    would be wrong."""
    counts = counts[:, :width]
    buffer = kept.shape[-1]
    widest = int(counts[response_mask[:, :width].bool()].max()) if bool(response_mask.any()) else 0
    if widest > buffer and bool(finite):
        raise RuntimeError(f"hf engine: decode: static keeps at most {buffer} ids per token (2 x rollout.top_k), and "
                           f"ties at the k-th score kept {widest} at some position; set engine_options.decode: generate")
    return kept[:, :width, : min(int(counts.max()) if counts.numel() else 0, buffer)]


def sample_into(logits: torch.Tensor, state: DecodeState, rule: DecodeRule) -> None:
    """Sample token `state.step` of every row from `logits` [B, V], record it and its log-prob, and
    advance the state (tensor ops only: capturable)."""
    scores = processed_scores(logits, state, rule)
    noise = -torch.log(-torch.log(uniform(rule.seed, state.keys, state.step, scores.shape[-1])))
    token = (scores.double() + noise).to(scores.dtype).argmax(-1)  # [B]
    logp = torch.log_softmax(scores, dim=-1).gather(-1, token[:, None]).squeeze(-1)  # [B]
    token = torch.where(state.unfinished, token, torch.full_like(token, rule.pad_id))
    column = state.step.view(1)
    state.tokens.index_copy_(1, column, token[:, None])
    state.logp.index_copy_(1, column, logp[:, None])
    state.unfinished &= token != rule.eos_id
    state.fed.copy_(token[:, None])
    state.step += 1


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where attending, the dtype's lowest value elsewhere (as transformers builds masks: a row that
    may see nothing, a padding query, stays finite, so no NaN enters the cache)."""
    return torch.zeros((), dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


def decode_step(model: torch.nn.Module, cache: StaticCache, state: DecodeState, rule: DecodeRule, dtype: torch.dtype) -> None:
    """Feed the last sampled token (cache position width + step - 1) and sample the next one."""
    fed_at = (state.step - 1 + state.width).view(1)
    state.key_valid.index_fill_(1, fed_at, True)
    state.route_at.copy_(fed_at)
    logits = model(input_ids=state.fed, attention_mask=additive_mask(state.key_valid[:, None, None, :], dtype),
                   position_ids=state.position, past_key_values=cache, use_cache=True).logits[:, -1]  # [B, V]
    state.position += 1
    sample_into(logits, state, rule)


def prefill(model: torch.nn.Module, cache: StaticCache, prompt_ids: torch.Tensor, state: DecodeState, rule: DecodeRule, dtype: torch.dtype) -> None:
    """The left-padded prompts through the empty cache, at the positions `generate` gives them
    (counted over attended tokens); samples token 0."""
    width = prompt_ids.shape[1]
    causal = torch.ones(width, state.key_valid.shape[1], dtype=torch.bool, device=prompt_ids.device).tril()
    allowed = causal[None] & state.key_valid[:, None, :]  # [B, W, W + T]
    positions = (state.key_valid[:, :width].long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=prompt_ids, attention_mask=additive_mask(allowed[:, None], dtype), position_ids=positions,
                   past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
    sample_into(logits, state, rule)


class RoutingRecorder:
    """Writes each MoE layer's chosen experts into `state.routing` at `state.route_at` (tensor ops,
    so a captured step records its routing on every replay)."""

    def __init__(self, model: torch.nn.Module, state: DecodeState):
        self.routers, self.state = find_routers(model), state
        self._handles: list[Handle] = []

    def __enter__(self) -> RoutingRecorder:
        if self.state.routing is not None:
            for layer, router in enumerate(self.routers):
                self._handles.append(attach(router.site, router.module, router.block, self._on_route(layer)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in reversed(self._handles):
            handle.remove()
        self._handles.clear()

    def _on_route(self, layer: int) -> OnRoute:
        def on_route(logits: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> None:
            routing = self.state.routing
            if routing is None:  # attached only where the state records routing
                raise RuntimeError("the routing writer ran on a decode state that records no routing")
            batch = routing.shape[1]
            routing[layer].index_copy_(1, self.state.route_at, ids.reshape(batch, -1, ids.shape[-1]).long())

        return on_route


def static_decode(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, keys: torch.Tensor,
                  max_new_tokens: int, rule: DecodeRule, capture_routing: bool, graph: bool,
                  router_noise: float = 0.0) -> DecodeState:
    """Decode up to `max_new_tokens` per row, routing with `router_noise` (`rollout.router_noise`). With `graph` (CUDA), the step is captured once after two
    eager warm-up steps and replayed for the rest. Stops early (checked every 8 steps, one host sync
    each) once every row has ended."""
    routers = find_routers(model) if capture_routing else []
    state = DecodeState(prompt_ids, prompt_mask, max_new_tokens, keys, len(routers), routers[0].top_k if routers else 0,
                        rule.kept_width)
    dtype = next(model.parameters()).dtype
    cache = StaticCache(config=hf_model(model, "the static decoder's cache").config, max_cache_len=prompt_ids.shape[1] + max_new_tokens)
    noise = (RouterNoise(model, router_noise, rule.seed, state.keys, state.width, columns=lambda: state.route_at)
             if router_noise else nullcontext())
    with torch.no_grad(), noise, RoutingRecorder(model, state):  # noise first: the recorder records it
        prefill(model, cache, prompt_ids, state, rule, dtype)
        state.route_at = torch.zeros(1, dtype=torch.long, device=prompt_ids.device)  # one position per decode step
        replay = None
        for t in range(1, max_new_tokens):
            if graph and replay is None and t >= 3:
                replay = captured_step(model, cache, state, rule, dtype)
            if replay is not None:
                replay()
            else:
                decode_step(model, cache, state, rule, dtype)
            if t % 8 == 0 and not bool(state.unfinished.any()):
                break
    return state


def captured_step(model: torch.nn.Module, cache: StaticCache, state: DecodeState, rule: DecodeRule,
                  dtype: torch.dtype) -> Callable[[], None]:
    """The decode step as a CUDA graph's replay. Capture records the step without running it, so the
    state is unchanged until the first replay."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        decode_step(model, cache, state, rule, dtype)
    return graph.replay
