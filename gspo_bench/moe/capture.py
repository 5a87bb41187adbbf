"""Record and replay the experts each token is routed to, per MoE layer (the paper's Routing Replay).

    with RoutingCapture(model) as cap:                   # record
        model(input_ids=ids, attention_mask=am)
    routing = cap.routing                                # LongTensor [L, B, T, k] expert ids
    with RoutingCapture(model, replay=routing) as cap2:  # replay
        out = model(input_ids=ids, attention_mask=am)
    cap2.routing                                         # what the model *would* have chosen

How it works: a forward pre-hook on the model marks each call as a chunk of positions: a call with
an empty or absent KV cache starts a new sequence at position 0, a call with a cache of length n
continues the current one at position n (so `generate` records the prefill, then one position per
decode step; the last sampled token is never routed). A forward hook on every router records the
chosen expert ids (and weights) of the chunk and, when replaying, returns a replacement output:

- replay (default): the recorded experts, with gate weights recomputed from the live router logits
  (softmax over all experts, gathered at the replayed ids, renormalised where the family does), so
  the router still receives gradient;
- full replay (`replay_weights=`): the recorded experts and the recorded weights.

Hooks are removed when the context exits, also on exceptions. Contexts nest: an inner capture
records what the model chose, not what an outer replay forced. A router running twice for the same
chunk (activation-checkpoint recomputation in backward) is replayed again but recorded once.
"""

from __future__ import annotations

import torch

from gspo_bench.moe.routers import Router, find_routers


class _ReplayedOutput(tuple):
    """A router output replaced by a replay; `.chosen` keeps the ids the router itself chose."""

    chosen: torch.Tensor


class RoutingCapture:
    def __init__(
        self,
        model: torch.nn.Module,
        replay: torch.Tensor | None = None,
        replay_weights: torch.Tensor | None = None,
    ):
        self.model = model
        self.routers: list[Router] = find_routers(model)
        if replay_weights is not None and replay is None:
            raise ValueError("replay_weights (full replay) needs replay= expert ids as well")
        for what, t in (("replay", replay), ("replay_weights", replay_weights)):
            if t is not None and (t.dim() != 4 or t.shape[0] != len(self.routers)):
                raise ValueError(
                    f"{what} must be [L, B, T, k] with L = {len(self.routers)} MoE layers, got {tuple(t.shape)}"
                )
        if replay is not None and replay_weights is not None and replay.shape != replay_weights.shape:
            raise ValueError(f"replay {tuple(replay.shape)} and replay_weights {tuple(replay_weights.shape)} differ")
        self.replay = replay
        self.replay_weights = replay_weights
        self._handles: list = []
        self._sequences: list[dict] = []  # per sequence: {"ids": [per layer: list of [B, t, k]], ...}
        self._chunk: tuple[int, int, int] | None = None  # (batch, offset, length) of the current call
        self._seen: set[int] = set()  # layers recorded in the current chunk

    # ------------------------------------------------------------------ context
    def __enter__(self) -> RoutingCapture:
        if self._handles:
            raise RuntimeError("this RoutingCapture is already active; make a new one to nest")
        self._handles.append(self.model.register_forward_pre_hook(self._on_model_call, with_kwargs=True))
        for layer, router in enumerate(self.routers):
            self._handles.append(router.module.register_forward_hook(self._router_hook(layer, router)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
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
    def n_sequences(self) -> int:
        return len(self._sequences)

    def _stacked(self, key: str) -> torch.Tensor:
        if not self._sequences:
            raise RuntimeError("nothing was recorded: call the model inside the `with RoutingCapture(...)` block")
        per_layer = self._sequences[-1][key]
        if any(not chunks for chunks in per_layer):
            raise RuntimeError("some MoE layers were not called; was the forward interrupted?")
        return torch.stack([torch.cat(chunks, dim=1) for chunks in per_layer])  # [L, B, T, k]

    # ------------------------------------------------------------------ hooks
    def _on_model_call(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        if ids is None:
            raise RuntimeError("RoutingCapture needs input_ids or inputs_embeds in the model call")
        batch, length = ids.shape[0], ids.shape[1]
        cache = kwargs.get("past_key_values")
        offset = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
        if offset == 0:
            n = len(self.routers)
            self._sequences.append({"ids": [[] for _ in range(n)], "weights": [[] for _ in range(n)]})
        self._chunk = (batch, offset, length)
        self._seen = set()

    def _router_hook(self, layer: int, router: Router):
        def hook(module, args, output):
            if self._chunk is None:
                raise RuntimeError(
                    f"router {router.name} ran outside a call of the captured model; call the model "
                    "given to RoutingCapture, not one of its submodules"
                )
            batch, offset, length = self._chunk
            logits, weights, indices = output
            chosen = output.chosen if isinstance(output, _ReplayedOutput) else indices  # [N, k]
            if layer not in self._seen:  # a second call in the same chunk is a checkpoint recompute
                self._seen.add(layer)
                seq = self._sequences[-1]
                seq["ids"][layer].append(chosen.detach().reshape(batch, length, -1).long())
                seq["weights"][layer].append(weights.detach().reshape(batch, length, -1))
            if self.replay is None:
                return None
            return self._replayed(layer, router, logits, weights, chosen, batch, offset, length)

        return hook

    def _replayed(self, layer, router, logits, weights, chosen, batch, offset, length):
        replay = self.replay
        if replay.shape[1] != batch or replay.shape[2] < offset + length:
            raise ValueError(
                f"replay routing covers [B={replay.shape[1]}, T={replay.shape[2]}] but the model was called on "
                f"batch {batch}, positions {offset}..{offset + length - 1}"
            )
        ids = replay[layer, :, offset : offset + length].reshape(batch * length, -1).to(logits.device)  # [N, k]
        if self.replay_weights is not None:  # full replay: recorded ids and recorded weights
            new_weights = self.replay_weights[layer, :, offset : offset + length].reshape(batch * length, -1)
            new_weights = new_weights.to(device=logits.device, dtype=weights.dtype)
        else:  # gate weights from the live logits over the replayed experts: the router keeps its gradient
            probs = torch.softmax(logits.float(), dim=-1)  # [N, E]
            new_weights = probs.gather(-1, ids)  # [N, k]
            if router.renormalises:
                new_weights = new_weights / new_weights.sum(-1, keepdim=True)
            new_weights = new_weights.to(weights.dtype)
        out = _ReplayedOutput((logits, new_weights, ids.to(chosen.dtype)))
        out.chosen = chosen
        return out
