"""Micro-batches of a minibatch (`train.micro_batch_tokens`): which rows each forward/backward holds.

A minibatch's rows are left-padded prompts followed by right-padded responses, all of one width L.
A micro-batch keeps only the columns some of its rows attend (`start:stop`), so its cost is its
rows x that padded width; rows are packed by length (longest first, each next row joining while the
micro-batch stays within the token budget) and a response is never split: a row wider than the
budget goes alone. Under torchrun each rank packs its own rows (minibatch positions r, r + W, ...)
and every rank runs as many micro-batches as the rank that needs most (every forward and backward
of a sharded model is collective): a rank with fewer splits its largest micro-batches, and with too
few rows to split repeats one row as a filler whose loss counts 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo_bench.runtime.distributed import World


@dataclass(frozen=True)
class MicroBatch:
    positions: torch.Tensor  # [m] minibatch positions of its rows (indices into the minibatch's rows), ascending
    start: int  # first input column any of its rows attends
    stop: int  # one past the last column it keeps (at least one response column)
    filler: bool = False  # a repeated row that only keeps the ranks in step: its loss is multiplied by 0

    @property
    def columns(self) -> slice:
        return slice(self.start, self.stop)

    def n_response(self, width: int, n_response: int) -> int:
        """Response columns of the window: the batch's T less the trailing columns no row attends."""
        return n_response - (width - self.stop)

    def tokens(self) -> int:
        """What it holds: rows x padded width."""
        return self.positions.numel() * (self.stop - self.start)


def row_spans(attention_mask: torch.Tensor, n_response: int) -> tuple[list[int], list[int]]:
    """Per row of `attention_mask` [b, L]: the first attended column and one past the last, the stop
    kept at least one column into the responses (where the first response token sits)."""
    width = attention_mask.shape[1]
    attended = attention_mask.bool()
    columns = torch.arange(width, device=attention_mask.device)
    first = torch.where(attended, columns, width).amin(-1).clamp(max=width - n_response - 1)
    last = torch.where(attended, columns, -1).amax(-1)
    stop = (last + 1).clamp(min=width - n_response + 1, max=width)
    return first.tolist(), stop.tolist()


def micro_batch(positions: list[int], starts: list[int], stops: list[int], filler: bool = False) -> MicroBatch:
    """The micro-batch of minibatch `positions`, with the span its rows attend."""
    ordered = sorted(positions)
    return MicroBatch(torch.tensor(ordered, dtype=torch.long), min(starts[p] for p in ordered),
                      max(stops[p] for p in ordered), filler)


def pack(positions: list[int], starts: list[int], stops: list[int], budget: int) -> list[list[int]]:
    """Greedy packing by length: rows widest first (ties: minibatch order); a row joins the current
    micro-batch while (rows + 1) x the joint span stays within `budget`, else it opens the next one."""
    order = sorted(positions, key=lambda p: (-(stops[p] - starts[p]), p))
    groups: list[list[int]] = []
    lo = hi = 0
    for p in order:
        if groups:
            new_lo, new_hi = min(lo, starts[p]), max(hi, stops[p])
            if (len(groups[-1]) + 1) * (new_hi - new_lo) <= budget:
                groups[-1].append(p)
                lo, hi = new_lo, new_hi
                continue
        groups.append([p])
        lo, hi = starts[p], stops[p]
    return groups


def even_out(groups: list[list[int]], count: int) -> tuple[list[list[int]], int]:
    """`groups` split until there are `count`: the one with most rows halves (ties: the first); when
    every group holds one row, the rest are fillers. Returns (groups, number of fillers to add)."""
    groups = [list(g) for g in groups]
    while len(groups) < count:
        largest = max(range(len(groups)), key=lambda i: (len(groups[i]), -i))
        if len(groups[largest]) < 2:
            return groups, count - len(groups)
        group = groups.pop(largest)
        half = (len(group) + 1) // 2
        groups[largest:largest] = [group[:half], group[half:]]
    return groups, 0


def plan_micro_batches(attention_mask: torch.Tensor, n_response: int, budget: int | None,
                       world: World = World()) -> list[MicroBatch]:
    """This rank's micro-batches of a minibatch whose rows have `attention_mask` [b, L] (all ranks' rows,
    in minibatch order; rank r's are positions r, r + W, ...). `budget` None: one micro-batch of all
    this rank's rows and every column (the update without micro-batches)."""
    size, width = attention_mask.shape
    mine = list(range(world.rank, size, world.size))
    if budget is None:
        return [MicroBatch(torch.tensor(mine, dtype=torch.long), 0, width)]
    starts, stops = row_spans(attention_mask, n_response)
    per_rank = [pack(list(range(r, size, world.size)), starts, stops, budget) for r in range(world.size)]
    groups, fillers = even_out(per_rank[world.rank], max(len(g) for g in per_rank))
    plan = [micro_batch(g, starts, stops) for g in groups]
    return plan + [micro_batch(groups[0][:1], starts, stops, filler=True) for _ in range(fillers)]
