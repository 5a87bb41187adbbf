"""Router noise: a controlled training-inference mismatch in routing (`hf` engine, `router_noise: sigma`).

    rollout: {engine_options: {router_noise: 0.5}}

While the engine generates, and only then, every MoE layer selects its experts as

    ids = top-k(logits + sigma * z)       # logits [N, E] the router's, z standard normal [N, E]

and gives them the family's gate weights from the CLEAN logits at those ids (`gates.py`), written
back in the family's layout (`sites.py`). The perturbed choice is the model's own (not a replay),
so the routing the engine records (`RoutingCapture`, the static decoder's `RoutingRecorder`) is the
one it used: the training forward routes without noise, `moe/rollout_gap` measures the difference
and R3 (which replays the engine's routing) removes it.

z is counter-based, as the sampling noise is (`rollout.sampling`): a hash of (seed, row key, the
token's column minus the prompt width, MoE layer, expert), Gaussian by Box-Muller from two hashed
24-bit uniforms, on a stream apart from the Gumbel noise's. Left padding right-aligns each prompt, so
that position is batch-independent and a row's tokens stay a function of (seed, row key).

Only families whose selection is top-k over the router logits take it (softmax and top-k-softmax
routers, deepseek_v2 with greedy top-k); sigmoid routers with a correction bias and expert groups
(deepseek_v3, glm4_moe, dots1), ernie4_5_moe's biased selection, group-limited deepseek_v2 and
llama4_text (whose routing site re-derives the ids from the logits) are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gspo_bench.models.families import family_of
from gspo_bench.moe.capture import call_chunk
from gspo_bench.moe.routers import Router, find_routers
from gspo_bench.moe.sites import Handle, OnRoute, attach
from gspo_bench.rollout.sampling import fmix32, normal_from_hash

NOISE_FAMILIES = ("qwen3_moe", "qwen2_moe", "qwen3_next", "olmoe", "flex_olmo", "mixtral", "minimax",
                  "hunyuan_v1_moe", "gpt_oss", "granitemoe", "granitemoeshared", "dbrx", "jamba", "deepseek_v2")
_MASK32 = 0xFFFFFFFF
_STREAM = 0x52A7E001  # mixed into the seed: router noise never reuses the Gumbel sampling stream


MAX_SIGMA = 1e4  # a noise std past this decides every draw alone (logits and router scores are O(10))


def check_sigma(sigma: object, option: str = "router_noise") -> float:
    """`sigma` (engine option `option`, a noise's std) as a float; ValueError unless a number in
    [0, MAX_SIGMA]: past it the noise decides every choice whatever the model, and far past it (1e300)
    std x z is no float32, so the engine's log-probs are NaN, which the run would blame on the policy."""
    if isinstance(sigma, bool) or not isinstance(sigma, int | float) or not 0 <= sigma < float("inf"):
        raise ValueError(f"hf engine: {option} must be a finite number >= 0 (the noise's std), got {sigma!r}")
    if sigma > MAX_SIGMA:
        raise ValueError(f"hf engine: {option} must be at most {MAX_SIGMA:g} (the noise's std: past it the noise "
                         f"decides every draw whatever the model), got {sigma!r}")
    return float(sigma)


def router_gaussian(seed: int, keys: torch.Tensor, positions: torch.Tensor, layer: int, experts: int) -> torch.Tensor:
    """[B, t, E] fp32 standard normal numbers, a function of (seed, keys[b], positions[i], layer, e)
    only; `positions` [t] int64 (negative for prompt tokens) on the keys' device. Tensor ops only, no
    host-to-device copy (a CUDA-graph decode step runs it)."""
    base = fmix32(fmix32((seed ^ _STREAM) & _MASK32) ^ (layer & _MASK32))  # a Python int
    rows = fmix32((keys.to(torch.int64) & _MASK32) ^ base)  # [B]
    at = fmix32((positions.to(torch.int64) & _MASK32) ^ 0x27D4EB2F)  # [t]
    ids = fmix32(torch.arange(experts, dtype=torch.int64, device=keys.device) ^ 0x165667B1)  # [E]
    return normal_from_hash(fmix32(fmix32(rows[:, None] ^ at[None, :])[:, :, None] ^ ids[None, None, :]))  # [B, t, E]


def check_family(routers: list[Router], family: str) -> None:
    """ValueError unless every router selects by top-k over its logits."""
    grouped = family == "deepseek_v2" and any(r.module.topk_method != "greedy" for r in routers)
    if family not in NOISE_FAMILIES or grouped:
        what = "deepseek_v2 with group-limited top-k" if grouped else family
        raise ValueError(f"hf engine: router_noise perturbs top-k over the router logits; {what} selects otherwise "
                         f"(correction bias, expert groups or a site that re-derives the ids). Supported: "
                         f"{', '.join(NOISE_FAMILIES)} (deepseek_v2 with topk_method greedy)")


class RouterNoise:
    """Context: every MoE layer of `model` selects top-k(logits + sigma * z) as its own choice.

    `keys` [B] are the rows' keys, `prompt_width` the left-padded prompt width; `columns`, when given,
    returns the cache columns [t] the current call routes (the static decoder's `route_at`), else
    they are read from the model call: the KV cache length onwards, as `RoutingCapture` does. Attach
    it before any capture: hooks run in the order they were attached. Hooks go on exit, also on
    exceptions.
    """

    def __init__(self, model: torch.nn.Module, sigma: float, seed: int, keys: torch.Tensor, prompt_width: int,
                 columns: Callable[[], torch.Tensor] | None = None):
        self.model, self.sigma, self.seed = model, check_sigma(sigma), seed
        self.routers = find_routers(model)
        check_family(self.routers, family_of(model))
        self.keys = keys.to(next(model.parameters()).device)
        self.width, self.columns = prompt_width, columns
        self._call_columns: torch.Tensor | None = None
        self._handles: list[Handle] = []

    def __enter__(self) -> RouterNoise:
        if self.columns is None:
            self._handles.append(self.model.register_forward_pre_hook(self._on_model_call, with_kwargs=True))
        for layer, router in enumerate(self.routers):
            self._handles.append(attach(router.site, router.module, router.block, self._on_route(layer, router),
                                        own=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in reversed(self._handles):
            handle.remove()
        self._handles.clear()

    def _on_model_call(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _, offset, length = call_chunk(args, kwargs)
        self._call_columns = torch.arange(offset, offset + length, device=self.keys.device)

    def _on_route(self, layer: int, router: Router) -> OnRoute:
        def on_route(logits: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            columns = self.columns() if self.columns is not None else self._call_columns
            if columns is None:
                raise RuntimeError(f"router noise at {router.name}: the routers ran before any call of the model")
            z = router_gaussian(self.seed, self.keys, columns - self.width, layer, logits.shape[-1])  # [B, t, E]
            if z.shape[0] * z.shape[1] != logits.shape[0]:
                raise RuntimeError(f"router noise: {logits.shape[0]} routed tokens, noise for {z.shape[0]} rows x "
                                   f"{z.shape[1]} positions")
            noisy = logits.float() + self.sigma * z.reshape(logits.shape).to(logits.device)  # [N, E]
            chosen = torch.topk(noisy, ids.shape[-1], dim=-1).indices  # [N, k]
            return router.rule.weights(logits, chosen).to(weights.dtype), chosen.to(ids.dtype)

        return on_route
