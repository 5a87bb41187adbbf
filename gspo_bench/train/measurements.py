"""A step's measurements, accumulated over every minibatch (not just the last one) as device
tensors, and copied to the host once, when the step's row is built (`train.row.to_host`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gspo_bench.objectives.inputs import LOG_RATIO_CLAMP, ieee_sqrt

# Metrics whose natural unit is the response (weighted by responses); the rest are token-weighted.
_RESPONSE_WEIGHTED = ("ratio/seq_", "clip/seq_frac")
# Metrics combined over minibatches as a maximum (besides the `*_max` ones)
_MAXIMA = ("loss/max_token_share",)
# Metrics over the tokens with a nonzero advantage, weighted by their count in each minibatch
_SIGNAL_WEIGHTED, _SIGNAL_COUNT = "clip/grad_", "count/grad_tokens"


class StepMeasurements:
    """Weighted means over the minibatches whose update was applied (`kept`); extremes (`*_min`,
    `*_max`, `loss/max_token_share`) combine as min / max, counts (`count/*`) add up. Nothing leaves
    the device."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.weights: dict[str, torch.Tensor] = {}
        self.extremes: dict[str, torch.Tensor] = {}
        self.seen: dict[str, torch.Tensor] = {}  # minibatches kept, per extreme

    def add(self, metrics: dict[str, torch.Tensor | float], n_tokens: torch.Tensor, n_responses: torch.Tensor,
            kept: torch.Tensor) -> None:
        for key, value in metrics.items():
            value = torch.as_tensor(value, dtype=torch.float64, device=kept.device)
            if key.startswith("count/"):
                self.extremes[key] = self.extremes.get(key, 0.0) + torch.where(kept, value, 0.0)
            elif key.endswith("_min") or key.endswith("_max") or key in _MAXIMA:
                self._extreme(key, value, kept)
            else:
                weight = torch.where(kept, self._weight(key, metrics, n_tokens, n_responses), 0.0)
                self.sums[key] = self.sums.get(key, 0.0) + torch.where(kept, weight * value, 0.0)
                self.weights[key] = self.weights.get(key, 0.0) + weight

    @staticmethod
    def _weight(key: str, metrics: dict[str, torch.Tensor | float], n_tokens: torch.Tensor,
                n_responses: torch.Tensor) -> torch.Tensor:
        if key.startswith(_SIGNAL_WEIGHTED):
            return torch.as_tensor(metrics[_SIGNAL_COUNT], dtype=torch.float64, device=n_tokens.device)
        return n_responses if key.startswith(_RESPONSE_WEIGHTED) else n_tokens

    def _extreme(self, key: str, value: torch.Tensor, kept: torch.Tensor) -> None:
        largest = key.endswith("_max") or key in _MAXIMA
        value = torch.where(kept, value, float("-inf") if largest else float("inf"))
        if key in self.extremes:
            value = torch.maximum(self.extremes[key], value) if largest else torch.minimum(self.extremes[key], value)
        self.extremes[key] = value
        self.seen[key] = self.seen.get(key, False) | kept

    def result(self) -> dict[str, torch.Tensor]:
        """Weighted means (NaN where no minibatch was kept), extremes and counts, as 0-d tensors."""
        out = {k: self.sums[k] / self.weights[k] for k in self.sums}  # 0 / 0 = NaN
        for key, value in self.extremes.items():
            out[key] = torch.where(self.seen[key], value, float("nan")) if key in self.seen else value
        return out


class MeanOf:
    """Plain mean of dicts of tensors (e.g. drift over minibatches 2..K); {} when nothing was added."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def add(self, values: dict[str, torch.Tensor]) -> None:
        self.count += 1
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value

    def result(self) -> dict[str, torch.Tensor]:
        return {k: v / self.count for k, v in self.sums.items()} if self.count else {}


class TokenRatios:
    """Every measured token ratio w = pi_theta / pi_old of the step (valid tokens of the minibatches
    whose update was applied), kept on the device, and the statistics a heavy tail does not move:
    `ratio/token_median` (the mean of the two middle values for an even count), `ratio/token_trimmed_mean`
    (the mean after cutting floor(n / 10) values at each end, scipy.stats.trim_mean's rule at 0.1) and
    `ratio/token_gt_{10,100,1000}` (how many ratios exceed each). NaN statistics (and 0 counts) where
    no token was measured."""

    THRESHOLDS = (10, 100, 1000)

    def __init__(self) -> None:
        self.parts: list[torch.Tensor] = []

    def add(self, log_ratio: torch.Tensor, valid: torch.Tensor, kept: torch.Tensor) -> None:
        """`log_ratio`, `valid`: [b, T] of one minibatch's response tokens; `kept`: 0-d bool, its update applied."""
        w = torch.exp(log_ratio.detach().double().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        self.parts.append(torch.where(valid.bool() & kept, w, float("nan")).flatten())

    def result(self) -> dict[str, torch.Tensor]:
        if not self.parts:
            return {}
        w = torch.sort(torch.cat(self.parts)).values  # the measured ratios ascending, NaN (not measured) last
        n = (~torch.isnan(w)).sum()  # 0-d: counts stay on the device
        w = torch.cat([w, w.new_full((1,), float("nan"))])  # a NaN to read where nothing was measured
        middle = torch.index_select(w, 0, torch.stack([((n - 1) // 2).clamp(min=0), n // 2]))  # [2]
        cut = n // 10
        position = torch.arange(w.numel(), device=w.device)
        inside = (position >= cut) & (position < n - cut)
        out = {"ratio/token_median": middle.mean(),  # NaN when n = 0
               "ratio/token_trimmed_mean": torch.where(inside, w, 0.0).sum() / (n - 2 * cut)}  # 0 / 0 when n = 0
        for threshold in self.THRESHOLDS:
            out[f"ratio/token_gt_{threshold}"] = (w > threshold).sum().double()
        return out


class RatioByRouting:
    """Token importance ratios of minibatches 2..K split by whether the token was rerouted (its
    predicting position routed to another expert set in any layer than under the old policy):
    pooled variances over the step, and the rerouted share, without leaving the device."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}

    def add(self, log_ratio: torch.Tensor, valid: torch.Tensor, rerouted: torch.Tensor) -> None:
        """`log_ratio`, `valid`, `rerouted`: [b, T] of one minibatch's response tokens."""
        w = torch.exp(log_ratio.detach().double().clamp(-20, 20))
        for name, part in (("rerouted", valid & rerouted), ("stable", valid & ~rerouted)):
            for power in (0, 1, 2):
                key = f"{name}{power}"
                self.sums[key] = self.sums.get(key, 0.0) + torch.where(part, w**power, 0.0).sum()

    def result(self) -> dict[str, torch.Tensor]:
        if not self.sums:
            return {}
        out = {}
        for name in ("rerouted", "stable"):
            n, s1, s2 = (self.sums[f"{name}{p}"] for p in (0, 1, 2))
            mean = s1 / n  # NaN where no token of this kind
            out[f"ratio/token_var_{name}"] = (s2 / n - mean**2).clamp(min=0.0)
        out["moe/rerouted_token_frac"] = self.sums["rerouted0"] / (self.sums["rerouted0"] + self.sums["stable0"])
        return out


class GradientCosines:
    """The cosine between the gradients of consecutive updates within a step (`grad/cos_prev`: the whole
    model's; `grad/cos_prev_router`: the routers' parameters alone), the mean over the step's pairs of
    consecutive updates both applied (K - 1 of them; a skipped, non-finite update breaks the chain; NaN with
    one update, or where a gradient is zero: frozen routers). A persistently high cosine means successive
    updates push the same way (an early warning of collapse in the gradient-alignment literature). Gradients
    are read after each update's backward (clipping scales them: the cosine is unchanged), this rank's shards
    summed over ranks; one copy of the gradient kept between updates, nothing copied to the host."""

    def __init__(self, params: Callable[[], list[torch.nn.Parameter]], routers: Callable[[], list[torch.nn.Parameter]],
                 distributed: bool = False):
        # looked up at each update: under FSDP2 the modules' parameter objects change between forwards
        self.groups = {"grad/cos_prev": params, "grad/cos_prev_router": routers}
        self.distributed = distributed
        self.previous: dict[str, torch.Tensor] = {}
        self.previous_applied = torch.tensor(False)
        self.sums: dict[str, torch.Tensor] = {}
        self.count = torch.tensor(0.0, dtype=torch.float64)

    @staticmethod
    def flat(params: list[torch.nn.Parameter]) -> torch.Tensor:
        """This rank's gradient of `params` as one fp32 vector (zeros where a parameter has none)."""
        pieces = []
        for p in params:
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            g = g.to_local() if hasattr(g, "to_local") else g
            pieces.append(g.detach().float().reshape(-1))
        return torch.cat(pieces) if pieces else torch.zeros(0)

    def cosine(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        sums = torch.stack([torch.dot(a, b), torch.dot(a, a), torch.dot(b, b)]).double()
        if self.distributed:
            torch.distributed.all_reduce(sums)
        norms = ieee_sqrt(sums[1] * sums[2])  # exact on every CPU (not MKL's vector math)
        return torch.where(norms > 0, sums[0] / norms.clamp(min=torch.finfo(torch.float64).tiny), float("nan"))

    def add(self, applied: torch.Tensor) -> None:
        """After an update's backward: its gradient against the previous update's, where both were applied."""
        both = applied & self.previous_applied.to(applied.device)
        self.count = self.count.to(applied.device) + both.double()
        for key, params in self.groups.items():
            grad = self.flat(params())
            if key in self.previous:
                cos = torch.where(both, self.cosine(self.previous[key], grad), 0.0)
                self.sums[key] = self.sums.get(key, torch.zeros((), dtype=torch.float64, device=grad.device)) + cos
            self.previous[key] = grad
        self.previous_applied = applied

    def result(self) -> dict[str, torch.Tensor]:
        """The mean cosine per group over the step's pairs of applied updates; NaN where there were none."""
        return {key: self.sums.get(key, torch.zeros((), dtype=torch.float64)) / self.count for key in self.groups}
