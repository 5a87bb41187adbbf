"""Gate rules: how a family turns its router logits into the weights of the experts a token uses.

A rule answers two questions for any expert ids [N, k], chosen by the router or forced by a replay:

- `weights(logits, ids)`: the gate weights the family gives experts `ids`, a differentiable function
  of the live logits [N, E] (a replay hands them to the experts, so the router keeps its gradient);
- `scores(logits, ids)`: the family's normalised gate score of experts `ids` in fp32, the
  probability it selects by: softmax over all experts, or the sigmoid (what RSPO reads);
- `confidence(logits, ids)`: the routing confidence of a token, the share of the router's score
  mass on experts `ids` [N] in fp32: under a softmax (also for the families that renormalise over the
  top-k logits) the probability mass of the experts under the softmax over all experts; under a
  sigmoid the experts' share of the sum of all experts' sigmoids (the scores normalised to sum to 1,
  so that both read alike). k/E for a router that cannot tell experts apart, 1 when the chosen
  experts hold all the mass.

Both are computed from the logits at the given ids, never from probabilities already masked by the
router's own top-k: an expert the live router would not choose still gets its live weight (non-zero,
with gradient). Selection itself (top-k, correction bias, expert groups) is the router's business
and never rebuilt here: a replay brings its own ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


class GateRule(Protocol):
    def weights(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor: ...

    def scores(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor: ...

    def confidence(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor: ...


def softmax_at(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """softmax(logits)[ids] in fp32, by the same operations as the families' routers (a softmax over
    all experts, then a gather), so that replaying a recording reproduces the forward bit for bit."""
    return torch.softmax(logits.float(), dim=-1).gather(-1, ids)


def softmax_mass(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[N] fp32: sum over the k experts `ids` [N, k] of softmax(logits [N, E]) over all experts."""
    return softmax_at(logits, ids).sum(-1)


@dataclass(frozen=True)
class Softmax:
    """Softmax over all experts; weights are the probabilities of the experts used, optionally
    renormalised (divided by their `norm_p`-norm, 1: their sum, clamped below at `norm_min`), times `scale`."""

    renormalise: bool = False
    norm_p: float = 1.0
    norm_min: float = 0.0
    scale: float = 1.0

    def weights(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        weights = softmax_at(logits, ids)
        if self.renormalise:
            if self.norm_p == 1.0:  # the sum, as the routers compute it (bit-identical replays)
                norm = weights.sum(-1, keepdim=True)
            else:
                norm = torch.linalg.vector_norm(weights, ord=self.norm_p, dim=-1, keepdim=True)
            weights = weights / norm.clamp(min=self.norm_min)
        return weights * self.scale

    def scores(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return softmax_at(logits, ids)

    def confidence(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return softmax_mass(logits, ids)


@dataclass(frozen=True)
class TopKSoftmax:
    """Top-k over the logits, then a softmax over the k logits used; the gate score is the softmax over all experts."""

    def weights(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float().gather(-1, ids), dim=-1)

    def scores(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return softmax_at(logits, ids)

    def confidence(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return softmax_mass(logits, ids)


@dataclass(frozen=True)
class Sigmoid:
    """Sigmoid of each logit; weights are the sigmoids of the experts used (never biased), optionally
    renormalised to sum to 1 (DeepSeek-V3's `+ 1e-20` included), times `scale`."""

    renormalise: bool = False
    scale: float = 1.0

    def weights(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        weights = torch.sigmoid(logits.float().gather(-1, ids))
        if self.renormalise:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return weights * self.scale

    def scores(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(logits.float().gather(-1, ids))

    def confidence(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        sigmoids = torch.sigmoid(logits.float())  # [N, E]
        return sigmoids.gather(-1, ids).sum(-1) / sigmoids.sum(-1)  # [N]: the chosen experts' share
