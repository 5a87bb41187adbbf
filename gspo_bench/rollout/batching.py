"""What rollouts share beyond the padding of token lists (`models.padding`): the response mask after
EOS, widening a rollout, and gathering the ranks' rows of a rollout batch."""

from __future__ import annotations

import torch
import torch.distributed as dist

from gspo_bench.rollout.engine import Rollout
from gspo_bench.runtime.distributed import World, gather_rows


def mask_after_eos(tokens: torch.Tensor, eos_id: int) -> torch.Tensor:
    """[B, T] bool: True for every token up to and including the first `eos_id`."""
    is_eos = (tokens == eos_id).long()
    return (torch.cumsum(is_eos, dim=1) - is_eos) == 0


def _pad_columns(x: torch.Tensor, left: int, right: int, value: float, dim: int = 1) -> torch.Tensor:
    """`x` with `left` and `right` columns of `value` added along `dim` (any dtype, bool included)."""
    shape = list(x.shape)
    parts = []
    for width in (left, right):
        shape[dim] = width
        parts.append(torch.full(shape, value, dtype=x.dtype, device=x.device))
    return torch.cat([parts[0], x, parts[1]], dim=dim)


def kept_ids(kept: torch.Tensor) -> torch.Tensor:
    """[..., K] ids of the True entries of a kept mask [..., V], -1 past each row's set; K is the largest set
    (the set's order: by id)."""
    width = int(kept.sum(-1).max()) if kept.numel() else 0
    order = torch.sort((~kept).to(torch.uint8), dim=-1, stable=True).indices[..., :width]  # kept ids first, by id
    return torch.where(kept.gather(-1, order), order, -1)


def pad_kept(kept: torch.Tensor, response_width: int, set_width: int) -> torch.Tensor:
    """A rollout's kept ids [B, T, K] widened to `response_width` positions and `set_width` ids, with -1."""
    return _pad_columns(_pad_columns(kept, 0, response_width - kept.shape[1], -1), 0, set_width - kept.shape[2], -1,
                        dim=2)


def pad_rollout(rollout: Rollout, prompt_width: int, response_width: int, pad_id: int,
                set_width: int | None = None) -> Rollout:
    """The same rows with prompts left-padded to `prompt_width` and responses right-padded to
    `response_width` (positions count attended tokens only, so no log-prob changes); kept ids to `set_width`
    (default: as they are)."""
    left, right = prompt_width - rollout.prompt_width, response_width - rollout.response_mask.shape[1]
    if left < 0 or right < 0:
        raise ValueError("pad_rollout only widens a rollout")
    routing = rollout.routing
    if routing is not None:  # [L, B, L_seq - 1, k]: positions on dim 2
        routing = _pad_columns(routing, left, right, 0, dim=2)
    return Rollout(
        input_ids=_pad_columns(rollout.input_ids, left, right, pad_id),
        attention_mask=_pad_columns(rollout.attention_mask, left, right, 0),
        response_mask=_pad_columns(rollout.response_mask, 0, right, False),
        sampling_logp=_pad_columns(rollout.sampling_logp, 0, right, 0.0),
        routing=routing, finite=rollout.finite,
        sampling_kept=None if rollout.sampling_kept is None else pad_kept(
            rollout.sampling_kept, response_width, set_width or rollout.sampling_kept.shape[2]),
    )


def gather_rollout(world: World, local: Rollout, n_rows: int, pad_id: int) -> Rollout:
    """The whole rollout batch of `n_rows` rows on every rank, from each rank's rows r, r + W, ...
    (`local`): padded to the widest prompt and response (and kept set, with `train.sampling_mask`) of any
    rank, then all-gathered."""
    device = local.input_ids.device
    kept = local.sampling_kept
    widths = torch.tensor([local.prompt_width, local.response_mask.shape[1], 0 if kept is None else kept.shape[2]],
                          device=device)
    dist.all_reduce(widths, op=dist.ReduceOp.MAX)
    padded = pad_rollout(local, int(widths[0]), int(widths[1]), pad_id,
                         set_width=None if kept is None else int(widths[2]))
    rows = torch.arange(n_rows, device=device)
    finite = (padded.finite if padded.finite is not None else torch.tensor(True)).to(device).float()
    dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    routing = None if padded.routing is None else gather_rows(world, padded.routing, rows, dim=1)
    sampling_kept = None if padded.sampling_kept is None else gather_rows(world, padded.sampling_kept, rows)
    return Rollout(input_ids=gather_rows(world, padded.input_ids, rows),
                   attention_mask=gather_rows(world, padded.attention_mask, rows),
                   response_mask=gather_rows(world, padded.response_mask.long(), rows).bool(),
                   sampling_logp=gather_rows(world, padded.sampling_logp, rows),
                   routing=routing, finite=finite.bool(), sampling_kept=sampling_kept)
