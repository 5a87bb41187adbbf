"""Record and replay the experts each token is routed to, per MoE layer (the paper's Routing Replay).

    with RoutingCapture(model) as cap:                   # record
        model(input_ids=ids, attention_mask=am)
    routing = cap.routing                                # LongTensor [L, B, T, k] expert ids
    cap.gate_scores                                      # [L, B, T, k] the family's gate score of them
    with RoutingCapture(model, replay=routing) as cap2:  # replay
        out = model(input_ids=ids, attention_mask=am)
    cap2.routing                                         # what the model *would* have chosen
    with RoutingCapture(model, probe=routing) as cap3:   # read the live gate scores of other experts
        model(input_ids=ids, attention_mask=am)
    cap3.probe_scores                                    # [L, B, T, k] live scores at `routing`
    with RoutingCapture(model, margins=True) as cap4:    # how close each token is to a flip (margins.py)
        model(input_ids=ids, attention_mask=am)
    cap4.margin_pairs, cap4.pair_logits                  # [L, B, T, 2] experts (a, b), their logits
    with RoutingCapture(model, pairs=cap4.margin_pairs) as cap5:
        model(input_ids=ids, attention_mask=am)          # after an update
    cap5.pair_logits                                     # [L, B, T, 2] the live logits at (a, b)
    with RoutingCapture(model, confidence=True) as cap6:  # routing confidence (gates.py)
        model(input_ids=ids, attention_mask=am)
    cap6.route_confidence                                # [L, B, T] score mass on the chosen experts

L counts MoE layers only, in layer order (dense layers and shared experts are not routed).

How it works: a forward pre-hook on the model marks each call as a chunk of positions: a call with
an empty or absent KV cache starts a new sequence at position 0, a call with a cache of length n
continues the current one at position n (so `generate` records the prefill, then one position per
decode step; the last sampled token is never routed). At each MoE layer's routing site (`sites.py`:
a forward hook on the router, or a wrapper on the MoE block's selection method) the chosen expert
ids, their weights and gate scores are recorded and, when replaying, replaced:

- replay (default): the recorded experts, with the family's own gate weights rebuilt from the live
  router logits at those experts (`gates.py`, e.g. softmax then renormalise, top-k logits then
  softmax, unbiased sigmoid times the scaling factor), so the router still receives gradient, also
  through a recorded expert the live router would no longer choose;
- full replay (`replay_weights=`): the recorded experts and the recorded weights.

Gate scores (`gate_scores`, `probe_scores`) are the family's normalised selection probability
(softmax over all experts, or the sigmoid) gathered at the experts, detached fp32: never an [N, E]
tensor kept per layer. The routing confidence (`route_confidence`) is the share of the router's
score mass on the experts the router chose itself (under a replay too: what it would have chosen),
the family rule's `confidence`, one fp32 number per token and layer.

Hooks are removed when the context exits, also on exceptions. Contexts nest: an inner capture
records what the model chose, not what an outer replay forced. Activation checkpointing: under
`moe.recompute.RouteKeeper` (what `train.activation_checkpointing` installs) the recompute in
backward is the keeper's business: a capture neither records nor replays it, whether or not it is
still open then. Under a checkpoint without the keeper, a router running twice for the same chunk
is replayed again but recorded once.
"""

from __future__ import annotations

from typing import Any

import torch

from gspo_bench.moe.margins import router_margins
from gspo_bench.moe.recompute import recomputing
from gspo_bench.moe.routers import Router, find_routers
from gspo_bench.moe.sites import Handle, OnRoute, attach

_RECORDS = ("ids", "weights", "scores", "probe", "pairs", "pair_logits", "conf")


def call_chunk(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int, int]:
    """(batch, offset, length) of a model call's positions: a call with an empty or absent KV cache
    starts at position 0, one with a cache of length n continues at n."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    if ids is None:
        raise RuntimeError("routing hooks need input_ids or inputs_embeds in the model call")
    cache = kwargs.get("past_key_values")
    offset = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
    return ids.shape[0], offset, ids.shape[1]


class RoutingCapture:
    def __init__(
        self,
        model: torch.nn.Module,
        replay: torch.Tensor | None = None,
        replay_weights: torch.Tensor | None = None,
        probe: torch.Tensor | None = None,
        margins: bool = False,
        pairs: torch.Tensor | None = None,
        confidence: bool = False,
    ):
        self.model = model
        self.routers: list[Router] = find_routers(model)
        if replay_weights is not None and replay is None:
            raise ValueError("replay_weights (full replay) needs replay= expert ids as well")
        if margins and pairs is not None:
            raise ValueError("margins=True finds each token's (a, b) experts; pairs= reads given ones: pass one")
        for what, t in (("replay", replay), ("replay_weights", replay_weights), ("probe", probe), ("pairs", pairs)):
            if t is not None and (t.dim() != 4 or t.shape[0] != len(self.routers)):
                raise ValueError(
                    f"{what} must be [L, B, T, k] with L = {len(self.routers)} MoE layers, got {tuple(t.shape)}"
                )
        if replay is not None and replay_weights is not None and replay.shape != replay_weights.shape:
            raise ValueError(f"replay {tuple(replay.shape)} and replay_weights {tuple(replay_weights.shape)} differ")
        self.replay = replay
        self.replay_weights = replay_weights
        self.probe = probe
        self.margins = margins
        self.pairs = pairs
        self.confidence = confidence
        self._handles: list[Handle] = []
        self._sequences: list[dict[str, list[list[torch.Tensor]]]] = []  # per sequence: {record: [per layer: list of [B, t, k] chunks]}
        self._chunk: tuple[int, int, int] | None = None  # (batch, offset, length) of the current call
        self._seen: set[int] = set()  # layers recorded in the current chunk

    # ------------------------------------------------------------------ context
    def __enter__(self) -> RoutingCapture:
        if self._handles:
            raise RuntimeError("this RoutingCapture is already active; make a new one to nest")
        self._handles.append(self.model.register_forward_pre_hook(self._on_model_call, with_kwargs=True))
        for layer, router in enumerate(self.routers):
            self._handles.append(attach(router.site, router.module, router.block, self._on_route(layer, router)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in reversed(self._handles):  # reversed: method wrappers restore what they replaced
            handle.remove()
        self._handles.clear()
        self._chunk = None

    # ------------------------------------------------------------------ results
    @property
    def routing(self) -> torch.Tensor:
        """Expert ids [L, B, T, k] the model chose in the most recent sequence."""
        return self._stacked("ids")

    @property
    def weights(self) -> torch.Tensor:
        """Gate weights [L, B, T, k] the routers produced in the most recent sequence."""
        return self._stacked("weights")

    @property
    def gate_scores(self) -> torch.Tensor:
        """The family's gate score (fp32, detached) [L, B, T, k] of the experts in `routing`."""
        return self._stacked("scores")

    @property
    def probe_scores(self) -> torch.Tensor:
        """The live gate scores (fp32, detached) [L, B, T, k] of the experts in `probe=`."""
        if self.probe is None:
            raise RuntimeError("probe_scores needs RoutingCapture(..., probe=expert ids [L, B, T, k])")
        return self._stacked("probe")

    @property
    def margin_pairs(self) -> torch.Tensor:
        """[L, B, T, 2] each token's weakest chosen and strongest unchosen expert (`margins=True`)."""
        if not self.margins:
            raise RuntimeError("margin_pairs needs RoutingCapture(..., margins=True)")
        return self._stacked("pairs")

    @property
    def pair_logits(self) -> torch.Tensor:
        """[L, B, T, 2] fp32 router logits at `margin_pairs` (margins=True) or at `pairs=`."""
        if not self.margins and self.pairs is None:
            raise RuntimeError("pair_logits needs RoutingCapture(..., margins=True) or pairs=[L, B, T, 2] expert ids")
        return self._stacked("pair_logits")

    @property
    def route_confidence(self) -> torch.Tensor:
        """[L, B, T] fp32 routing confidence of each token (`confidence=True`): the share of the router's
        score mass on the experts it chose (`gates.py`, `confidence`)."""
        if not self.confidence:
            raise RuntimeError("route_confidence needs RoutingCapture(..., confidence=True)")
        return self._stacked("conf")

    @property
    def n_sequences(self) -> int:
        return len(self._sequences)

    def _stacked(self, key: str) -> torch.Tensor:
        if not self._sequences:
            raise RuntimeError("nothing was recorded: call the model inside the `with RoutingCapture(...)` block")
        per_layer = self._sequences[-1][key]
        if any(not chunks for chunks in per_layer):
            raise RuntimeError("some MoE layers were not called; was the forward interrupted?")
        return torch.stack([torch.cat(chunks, dim=1) for chunks in per_layer])  # [L, B, T, k] ([L, B, T]: conf)

    # ------------------------------------------------------------------ hooks
    def _on_model_call(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        batch, offset, length = call_chunk(args, kwargs)
        if offset == 0:
            self._sequences.append({key: [[] for _ in self.routers] for key in _RECORDS})
        self._chunk = (batch, offset, length)
        self._seen = set()

    def _on_route(self, layer: int, router: Router) -> OnRoute:
        def on_route(logits: torch.Tensor, weights: torch.Tensor,
                     ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
            if recomputing():  # the forward recorded this call; the route keeper replays it
                return None
            if self._chunk is None:
                raise RuntimeError(
                    f"router {router.name} ran outside a call of the captured model; call the model "
                    "given to RoutingCapture, not one of its submodules"
                )
            chunk = self._chunk
            if layer not in self._seen:  # a second call in the same chunk is a checkpoint recompute
                self._seen.add(layer)
                self._record(chunk, layer, router, logits.detach(), weights.detach(), ids.detach())
            if self.replay is None:
                return None
            return self._replayed(chunk, self.replay, layer, router, logits, weights, ids)

        return on_route

    def _record(self, chunk: tuple[int, int, int], layer: int, router: Router, logits: torch.Tensor,
                weights: torch.Tensor, ids: torch.Tensor) -> None:
        batch, _, length = chunk
        seq = self._sequences[-1]
        seq["ids"][layer].append(ids.reshape(batch, length, -1).long())
        seq["weights"][layer].append(weights.reshape(batch, length, -1))
        seq["scores"][layer].append(router.rule.scores(logits, ids.long()).reshape(batch, length, -1))
        if self.confidence:
            seq["conf"][layer].append(router.rule.confidence(logits, ids.long()).reshape(batch, length))
        if self.probe is not None:
            probed = self._window(chunk, self.probe, "probe", layer).to(logits.device)
            seq["probe"][layer].append(router.rule.scores(logits, probed).reshape(batch, length, -1))
        if self.margins or self.pairs is not None:
            at = (router_margins(logits, ids.long()) if self.pairs is None  # margins and pairs= exclude each other
                  else self._window(chunk, self.pairs, "pairs", layer).to(logits.device).long())
            seq["pairs"][layer].append(at.reshape(batch, length, 2))
            seq["pair_logits"][layer].append(logits.float().gather(-1, at).reshape(batch, length, 2))

    @staticmethod
    def _window(chunk: tuple[int, int, int], routing: torch.Tensor, what: str, layer: int) -> torch.Tensor:
        """The [N, k] slice of `routing` [L, B, T, k] for `layer` and the positions of `chunk`."""
        batch, offset, length = chunk
        if routing.shape[1] != batch or routing.shape[2] < offset + length:
            raise ValueError(
                f"{what} routing covers [B={routing.shape[1]}, T={routing.shape[2]}] but the model was called on "
                f"batch {batch}, positions {offset}..{offset + length - 1}"
            )
        return routing[layer, :, offset : offset + length].reshape(batch * length, -1)

    def _replayed(self, chunk: tuple[int, int, int], replay: torch.Tensor, layer: int, router: Router,
                  logits: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        replay_ids = self._window(chunk, replay, "replay", layer).to(logits.device)
        if self.replay_weights is not None:  # full replay: recorded ids and recorded weights
            new_weights = self._window(chunk, self.replay_weights, "replay", layer)
        else:  # the family's gate weights from the live logits at the replayed experts: the router keeps its gradient
            new_weights = router.rule.weights(logits, replay_ids.long())
        return new_weights.to(device=logits.device, dtype=weights.dtype), replay_ids.to(ids.dtype)
