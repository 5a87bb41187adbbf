"""Accumulating a step's measurements over every minibatch (not just the last one)."""

from __future__ import annotations

import math

import torch

# Metrics whose natural unit is the token or the response: weight minibatches accordingly.
_RESPONSE_WEIGHTED = ("ratio/seq_",)


def as_floats(values) -> list[float]:
    """Python floats of 0-d tensors and numbers, with one device->host copy for all the tensors."""
    values = list(values)
    tensors = [v.detach().float().reshape(()) for v in values if isinstance(v, torch.Tensor)]
    host = iter(torch.stack(tensors).tolist()) if tensors else iter(())
    return [next(host) if isinstance(v, torch.Tensor) else float(v) for v in values]


class StepMeasurements:
    """Weighted means over minibatches; extremes (`*_min`, `*_max`) combine as min / max, counts
    (`count/*`) add up."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.extremes: dict[str, float] = {}

    def add(self, metrics: dict, n_tokens: float, n_responses: float) -> None:
        for key, value in zip(metrics, as_floats(metrics.values()), strict=True):
            if key.startswith("count/"):
                self.extremes[key] = self.extremes.get(key, 0.0) + value
                continue
            if key.endswith("_min") or key.endswith("_max"):
                pick = min if key.endswith("_min") else max
                self.extremes[key] = value if key not in self.extremes else pick(self.extremes[key], value)
                continue
            weight = n_responses if key.startswith(_RESPONSE_WEIGHTED) else n_tokens
            self.sums[key] = self.sums.get(key, 0.0) + weight * value
            self.weights[key] = self.weights.get(key, 0.0) + weight

    def result(self) -> dict[str, float]:
        out = {k: (self.sums[k] / self.weights[k] if self.weights[k] > 0 else math.nan) for k in self.sums}
        return {**out, **self.extremes}


class MeanOf:
    """Plain mean of dicts of floats (e.g. drift over minibatches 2..K)."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.count = 0

    def add(self, values: dict[str, float]) -> None:
        self.count += 1
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value

    def result(self) -> dict[str, float]:
        return {k: v / self.count for k, v in self.sums.items()} if self.count else {}
