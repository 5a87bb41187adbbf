"""Per-token log-probabilities (and entropies) of given tokens under a causal LM's logits, chunked.

A real MoE has a vocabulary of ~150k: one fp32 copy of [B, T, V] logits is gigabytes. Here the
log-softmax is computed in fp32 one chunk of rows at a time, and the backward recomputes the softmax
of each chunk from the logits autograd already holds; so beyond the logits themselves and their
gradient, memory is one [chunk, V] fp32 tensor whatever B and T are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from gspo_bench.models.families import family_of, hf_model

CHUNK_ROWS = 1024  # rows (token positions) per fp32 chunk: 1024 x 152k x 4 B = 0.6 GB at most


def kept_logsumexp(part: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """logsumexp over each row's kept tokens: `part` [c, V] fp32, `kept` [c, K] token ids, -1 where a row keeps
    fewer than K (a row that keeps none gets -inf)."""
    gathered = part.gather(-1, kept.clamp(min=0)).masked_fill(kept < 0, float("-inf"))  # [c, K]
    return torch.logsumexp(gathered, dim=-1)


class _ChunkedLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, temperature: float, chunk: int,
                kept: torch.Tensor | None) -> torch.Tensor:
        rows = logits.shape[0]
        logp = torch.empty(rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
        for start in range(0, rows, chunk):
            part = logits[start : start + chunk].float() / temperature  # [c, V] fp32 temporary
            lse[start : start + chunk] = (torch.logsumexp(part, dim=-1) if kept is None
                                          else kept_logsumexp(part, kept[start : start + chunk]))
            logp[start : start + chunk] = part.gather(-1, targets[start : start + chunk, None]).squeeze(-1)
        logp -= lse
        ctx.save_for_backward(logits, targets, lse, kept)
        ctx.temperature, ctx.chunk = temperature, chunk
        return logp

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None]:
        logits, targets, lse, kept = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], chunk):
            stop = start + chunk
            # d logp / d z = (onehot - softmax) / temperature, for z the raw logits; with a kept set, the
            # softmax over the kept tokens (0 at every other token: they are not in the normaliser)
            part = logits[start:stop].float() / temperature
            softmax = torch.exp(part - lse[start:stop, None])  # [c, V]
            if kept is not None:
                inside = torch.zeros_like(softmax, dtype=torch.bool)
                ids = kept[start:stop]
                inside.scatter_(-1, ids.clamp(min=0), ids >= 0)
                softmax = torch.where(inside, softmax, 0.0)
            g = grad_logp[start:stop, None].float() / temperature
            chunk_grad = -softmax * g
            chunk_grad.scatter_add_(-1, targets[start:stop, None], g)
            grad[start:stop] = chunk_grad.to(grad.dtype)
        return grad, None, None, None, None


def gather_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, chunk: int = CHUNK_ROWS,
    kept: torch.Tensor | None = None,
) -> torch.Tensor:
    """log softmax(logits / temperature)[targets] in fp32: logits [B, T, V], targets [B, T] -> [B, T].

    With `kept` [B, T, K] (token ids, -1 past a position's kept set: the sampling mask of a top-k / top-p
    engine, `train.sampling_mask`), the softmax is renormalised over each position's kept tokens, as the
    engine sampled from it. No [B, T, V] fp32 tensor is ever made or kept for backward (see the module
    docstring); the gradient flows to `logits` in their own dtype.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if kept is not None and kept.shape[:-1] != targets.shape:
        raise ValueError(f"kept {tuple(kept.shape)} and targets {tuple(targets.shape)} disagree")
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)  # a view when logits are contiguous in their last dims
    flat_kept = kept.reshape(-1, kept.shape[-1]).to(flat.device) if kept is not None else None
    logp: torch.Tensor = _ChunkedLogprob.apply(flat, targets.reshape(-1), float(temperature), int(chunk), flat_kept)
    return logp.view(targets.shape)


@torch.no_grad()
def entropies(logits: torch.Tensor, temperature: float = 1.0, chunk: int = CHUNK_ROWS) -> torch.Tensor:
    """Entropy [B, T] (fp32) of softmax(logits / temperature) [B, T, V], one fp32 chunk at a time."""
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, flat.shape[0], chunk):
        logp = torch.log_softmax(flat[start : start + chunk].float() / temperature, dim=-1)  # [c, V]
        out[start : start + chunk] = -(logp.exp() * logp).sum(-1)
    return out.view(logits.shape[:-1])


# ---------------------------------------------------------------------------- the fused head
# Log-probs straight from the last hidden states: the output projection, the logit scaling and the
# log-softmax run one chunk of token positions at a time, forward and backward, so neither the
# [N, V] logits nor their gradient ever exist (only one [chunk, V] fp32 block at a time). The
# backward recomputes each chunk's logits (one more [chunk, H] x [H, V] product per chunk).

# What a family's causal-LM head does to `lm_head(hidden)` besides the projection: the config
# attribute its logits are divided by. Every other supported family returns the projection as is.
LOGIT_DIVISORS: dict[str, str] = {"granitemoe": "logits_scaling", "granitemoeshared": "logits_scaling"}
# Config attributes of logit soft-capping (tanh): not linear, not supported by the fused head.
SOFTCAP_ATTRIBUTES = ("final_logit_softcapping", "logit_softcapping", "output_logit_softcapping")


@dataclass(frozen=True)
class HeadChunks:
    """How the fused head computes: `chunk` token positions per block, the projection in `dtype`
    (autocast's, as `lm_head` would run), divided by the family's logit `scaling` in that dtype and by
    the sampling `temperature` in fp32: the plain path's operations in the plain path's order."""

    chunk: int
    temperature: float
    scaling: float
    dtype: torch.dtype

    def logits(self, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """[c, V] fp32 logits / temperature of a block of hidden states [c, H]."""
        raw = torch.nn.functional.linear(hidden.to(self.dtype), weight, bias)  # [c, V] in the compute dtype
        if self.scaling != 1.0:
            raw = raw / self.scaling
        return raw.float() / self.temperature

    def raw_gradient(self, z: torch.Tensor, lse: torch.Tensor, targets: torch.Tensor,
                     grad_logp: torch.Tensor) -> torch.Tensor:
        """[c, V] d loss / d (hidden @ W^T + b) from d loss / d logp [c]: (onehot - softmax) / (T s),
        computed in `z`'s own memory (the block's logits are not needed after it)."""
        g = grad_logp[:, None].float() / self.temperature  # [c, 1]
        grad = z.sub_(lse[:, None]).exp_().mul_(-g)  # -softmax * g
        grad.scatter_add_(-1, targets[:, None], g)
        grad = grad.to(self.dtype)
        return grad.div_(self.scaling) if self.scaling != 1.0 else grad


class _FusedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                plan: HeadChunks, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logp)
        entropy = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        w, b = weight.to(plan.dtype), bias.to(plan.dtype) if bias is not None else None
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, n, plan.chunk):
                part = slice(start, start + plan.chunk)
                z = plan.logits(hidden[part], w, b)  # [c, V] fp32
                lse[part] = torch.logsumexp(z, dim=-1)
                logp[part] = z.gather(-1, targets[part, None]).squeeze(-1) - lse[part]
                if with_entropy:
                    log_p = z.sub_(lse[part, None])  # in place: the block's logits are done with
                    entropy[part] = -(log_p.exp() * log_p).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.plan = plan
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor, _grad_entropy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        plan = ctx.plan
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        w, b = weight.to(plan.dtype), bias.to(plan.dtype) if bias is not None else None
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_weight else None
        grad_bias = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if want_bias else None
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], plan.chunk):
                part = slice(start, start + plan.chunk)
                z = plan.logits(hidden[part], w, b)  # [c, V] fp32, recomputed
                d_raw = plan.raw_gradient(z, lse[part], targets[part], grad_logp[part])  # [c, V] compute dtype
                if grad_hidden is not None:
                    grad_hidden[part] = (d_raw @ w).to(hidden.dtype)
                if grad_weight is not None:
                    grad_weight += (d_raw.t() @ hidden[part].to(plan.dtype)).float()
                if grad_bias is not None:
                    grad_bias += d_raw.float().sum(0)
        grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
        grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None and bias is not None else None
        return grad_hidden, grad_weight, grad_bias, None, None, None


def logit_scaling(model: torch.nn.Module) -> float:
    """What the model's head divides `lm_head(hidden)` by (1 for most families); refuses a head the
    fused path cannot reproduce: not a plain nn.Linear, or logit soft-capping."""
    family = family_of(model)
    head = hf_model(model, "the fused head").get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        raise ValueError(f"train.logprob_chunk_tokens needs a plain nn.Linear output head; this {family} model's is "
                         f"{type(head).__name__}: leave logprob_chunk_tokens unset")
    config = model.config
    capped = [name for name in SOFTCAP_ATTRIBUTES if getattr(config, name, None) is not None]
    if capped:
        raise ValueError(f"train.logprob_chunk_tokens: this {family} model soft-caps its logits ({capped[0]}), "
                         "which the fused head does not reproduce: leave logprob_chunk_tokens unset")
    return float(getattr(config, LOGIT_DIVISORS[family])) if family in LOGIT_DIVISORS else 1.0


class FusedHeadCall:
    """Stands in for the model's `lm_head` during one call (see `fused_head`): computes the log-probs
    (and entropies) of `targets` from the hidden states it is handed and returns empty logits [B, T, 0]."""

    def __init__(self, head: torch.nn.Linear, targets: torch.Tensor, temperature: float, scaling: float,
                 chunk: int, with_entropy: bool):
        self.head, self.targets, self.scaling = head, targets, scaling
        self.temperature, self.chunk, self.with_entropy = temperature, chunk, with_entropy
        self.logp: torch.Tensor | None = None  # [B, T] after the call
        self.entropy: torch.Tensor | None = None  # [B, T] when with_entropy

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:  # hidden [B, T, H]
        if hidden.shape[:-1] != self.targets.shape:
            raise ValueError(f"the head got hidden states {tuple(hidden.shape)} for targets {tuple(self.targets.shape)}")
        device = hidden.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else self.head.weight.dtype
        plan = HeadChunks(self.chunk, self.temperature, self.scaling, dtype)
        logp, entropy = _FusedHead.apply(hidden.reshape(-1, hidden.shape[-1]), self.head.weight, self.head.bias,
                                         self.targets.reshape(-1), plan, self.with_entropy)
        self.logp = logp.view(self.targets.shape)
        self.entropy = entropy.view(self.targets.shape) if self.with_entropy else None
        return hidden.new_zeros((*hidden.shape[:-1], 0))


@contextmanager
def fused_head(model: torch.nn.Module, targets: torch.Tensor, temperature: float = 1.0, chunk: int = CHUNK_ROWS,
               with_entropy: bool = False) -> Iterator[FusedHeadCall]:
    """Within the block, the model's output head computes log softmax(logits / temperature)[targets]
    [B, T] (and the entropies) from its hidden states in `chunk`-row blocks and hands the model empty
    logits; read them from the yielded call after the forward. The head runs inside the model's own
    call, so a sharded (FSDP2) model's head weights are gathered as for its plain head."""
    if temperature <= 0 or chunk < 1:
        raise ValueError(f"temperature must be > 0 and chunk >= 1, got {temperature} and {chunk}")
    scaling = logit_scaling(model)  # refuses any head but a plain nn.Linear
    head = hf_model(model, "the fused head").get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise TypeError(f"the fused head needs an nn.Linear output head, got {type(head).__name__}")
    call = FusedHeadCall(head, targets, float(temperature), scaling, int(chunk), with_entropy)
    head.forward = call  # type: ignore[method-assign, assignment]  # an instance attribute shadows nn.Linear.forward for this block only
    try:
        yield call
    finally:
        del head.forward
