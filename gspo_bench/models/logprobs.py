"""Per-token log-probabilities (and entropies) of given tokens under a causal LM's logits, chunked.

A real MoE has a vocabulary of ~150k: one fp32 copy of [B, T, V] logits is gigabytes. Here the
log-softmax is computed in fp32 one chunk of rows at a time, and the backward recomputes the softmax
of each chunk from the logits autograd already holds; so beyond the logits themselves and their
gradient, memory is one [chunk, V] fp32 tensor whatever B and T are.
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 1024  # rows (token positions) per fp32 chunk: 1024 x 152k x 4 B = 0.6 GB at most


class _ChunkedLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, temperature: float, chunk: int):
        rows = logits.shape[0]
        logp = torch.empty(rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
        for start in range(0, rows, chunk):
            part = logits[start : start + chunk].float() / temperature  # [c, V] fp32 temporary
            lse[start : start + chunk] = torch.logsumexp(part, dim=-1)
            logp[start : start + chunk] = part.gather(-1, targets[start : start + chunk, None]).squeeze(-1)
        logp -= lse
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature, ctx.chunk = temperature, chunk
        return logp

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], chunk):
            stop = start + chunk
            # d logp / d z = (onehot - softmax) / temperature, for z the raw logits
            part = logits[start:stop].float() / temperature
            softmax = torch.exp(part - lse[start:stop, None])  # [c, V]
            g = grad_logp[start:stop, None].float() / temperature
            chunk_grad = -softmax * g
            chunk_grad.scatter_add_(-1, targets[start:stop, None], g)
            grad[start:stop] = chunk_grad.to(grad.dtype)
        return grad, None, None, None


def gather_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, chunk: int = CHUNK_ROWS
) -> torch.Tensor:
    """log softmax(logits / temperature)[targets] in fp32: logits [B, T, V], targets [B, T] -> [B, T].

    No [B, T, V] fp32 tensor is ever made or kept for backward (see the module docstring); the
    gradient flows to `logits` in their own dtype.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)  # a view when logits are contiguous in their last dims
    logp = _ChunkedLogprob.apply(flat, targets.reshape(-1), float(temperature), int(chunk))
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
