"""Router margins: how close each token is to a routing flip, and how far updates move it.

For a token at one MoE layer with router logits s [E] and chosen experts C (|C| = k):

    a = the weakest chosen expert      argmin_{e in C} s_e
    b = the strongest unchosen expert  argmax_{e not in C} s_e
    margin m = s_a - s_b               (>= 0 where the family selects the top-k logits)

An update that moves the logits to s' changes the margin by dm = (s'_a - s'_b) - (s_a - s_b); the
token's expert set flips (a for b) when m + dm < 0. Two per-layer figures come from that:

- `crossed`: the share of tokens whose own margin was crossed, m_i + dm_i < 0 (a flip of the
  k-th and (k+1)-th experts; the measured drift also counts flips deeper in the ranking);
- `flip_pred`: the flip rate predicted from the two distributions alone, as if a token's margin and
  the change it receives were independent: P(m + dm < 0) = mean_j share_i(m_i < -dm_j). It says
  whether drift is small because margins are wide or because updates barely move the router.

Margins are in router-logit units (a softmax family's probabilities rank the same); `dscore` is
the change of the router scores themselves, (|s'_a - s_a| + |s'_b - s_b|) / 2.
"""

from __future__ import annotations

import torch

MARGIN_THRESHOLDS = (0.01, 0.1, 1.0)  # logit units: the report gives the share of tokens below each


def router_margins(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[N, 2] expert ids (a, b): each token's weakest chosen expert in `ids` [N, k] and its strongest
    unchosen one, from router logits [N, E]. With no unchosen expert (k = E), b = a."""
    logits = logits.detach().float()
    chosen = logits.gather(-1, ids)  # [N, k]
    weakest = ids.gather(-1, chosen.argmin(-1, keepdim=True))  # [N, 1]
    if logits.shape[-1] == ids.shape[-1]:
        return torch.cat([weakest, weakest], dim=-1)
    unchosen = logits.scatter(-1, ids, float("-inf"))
    return torch.cat([weakest, unchosen.argmax(-1, keepdim=True)], dim=-1)


def margin_stats(old_pair: torch.Tensor, new_pair: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-layer margin figures [L] from the logits at each token's (a, b) before (`old_pair`) and
    after updates (`new_pair`), both [L, B, T, 2], over valid positions `mask` [B, T]:
    `moe/flip_pred`, `moe/margin_crossed`, `moe/dscore`, `moe/dmargin_abs` (mean |dm|),
    `moe/margin_median` and `moe/margin_lt_<x>` for each threshold x."""
    if old_pair.shape != new_pair.shape or old_pair.dim() != 4 or old_pair.shape[-1] != 2:
        raise ValueError(f"old_pair and new_pair must share one [L, B, T, 2] shape, got {tuple(old_pair.shape)} "
                         f"and {tuple(new_pair.shape)}")
    valid = mask.bool().to(old_pair.device).reshape(-1)
    old = old_pair.float().flatten(1, 2)[:, valid]  # [L, n, 2]
    new = new_pair.float().flatten(1, 2)[:, valid]
    margin = old[..., 0] - old[..., 1]  # [L, n]
    dm = (new[..., 0] - new[..., 1]) - margin
    stats = {"moe/flip_pred": predicted_flip_rate(margin, dm),
             "moe/margin_crossed": (margin + dm < 0).float().mean(-1),
             "moe/dscore": (new - old).abs().mean((-1, -2)),
             "moe/dmargin_abs": dm.abs().mean(-1),
             "moe/margin_median": margin.median(-1).values if margin.shape[-1] else margin.new_full(margin.shape[:1], float("nan"))}
    for x in MARGIN_THRESHOLDS:
        stats[f"moe/margin_lt_{x:g}"] = (margin < x).float().mean(-1)
    return stats


def predicted_flip_rate(margin: torch.Tensor, dm: torch.Tensor) -> torch.Tensor:
    """[L]: P(m + dm < 0) with m and dm drawn independently from their per-layer samples [L, n]:
    mean over j of the share of margins below -dm_j (sort and search, O(n log n))."""
    n = margin.shape[-1]
    if n == 0:
        return margin.new_full(margin.shape[:1], float("nan"))
    ordered = margin.sort(-1).values.contiguous()
    below = torch.searchsorted(ordered, (-dm).contiguous(), right=False)  # [L, n]: margins < -dm_j
    return below.double().sum(-1).float() / (n * n)
