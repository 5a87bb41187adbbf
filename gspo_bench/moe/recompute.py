"""Activation checkpointing that never re-routes: the recompute in backward uses the forward's experts.

A checkpointed decoder layer keeps only its inputs in the forward and runs again in backward to
rebuild what its backward needs. Run naively, that recompute routes every token again: under a
replay (R2/R3) the replay context has ended by then, so the recompute routes by the live router,
not by the replayed experts; and even without a replay a near-tie may flip between the two runs
(other kernels, other batch). Either way the recompute computes something other than the forward
did: the tensors it rebuilds differ in shape (tokens per expert) and torch raises CheckpointError,
or they differ in value and the gradient is wrong.

`RouteKeeper(model)` is the `context_fn` of `torch.utils.checkpoint.checkpoint` (non-reentrant) for
every decoder layer of `model`. For each checkpointed call it returns two contexts sharing one record:

- forward: at each router that runs, record the experts the experts *received* (after a replay,
  router noise or any other replacement attached before it) and, where a replay handed them gate
  weights that carry no gradient (a full replay), the weights too. Where nothing replaced the
  model's own choice, its gate weights are rebuilt by the family's rule (the same values, as
  `gates.py` computes them), as a replay's are: the checkpoint compares what forward and recompute
  save for backward, tensor by tensor, so both must compute the gate weights the same way;
- recompute: hand the experts exactly those ids again, with the family's gate weights rebuilt from
  the recomputed router logits (`gates.py`), so the router's gradient is the forward's; and mark the
  recompute (`recomputing()`), during which a `RoutingCapture` neither records nor replays: routes
  are captured once, by the forward.

The record lives as long as the checkpoint's saved inputs (freed after the backward); it holds the
[N, k] expert ids of each routed layer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Self

import torch

from gspo_bench.moe.routers import Router, find_routers
from gspo_bench.moe.sites import Handle, OnRoute, attach

# recomputations under way (backward may run them on another thread than the forward: not thread-local)
_recomputing = 0


def recomputing() -> bool:
    """True while a checkpointed layer is being recomputed in backward (under `RouteKeeper`)."""
    return _recomputing > 0


class _Record:
    """The experts each router handed its experts in one checkpointed call: {layer: (ids, fixed weights)}."""

    def __init__(self) -> None:
        self.routes: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}


class _Hooks:
    """Attaches `on_route(layer, router)` at every router on entry (after any hook attached before,
    so it sees what those handed the experts) and removes them on exit, also on exceptions."""

    def __init__(self, routers: list[Router], on_route: Callable[[int, Router], OnRoute]):
        self.routers, self.on_route = routers, on_route
        self._handles: list[Handle] = []

    def __enter__(self) -> Self:
        for layer, router in enumerate(self.routers):
            self._handles.append(attach(router.site, router.module, router.block, self.on_route(layer, router),
                                        final=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in reversed(self._handles):
            handle.remove()
        self._handles.clear()


class _Forward(_Hooks):
    def __init__(self, routers: list[Router], record: _Record):
        super().__init__(routers, self._recorder)
        self.record = record

    def _recorder(self, layer: int, router: Router) -> OnRoute:
        def on_route(logits: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor,
                     replaced: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
            fixed = weights.detach() if replaced and not weights.requires_grad else None  # a full replay's
            self.record.routes[layer] = (ids.detach(), fixed)
            if replaced:  # a replay already built the gate weights from the logits, as the recompute will
                return None
            # the model's own choice, its gate weights rebuilt by the family's rule (the same values): the
            # recompute does the same, so forward and recompute save the same tensors for backward
            return router.rule.weights(logits, ids.long()).to(dtype=weights.dtype), ids

        return on_route


class _Recompute(_Hooks):
    def __init__(self, routers: list[Router], record: _Record):
        super().__init__(routers, self._replayer)
        self.record = record

    def __enter__(self) -> Self:
        global _recomputing
        _recomputing += 1
        try:
            return super().__enter__()
        except BaseException:
            _recomputing -= 1
            raise

    def __exit__(self, *exc: object) -> None:
        global _recomputing
        try:
            super().__exit__(*exc)
        finally:
            _recomputing -= 1

    def _replayer(self, layer: int, router: Router) -> OnRoute:
        def on_route(logits: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor,
                     replaced: bool) -> tuple[torch.Tensor, torch.Tensor]:
            if layer not in self.record.routes:
                raise RuntimeError(f"router {router.name} ran in a recompute but not in the forward it recomputes")
            kept, fixed = self.record.routes[layer]
            new_weights = fixed if fixed is not None else router.rule.weights(logits, kept.long())
            return new_weights.to(dtype=weights.dtype), kept.to(ids.dtype)

        return on_route


class RouteKeeper:
    """`context_fn` for `torch.utils.checkpoint.checkpoint`: the recompute routes as the forward did."""

    def __init__(self, model: torch.nn.Module):
        self.routers = find_routers(model)

    def __call__(self) -> tuple[_Forward, _Recompute]:
        record = _Record()  # one per checkpointed call, shared by its forward and its recompute
        return _Forward(self.routers, record), _Recompute(self.routers, record)
