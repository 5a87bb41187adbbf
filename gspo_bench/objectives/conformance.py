"""The conformance kit: properties every registered objective must have, measured on small random and
hand-made batches before it trains (`gspo-bench check NAME`).

Each property gives one `Finding`: the measured number, the bound it must meet, passed or not. An
objective exempts itself from a property at registration (`exempt={"order": "why"}`), and the kit
reports the reason instead of a pass. The properties:

- `finite`: loss, gradient and metrics finite at token ratios from 1e-4 to 1e4 and with an all-masked row;
- `padding`: what padding positions hold (NaN, inf, 123, extra rows and columns) changes nothing;
- `order`: shuffling the responses shuffles the gradient and changes neither loss nor metrics;
- `zero_advantage`: all advantages zero give a zero gradient;
- `on_policy`: at ratio 1 the gradient is the plain policy gradient -d/dlogp reduce(A logp) of the
  objective's declared `reduction` (a sum where a mean is declared, or a flipped sign, fails here);
- `ascent`: a small descent step on the loss raises the log-probs of positively-advantaged tokens;
- `separable`: a row's gradient does not depend on the other rows' log-probs, so micro-batching is
  exact; a `coupled` objective (batch statistics) is exempt by its declaration, an undeclared one fails;
- `inputs_used`: each declared extra input changes the loss or its gradient;
- `metrics`: the measurements every objective returns are present, scalars, finite and in range.

Before any property, every call checks the objective's contract: it returns the pair (loss, metrics),
the loss a 0-d floating tensor through which the gradient flows to `logp`, the metrics a dict of names
to numbers (or one-element tensors), and it leaves its inputs as it got them. A break of it, an
exception the objective raises, or a property that runs past its time limit (`CHECK_SECONDS`; a loss
that loops or waits) is a `ContractError` of one line naming the objective, the check and what it
returned or did.

Pure tensors, no printing: the command line prints the findings.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gspo_bench.objectives.registry import CONFORMANCE_PROPERTIES, LR_SCALE, ObjectiveSpec, objective_spec
from gspo_bench.runtime.time_limit import TimeLimitExceeded, time_limit

TOLERANCE = 1e-5  # relative: max |difference| / (1 + max |reference|)
REQUIRED_METRICS = ("clip/frac", "clip/frac_low", "clip/frac_high", "ratio/token_mean", "ratio/token_var",
                    "ratio/token_min", "ratio/token_max", "ratio/seq_mean", "ratio/seq_var", "logratio/token_var",
                    "kl/old_new")
CHECK_SECONDS = 60.0  # default time limit of one property (the built-in objectives take milliseconds)


class ContractError(ValueError):
    """The objective broke its contract on the kit's batch (what it returned, its inputs changed), raised,
    or ran past the time limit; one line naming the objective, the check and what happened."""


@dataclass(frozen=True)
class Finding:
    property: str
    passed: bool | None  # None: the objective declared that the property does not apply
    measured: float
    bound: str  # what the measurement must meet
    note: str = ""  # the declared reason, or what was measured

    def line(self) -> str:
        """The finding as `gspo-bench check` prints it: property, verdict, measured number, bound, note."""
        verdict = "n/a" if self.passed is None else "pass" if self.passed else "FAIL"
        number = "-" if self.passed is None else f"{self.measured:.3g}"
        return f"{self.property:<15} {verdict:<5} {number:>10}  {self.bound:<24} {self.note}"


@dataclass(frozen=True)
class Batch:
    logp: torch.Tensor  # [B, T]
    old_logp: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B]
    mask: torch.Tensor  # [B, T] bool


def random_batch(seed: int, b: int = 6, t: int = 7, scale: float = 0.1) -> Batch:
    """Responses of lengths 1..t (a shuffled spread), advantages of both signs, log-ratios ~ N(0, scale)."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64).float() * 3 - 0.05
    lengths = torch.randperm(t, generator=g)[:b] % t + 1
    mask = torch.arange(t)[None, :] < lengths[:, None]
    adv = torch.randn(b, generator=g)
    adv[0], adv[1] = abs(float(adv[0])) + 0.5, -abs(float(adv[1])) - 0.5
    return Batch(old + scale * torch.randn(b, t, generator=g), old, adv, mask)


def call(spec: ObjectiveSpec, batch: Batch, logp: torch.Tensor | None = None, **extra: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """The objective on `batch` (with `logp` in place of its own), its declared inputs at neutral values
    unless given: mu = pi_old, no router shift, a generator seeded 0. ContractError where it raises,
    returns anything but (loss, metrics) as the module docstring says, or changes an input in place."""
    neutral = {"sampling_logp": batch.old_logp, "router_shift": torch.zeros(batch.logp.shape),
               "generator": torch.Generator().manual_seed(0)}
    kw = {k: v for k, v in neutral.items() if k in spec.inputs} | extra
    logp = batch.logp if logp is None else logp
    inputs: dict[str, Any] = {"logp": logp, "old_logp": batch.old_logp, "advantages": batch.advantages,
                              "mask": batch.mask} | kw
    before = {k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    try:
        result = spec.fn(**inputs)
    except (ContractError, TimeLimitExceeded):
        raise
    except Exception as err:
        what = str(err).splitlines()[0] if str(err) else ""
        raise ContractError(f"raised {type(err).__name__}: {what}") from err
    changed = [k for k, v in before.items() if not same(inputs[k].detach(), v)]
    if changed:
        raise ContractError(f"changed its input {changed[0]!r} in place; an objective leaves its inputs as it got "
                            f"them (the training loop reads them again): work on a copy ({changed[0]} = "
                            f"{changed[0]}.clone())")
    return check_result(result, needs_grad=logp.requires_grad)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values, NaN equal to NaN."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all()
                                                               if a.is_floating_point() else torch.equal(a, b))


def shown(value: Any) -> str:
    """A returned value in a few words: a tensor by its shape and dtype, a tuple by its length."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)} ({str(value.dtype).removeprefix('torch.')})"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return f"{text[:60] + '...' if len(text) > 60 else text} ({type(value).__name__})"


def check_result(result: Any, needs_grad: bool) -> tuple[torch.Tensor, dict[str, Any]]:
    """`result` as (loss, metrics), or ContractError saying which part of the contract it breaks."""
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise ContractError(f"returned {shown(result)}; an objective returns the pair (loss, metrics)")
    loss, metrics = result
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.is_floating_point():
        raise ContractError(f"returned as its loss {shown(loss)}; the loss is a 0-d floating tensor (the token "
                            "terms reduced to one number: gspo_bench.objectives.reduce)")
    if needs_grad and not loss.requires_grad:
        raise ContractError("returned a loss that does not depend on logp (detached, or computed from .item() or "
                            "numpy values): no gradient flows; compute the loss from logp with torch operations")
    if not isinstance(metrics, dict):
        raise ContractError(f"returned as its metrics {shown(metrics)}; the metrics are a dict of names to numbers")
    for key, value in metrics.items():
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        scalar = isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool and not (
            value.is_complex())
        if not isinstance(key, str) or not (number or scalar):
            raise ContractError(f"returned the metric {key!r} as {shown(value)}; a metric is a number or a "
                                "one-element tensor, under a string name")
    return loss, metrics


def loss_grad(spec: ObjectiveSpec, batch: Batch, **extra: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """(loss, d loss / d logp [B, T], metrics as floats)."""
    logp = batch.logp.clone().requires_grad_(True)
    loss, metrics = call(spec, batch, logp, **extra)
    (grad,) = torch.autograd.grad(loss, logp, allow_unused=True)
    grad = torch.zeros_like(logp) if grad is None else grad
    return loss.detach().float(), grad.float(), {k: float(v) for k, v in metrics.items()}


def relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / (1 + max |b|); inf where either holds a non-finite value."""
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        return math.inf
    return float((a - b).abs().max()) / (1.0 + float(b.abs().max())) if a.numel() else 0.0


def metrics_gap(m1: dict[str, float], m2: dict[str, float]) -> float:
    keys = sorted(set(m1) & set(m2))
    return relative_gap(torch.tensor([m2[k] for k in keys]), torch.tensor([m1[k] for k in keys])) if keys else 0.0


def within(measured: float) -> bool:
    return measured <= TOLERANCE


# ---------------------------------------------------------------- the properties


def finite(spec: ObjectiveSpec, seed: int) -> Finding:
    """Non-finite values in loss, gradient and metrics at log-ratios of +-ln(1e4) and with one all-masked row."""
    batch = random_batch(seed)
    g = torch.Generator().manual_seed(seed + 1)
    extreme = math.log(1e4) * torch.sign(torch.randn(batch.logp.shape, generator=g))
    mask = batch.mask.clone()
    mask[-1] = False
    bad = 0
    for logp, m in ((batch.old_logp + extreme, batch.mask), (batch.old_logp - extreme, batch.mask), (batch.logp, mask)):
        loss, grad, metrics = loss_grad(spec, Batch(logp, batch.old_logp, batch.advantages, m))
        bad += int(not torch.isfinite(loss)) + int((~torch.isfinite(grad)).sum()) + sum(
            not math.isfinite(v) for v in metrics.values())
    return Finding("finite", bad == 0, bad, "== 0 non-finite values", "ratios 1e-4 .. 1e4, an all-masked row")


def padding(spec: ObjectiveSpec, seed: int) -> Finding:
    """Largest relative change of loss, gradient (and zero gradient at padding) and metrics when the
    padding positions, an extra padded row and column, hold NaN, inf or 123."""
    batch = random_batch(seed)
    loss, grad, metrics = loss_grad(spec, batch)
    b, t = batch.mask.shape
    worst = 0.0
    for junk in (float("nan"), float("inf"), 123.0):
        mask = torch.zeros(b + 1, t + 2, dtype=torch.bool)
        mask[:b, :t] = batch.mask
        pad = functools.partial(padded, mask=batch.mask, junk=junk)
        adv = torch.cat([batch.advantages, torch.tensor([junk])])  # the padded row's advantage is junk too
        old_logp = padded(batch.old_logp, batch.mask, -junk)  # -inf where pi holds +inf
        loss2, grad2, metrics2 = loss_grad(spec, Batch(pad(batch.logp), old_logp, adv, mask),
                                           **_padded_inputs(spec, batch, pad))
        leak = grad2.clone()
        leak[:b, :t] = torch.where(batch.mask, grad2[:b, :t] - grad, grad2[:b, :t])
        worst = max(worst, relative_gap(loss2, loss), relative_gap(leak, torch.zeros_like(leak)),
                    metrics_gap(metrics, metrics2))
    return Finding("padding", within(worst), worst, f"<= {TOLERANCE:g}", "padding holds NaN, inf, 123")


def padded(x: torch.Tensor, mask: torch.Tensor, junk: float) -> torch.Tensor:
    """[B, T] `x` in a [B + 1, T + 2] tensor whose padding (mask off, the extra row and columns) holds `junk`."""
    b, t = mask.shape
    out = torch.full((b + 1, t + 2), junk)
    out[:b, :t] = torch.where(mask, x, torch.tensor(junk))
    return out


def _padded_inputs(spec: ObjectiveSpec, batch: Batch, padded: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    """The declared per-token extra inputs, padded like the log-probs."""
    out: dict[str, Any] = {}
    if "sampling_logp" in spec.inputs:
        out["sampling_logp"] = padded(batch.old_logp)
    if "router_shift" in spec.inputs:
        out["router_shift"] = padded(torch.zeros(batch.logp.shape))
    return out


def order(spec: ObjectiveSpec, seed: int) -> Finding:
    """Largest relative change of loss, metrics and (un-shuffled) gradient when the responses are shuffled."""
    batch = random_batch(seed)
    loss, grad, metrics = loss_grad(spec, batch)
    perm = torch.roll(torch.arange(batch.mask.shape[0]), 1)
    shuffled = Batch(batch.logp[perm], batch.old_logp[perm], batch.advantages[perm], batch.mask[perm])
    loss2, grad2, metrics2 = loss_grad(spec, shuffled)
    worst = max(relative_gap(loss2, loss), relative_gap(grad2, grad[perm]), metrics_gap(metrics, metrics2))
    return Finding("order", within(worst), worst, f"<= {TOLERANCE:g}", "responses shuffled")


def zero_advantage(spec: ObjectiveSpec, seed: int) -> Finding:
    batch = random_batch(seed)
    _, grad, _ = loss_grad(spec, Batch(batch.logp, batch.old_logp, torch.zeros_like(batch.advantages), batch.mask))
    measured = float(grad.abs().max())
    return Finding("zero_advantage", measured <= 1e-7, measured, "max |grad| <= 1e-07", "all advantages 0")


def plain_policy_gradient(batch: Batch, reduction: str) -> torch.Tensor:
    """-d/dlogp of reduce(A_i logp_it) under `reduction` (gspo_bench.objectives.reduce): [B, T]."""
    lengths = batch.mask.sum(-1).float()  # [B]
    responses = float((lengths > 0).sum().clamp(min=1))
    per_row = {"seq_mean_token_mean": 1.0 / (responses * lengths.clamp(min=1.0)),
               "token_mean": torch.full_like(lengths, 1.0 / float(lengths.sum().clamp(min=1.0))),
               "seq_mean_token_sum_norm": torch.full_like(lengths, 1.0 / (responses * float(lengths.max().clamp(min=1.0))))}
    return -(batch.advantages * per_row[reduction])[:, None] * batch.mask


def on_policy(spec: ObjectiveSpec, seed: int) -> Finding:
    batch = random_batch(seed)
    on = Batch(batch.old_logp.clone(), batch.old_logp, batch.advantages, batch.mask)
    _, grad, _ = loss_grad(spec, on)
    measured = relative_gap(grad / _scale(on, spec.reduction), plain_policy_gradient(on, spec.reduction) / _scale(on, spec.reduction))
    return Finding("on_policy", within(measured), measured, f"<= {TOLERANCE:g}",
                   f"ratio 1: the plain policy gradient of reduction {spec.reduction}")


def _scale(batch: Batch, reduction: str) -> float:
    """The largest entry of the expected gradient: the comparison is relative to it."""
    return max(float(plain_policy_gradient(batch, reduction).abs().max()), 1e-12)


def ascent(spec: ObjectiveSpec, seed: int) -> Finding:
    """The mean change of the positively-advantaged tokens' log-probs after a descent step of 1e-3
    along the normalised gradient: it must be positive."""
    batch = random_batch(seed, scale=1e-5)  # inside every trust region (GSPO clips at 3e-4)
    _, grad, _ = loss_grad(spec, batch)
    step = -1e-3 * grad / max(float(grad.abs().max()), 1e-30)
    positive = batch.mask & (batch.advantages[:, None] > 0)
    measured = float(step[positive].mean()) if bool(positive.any()) else 0.0
    return Finding("ascent", measured > 0, measured, "> 0", "mean change of log pi on tokens with A > 0")


def separable(spec: ObjectiveSpec, seed: int) -> Finding:
    """Largest relative change of row 0's gradient when the other rows' log-probs move."""
    batch = random_batch(seed)
    _, grad, _ = loss_grad(spec, batch)
    g = torch.Generator().manual_seed(seed + 2)
    moved = batch.logp + 0.3 * torch.randn(batch.logp.shape, generator=g)
    moved[0] = batch.logp[0]
    _, grad2, _ = loss_grad(spec, Batch(moved, batch.old_logp, batch.advantages, batch.mask))
    measured = relative_gap(grad2[0], grad[0])
    return Finding("separable", within(measured), measured, f"<= {TOLERANCE:g}",
                   "row 0's gradient as the other rows' log-probs move (micro-batching is exact)")


def inputs_used(spec: ObjectiveSpec, seed: int) -> Finding:
    """The smallest relative change of loss and gradient that a change of one declared input makes."""
    batch = random_batch(seed, scale=0.5)
    loss, grad, _ = loss_grad(spec, batch)
    changed = {"sampling_logp": batch.old_logp + 0.5, "router_shift": torch.full(batch.logp.shape, 0.5),
               "generator": torch.Generator().manual_seed(12345)}
    effects = []
    for name in sorted(spec.inputs):
        loss2, grad2, _ = loss_grad(spec, batch, **{name: changed[name]})
        effects.append(max(relative_gap(loss2, loss), relative_gap(grad2, grad)))
    measured = min(effects)
    return Finding("inputs_used", measured > TOLERANCE, measured, f"> {TOLERANCE:g}",
                   f"each of {', '.join(sorted(spec.inputs))} changed")


def metrics(spec: ObjectiveSpec, seed: int) -> Finding:
    """Required measurements missing, not scalar, not finite or out of range (fractions in [0, 1],
    variances >= 0, token ratio min <= mean <= max, a learning-rate factor in (0, 1], returned exactly by the
    objectives that declare `scales_lr`)."""
    batch = random_batch(seed, scale=0.3)
    _, raw = call(spec, batch)
    scalar = {k: not isinstance(v, torch.Tensor) or v.dim() == 0 for k, v in raw.items()}  # the contract's numbers
    problems = [k for k in REQUIRED_METRICS if k not in raw or not scalar[k]]
    values = {k: float(v) for k, v in raw.items() if scalar[k]}
    problems += [k for k, v in values.items() if not math.isfinite(v)]
    ranges = {k: (0.0, 1.0) for k in ("clip/frac", "clip/frac_low", "clip/frac_high")} | {
        k: (0.0, math.inf) for k in ("ratio/token_var", "ratio/seq_var", "logratio/token_var", "ratio/token_min")}
    ranges[LR_SCALE] = (1e-12, 1.0)
    problems += [k for k, (lo, hi) in ranges.items() if k in values and not lo <= values[k] <= hi]
    if (LR_SCALE in raw) != spec.scales_lr:  # the step hook is declared exactly where it is returned
        problems.append(LR_SCALE + (" (declared scales_lr, not returned)" if spec.scales_lr else " (returned, scales_lr undeclared)"))
    if {"ratio/token_min", "ratio/token_mean", "ratio/token_max"} <= set(values) and not (
            values["ratio/token_min"] <= values["ratio/token_mean"] + 1e-6 <= values["ratio/token_max"] + 2e-6):
        problems.append("ratio/token_mean")
    return Finding("metrics", not problems, len(problems), "== 0 problems",
                   f"missing or out of range: {', '.join(sorted(set(problems)))}" if problems else "all present, in range")


PROPERTIES: dict[str, Callable[[ObjectiveSpec, int], Finding]] = {
    "finite": finite, "padding": padding, "order": order, "zero_advantage": zero_advantage, "on_policy": on_policy,
    "ascent": ascent, "separable": separable, "inputs_used": inputs_used, "metrics": metrics,
}
assert tuple(PROPERTIES) == CONFORMANCE_PROPERTIES


def not_applicable(spec: ObjectiveSpec, prop: str) -> str | None:
    """Why `prop` does not apply to `spec` (its declaration), or None."""
    if prop == "separable" and spec.coupled:
        return "declared coupled: the loop computes every row's log-probs first, so micro-batches stay exact"
    if prop == "inputs_used" and not spec.inputs:
        return "declares no extra inputs"
    return dict(spec.exempt).get(prop)


def check_objective(name: str, seed: int = 0, settings: dict[str, Any] | None = None,
                    timeout: float | None = CHECK_SECONDS) -> list[Finding]:
    """Every property of the kit measured on objective `name` (a registered one) with keyword `settings`
    (a suite entry's clip range and kwargs; default: the function's), in PROPERTIES' order; an exempted
    property is a Finding with `passed` None and the declared reason. Each property has `timeout`
    seconds (None: no limit; POSIX main thread only, see gspo_bench.runtime.time_limit). ContractError,
    naming the objective and the property, where the objective breaks its contract, raises or runs over."""
    spec = objective_spec(name)
    if settings:
        spec = dataclasses.replace(spec, fn=functools.partial(spec.fn, **settings))
    findings = []
    for prop, measure in PROPERTIES.items():
        reason = not_applicable(spec, prop)
        if reason:
            findings.append(Finding(prop, None, math.nan, "-", reason))
            continue
        try:
            with time_limit(timeout, f"the {prop!r} check"):
                findings.append(measure(spec, seed))
        except ContractError as err:
            raise ContractError(f"objective {name} (the {prop!r} check) {err}") from err.__cause__
        except TimeLimitExceeded as err:
            raise ContractError(f"objective {name}: {err} on batches of a few tokens (a loss that loops or "
                                "waits?)") from None
    return findings
