"""Where a family's routing decision can be read and replaced: the call that returns it, and its layout.

Most families return `(logits, weights, ids)` from a router module, read by a forward hook. Some
return them in another order or form (Granite: ids first; Llama 4: dense [N, E] scores), and some
select in a method of the MoE block (DBRX, Jamba: `route_tokens_to_experts`), which is wrapped by a
temporary instance attribute for the life of the capture.

`attach(router, on_route)` calls `on_route(logits [N, E], weights [N, k], ids [N, k])` with the
routing the model itself chose (also under an outer replay; with `final=True`: the routing the
experts receive, a replay attached before it included) and, when it returns `(weights, ids)`,
hands those to the experts instead: as a replay (marked, so a capture attached after it still
reports the model's own choice), or with `own=True` as the model's own choice (router noise: a
capture attached after it records the replacement).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

# (logits, weights, ids) -> a replacement (weights, ids) or None; with `final=True` a fourth argument
# (whether a replay replaced the routing) follows
OnRoute = Callable[..., "tuple[torch.Tensor, torch.Tensor] | None"]


class Handle(Protocol):
    """What `attach` returns: a forward hook's handle, or the handle of a wrapped method."""

    def remove(self) -> None: ...


class _Replaced(tuple[torch.Tensor, ...]):
    """A routing output replaced by a replay; `own` keeps the (weights, ids) the model itself chose,
    `used` the (weights, ids) the experts receive."""

    own: tuple[torch.Tensor, torch.Tensor]
    used: tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Site:
    # None: a forward hook on the router module; a name: that method of the MoE block, wrapped
    method: str | None
    # (hooked module, call args, output) -> (logits [N, E], weights [N, k], ids [N, k])
    read: Callable[[torch.nn.Module, tuple[Any, ...], Any], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    # (logits, weights, ids) -> an output in the family's layout
    write: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]


def _llama4_read(  # module: Llama 4's router, whose top_k is a plain attribute nn.Module's typing lacks
    module: Any, args: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dense_scores, logits = output  # sigmoid of the top-k logits, 0 elsewhere
    ids = torch.topk(logits, module.top_k, dim=1).indices  # the router's own top-k, recomputed
    return logits, dense_scores.gather(1, ids), ids


def _llama4_write(logits: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros_like(logits).scatter(1, ids, weights.to(logits.dtype)), logits


ROUTER_OUTPUT = Site(None, lambda m, a, out: (out[0], out[1], out[2]), lambda lg, w, i: (lg, w, i))
ROUTER_OUTPUT_IDS_FIRST = Site(None, lambda m, a, out: (out[2], out[1], out[0]), lambda lg, w, i: (i, w, lg))
ROUTER_DENSE_SCORES = Site(None, _llama4_read, _llama4_write)
# route_tokens_to_experts(router_logits) -> (weights, ids)
BLOCK_METHOD_WEIGHTS_IDS = Site("route_tokens_to_experts", lambda m, a, out: (a[0], out[0], out[1]), lambda lg, w, i: (w, i))
# route_tokens_to_experts(hidden_states, router_logits) -> (ids, weights)
BLOCK_METHOD_IDS_WEIGHTS = Site("route_tokens_to_experts", lambda m, a, out: (a[1], out[1], out[0]), lambda lg, w, i: (i, w))


class _MethodHandle:
    """Removes a wrapper installed as an instance attribute, restoring what was there (LIFO, as `with` nests)."""

    def __init__(self, owner: torch.nn.Module, name: str):
        self.owner, self.name = owner, name
        self.previous = owner.__dict__.get(name)  # an outer capture's wrapper, or None

    def remove(self) -> None:
        if self.previous is None:
            self.owner.__dict__.pop(self.name, None)
        else:
            self.owner.__dict__[self.name] = self.previous


def attach(site: Site, router_module: torch.nn.Module, block: torch.nn.Module, on_route: OnRoute, own: bool = False,
           final: bool = False) -> Handle:
    """Install `on_route` at `site`; returns a handle whose `remove()` undoes it. With `own`, a
    replacement is the model's own choice (written unmarked); it refuses to run under a replay.
    With `final`, `on_route` sees what the experts receive (an earlier replay's experts), not the
    model's own choice, and gets a fourth argument: whether a replay replaced the routing.

    The read runs without autograd: the logits are the router's own tensor (a replay's gate
    weights take their gradient from them), the weights read are for their dtype and values."""

    def routed(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> tuple[torch.Tensor, ...] | None:
        with torch.no_grad():  # a read that computes (Llama 4's top-k) must leave nothing to autograd
            logits, weights, ids = site.read(module, args, output)
        replaced = isinstance(output, _Replaced)
        if replaced:  # an outer replay replaced it: the model's own choice, or the replay's
            weights, ids = output.used if final else output.own
        if own and replaced:
            raise RuntimeError("an own-choice routing (router noise) under a replay attached before it would override the replay")
        replacement = on_route(logits, weights, ids, replaced) if final else on_route(logits, weights, ids)
        if replacement is None:
            return None
        if own:
            return site.write(logits, *replacement)
        written = _Replaced(site.write(logits, *replacement))
        written.own = output.own if replaced else (weights, ids)
        used_weights, used_ids = replacement
        written.used = (used_weights, used_ids)
        return written

    if site.method is None:
        return router_module.register_forward_hook(routed)
    handle = _MethodHandle(block, site.method)
    inner = getattr(block, site.method)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        output = inner(*args, **kwargs)
        replaced = routed(block, args, output)
        return output if replaced is None else replaced

    block.__dict__[site.method] = wrapped
    return handle
