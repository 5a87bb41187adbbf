"""Objective registry: every policy-optimisation objective is a pure function registered by name.

An objective takes `[B, T]` tensors and returns `(loss, metrics)`:

    loss, metrics = get_objective("gspo")(
        logp=logp, old_logp=old_logp, advantages=adv, mask=mask, clip_low=3e-4, clip_high=4e-4)

The default clip range of an objective is the default of its `clip_low` / `clip_high` keyword
arguments, so the function signature is the one place where the paper's values live.

An objective that needs more than pi_theta, pi_old and advantages declares it at registration
(`inputs=`, names from `EXTRA_INPUTS`) and takes it as an argument; the registration refuses a
declaration that disagrees with the signature, and the training loop passes what the spec declares:
`sampling_logp` (the rollout engine's mu, for objectives anchored at the behaviour policy),
`router_shift` (RSPO's per-token gate-score change) and `generator` (the draw of an objective that
samples, Clip-Cov; the loop makes one per seed and step, so runs repeat).

An objective states its reduction once, at registration (`reduction=`, one of REDUCTIONS); a loss
that takes a keyword-only `reduction` argument (every built-in one) is handed the declared one, which
its body passes to `reduce.aggregate`: the registered function is the body with that argument bound
(its signature lacks `reduction`, its `__wrapped__` is the body).

An objective whose loss couples rows through their log-probs (a statistic or a top-k selection
over the whole batch: M2PO's second-moment mask, KL-Cov's and Clip-Cov's covariance selections)
declares `coupled=True`: a micro-batched update (`train.micro_batch_tokens`) then first computes
every row's log-probs without gradient, so each micro-batch's loss sees the whole minibatch's true
values. The others are row-separable: a row's gradient depends on its own log-probs and on the
minibatch's mask-based counts alone.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from gspo_bench.registry import Registry, origin_of

Metrics = dict[str, torch.Tensor | float]
ObjectiveFn = Callable[..., tuple[torch.Tensor, Metrics]]
AdvantageLevel = Literal["response", "token"]

EXTRA_INPUTS: dict[str, str] = {
    "sampling_logp": "[B, T] log mu: the rollout engine's log-probs of the sampled tokens",
    "router_shift": "[B, T] mean |log g_new - log g_old| of the old top-k experts' gate scores over MoE layers",
    "generator": "torch.Generator (CPU) the objective draws from; the loop seeds one per (seed, step)",
}


# the conformance kit's properties (gspo_bench.objectives.conformance), by name: what `exempt=` may name
CONFORMANCE_PROPERTIES = ("finite", "padding", "order", "zero_advantage", "on_policy", "ascent", "separable",
                          "inputs_used", "metrics")
REDUCTIONS = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")  # gspo_bench.objectives.reduce


class UnknownObjectiveError(LookupError):
    """Raised for an objective name that is not registered; the message lists the valid names."""


@dataclass(frozen=True)
class ObjectiveSpec:
    name: str
    fn: ObjectiveFn
    description: str  # one line, shown by `gspo-bench ls`
    reference: str  # where the objective comes from
    advantages: AdvantageLevel  # "response": needs [B] advantages; "token": [B] or [B, T]
    clip_low: float | None  # default eps_low (None: the objective has no hard clip)
    clip_high: float | None  # default eps_high
    inputs: frozenset[str] = frozenset()  # EXTRA_INPUTS the objective declares (and takes)
    coupled: bool = False  # the loss couples rows through their log-probs (batch statistics, top-k selections)
    reduction: str = "seq_mean_token_mean"  # how its token terms become the loss (gspo_bench.objectives.reduce)
    exempt: tuple[tuple[str, str], ...] = ()  # (conformance property, why it does not apply)
    scales_lr: bool = False  # returns LR_SCALE, which the update applies to its optimizer step's learning rate

    def params(self) -> dict[str, object]:
        """The objective's keyword defaults beyond the clip range and the correction weights (what a
        suite entry's `kwargs` may set)."""
        return {name: p.default for name, p in inspect.signature(self.fn).parameters.items()
                if p.default is not inspect.Parameter.empty and name not in ("clip_low", "clip_high", "weights")}


# What an objective declaring `scales_lr` returns among its metrics: the factor (0-d, in (0, 1]) on the
# learning rate of the optimizer step that follows its loss (VCPO's effective-sample-size scaling)
LR_SCALE = "optim/lr_scale"

_REGISTRY: Registry[ObjectiveSpec] = Registry("objective", unknown=UnknownObjectiveError)


def register_objective(
    name: str, *, description: str, reference: str, advantages: AdvantageLevel = "token", inputs: tuple[str, ...] = (),
    coupled: bool = False, reduction: str = "seq_mean_token_mean", exempt: dict[str, str] | None = None,
    scales_lr: bool = False,
) -> Callable[[ObjectiveFn], ObjectiveFn]:
    """Decorator registering `fn` under `name` with its extra `inputs` (names from EXTRA_INPUTS) and
    whether its loss couples rows (`coupled`, see the module docstring), the reduction its token terms
    go through (`reduction`, one of REDUCTIONS: the conformance kit checks its on-policy gradient against
    it; a loss taking a keyword-only `reduction` argument is handed it) and the conformance properties
    that do not apply to it with why (`exempt`), and whether it scales its update's learning rate (`scales_lr`:
    it returns the 0-d factor under LR_SCALE, also with measurements off); a second registration of the same name, or a
    declaration that disagrees with `fn`'s arguments, is refused. Returns the registered function."""

    def decorate(body: ObjectiveFn) -> ObjectiveFn:
        origin = origin_of("objective", name, body)
        _check_declarations(name, reduction, exempt or {})
        fn = _with_reduction(name, body, reduction)
        params = inspect.signature(fn).parameters
        missing = {"logp", "old_logp", "advantages", "mask", "weights"} - set(params)
        if missing:
            raise TypeError(f"objective {name!r} lacks the arguments {sorted(missing)}")
        _check_inputs(name, set(inputs), set(params))

        def default(arg: str) -> float | None:
            p = params.get(arg)
            return None if p is None or p.default is inspect.Parameter.empty else p.default

        _REGISTRY.add(name, ObjectiveSpec(
            name=name,
            fn=fn,
            description=description,
            reference=reference,
            advantages=advantages,
            clip_low=default("clip_low"),
            clip_high=default("clip_high"),
            inputs=frozenset(inputs),
            coupled=coupled,
            reduction=reduction,
            exempt=tuple(sorted((exempt or {}).items())),
            scales_lr=scales_lr,
        ), origin)
        return fn

    return decorate


def _with_reduction(name: str, body: ObjectiveFn, reduction: str) -> ObjectiveFn:
    """`body` with its keyword-only `reduction` argument bound to the declared `reduction`, or `body`
    itself where it takes none (it then names its reduction in its own `aggregate` call, as a plugin may).
    A default on that argument would be a second statement of the reduction: refused."""
    signature = inspect.signature(body)
    taken = signature.parameters.get("reduction")
    if taken is None:
        return body
    if taken.kind is not inspect.Parameter.KEYWORD_ONLY or taken.default is not inspect.Parameter.empty:
        raise TypeError(f"objective {name!r}: its `reduction` argument must be keyword-only and without a default "
                        f"(the registration hands it the declared reduction, {reduction!r}): state it once, "
                        f"as register_objective(..., reduction=...)")

    @functools.wraps(body)
    def declared(*args: object, **kwargs: object) -> tuple[torch.Tensor, Metrics]:
        return body(*args, **kwargs, reduction=reduction)

    declared.__signature__ = signature.replace(  # type: ignore[attr-defined]  # read by inspect.signature
        parameters=[p for p in signature.parameters.values() if p.name != "reduction"])
    return declared


def _check_inputs(name: str, declared: set[str], params: set[str]) -> None:
    """The declared extra inputs are known and are exactly the EXTRA_INPUTS among the arguments."""
    unknown = declared - set(EXTRA_INPUTS)
    if unknown:
        raise TypeError(f"objective {name!r} declares unknown inputs {sorted(unknown)}; "
                        f"known: {', '.join(EXTRA_INPUTS)}")
    taken = set(EXTRA_INPUTS) & params
    if declared != taken:
        raise TypeError(f"objective {name!r} declares inputs {sorted(declared)} but its arguments take "
                        f"{sorted(taken)}: declare every extra input it takes, and only those")


def _check_declarations(name: str, reduction: str, exempt: dict[str, str]) -> None:
    """A known reduction; exemptions name known conformance properties, each with a reason."""
    if reduction not in REDUCTIONS:
        raise TypeError(f"objective {name!r} declares reduction {reduction!r}; known: {', '.join(REDUCTIONS)}")
    unknown = sorted(set(exempt) - set(CONFORMANCE_PROPERTIES))
    if unknown:
        raise TypeError(f"objective {name!r} exempts unknown properties {unknown}; known: "
                        f"{', '.join(CONFORMANCE_PROPERTIES)}")
    if not all(isinstance(why, str) and why.strip() for why in exempt.values()):
        raise TypeError(f"objective {name!r}: every exempted property needs its reason (a non-empty string)")


def objective_spec(name: str) -> ObjectiveSpec:
    """The registered spec of `name`, or an error naming every valid objective."""
    return _REGISTRY.lookup(name)


def get_objective(name: str) -> ObjectiveFn:
    """The objective function registered as `name`."""
    return objective_spec(name).fn


def list_objectives() -> list[str]:
    """Names of all registered objectives, sorted."""
    return _REGISTRY.names()
