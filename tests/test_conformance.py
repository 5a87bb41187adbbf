"""The conformance kit (gspo_bench.objectives.conformance): every built-in objective passes each property
or declares why it does not apply; each property fails on an objective broken on purpose for it; and
`gspo-bench check` prints every measurement and exits 1 on a failure."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.objectives import get_objective, list_objectives, objective_spec, register_objective, registry
from gspo_bench.objectives.conformance import PROPERTIES, check_objective, not_applicable

GRPO = get_objective("grpo")


@pytest.mark.parametrize("prop", list(PROPERTIES))
@pytest.mark.parametrize("name", list_objectives())
def test_every_builtin_objective_passes_or_says_why_not(name, prop):
    spec = objective_spec(name)
    reason = not_applicable(spec, prop)
    if reason is not None:
        assert len(reason) > 10  # a reason, not a bare opt-out
        return
    finding = PROPERTIES[prop](spec, 0)
    assert finding.passed is True, finding


# ---------------------------------------------------------------- objectives broken on purpose


def sum_where_mean_is_declared(logp, old_logp, advantages, mask, weights=None):
    """GRPO's terms summed over each response's tokens instead of averaged (declared: seq_mean_token_mean)."""
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    lengths = mask.sum(-1).clamp(min=1).float()
    return loss * lengths.mean(), metrics  # on policy: every row's gradient scaled by the mean length


def padding_leak(logp, old_logp, advantages, mask, weights=None):
    """A mean over every position, padding included."""
    _, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    return -(advantages[:, None] * torch.exp(logp - old_logp)).mean(), metrics


def sign_flip(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    return -loss, metrics


def hidden_coupling(logp, old_logp, advantages, mask, weights=None):
    """GRPO times exp(m - sg[m]) (1 in value) with m the batch's mean log-prob: rows share gradients."""
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    valid = mask.bool()
    m = torch.where(valid, logp, 0.0).sum() / valid.sum().clamp(min=1)
    return loss * torch.exp(m - m.detach()) * (1 + loss.detach()), metrics


def nan_at_large_ratios(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    big = (torch.exp(logp - old_logp) > 1e3) & mask.bool()
    return loss + torch.where(big.any(), float("nan"), 0.0), metrics


def first_row_counts_twice(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    first, _ = GRPO(logp[:1], old_logp[:1], advantages[:1], mask[:1])
    return loss + first, metrics


def entropy_bonus(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    valid = mask.bool()
    return loss + 0.01 * torch.where(valid, logp, 0.0).sum() / valid.sum().clamp(min=1), metrics


def declares_mu_but_ignores_it(logp, old_logp, advantages, mask, sampling_logp, weights=None):
    return GRPO(logp, old_logp, advantages, mask, weights=weights)


def no_measurements(logp, old_logp, advantages, mask, weights=None):
    return GRPO(logp, old_logp, advantages, mask, weights=weights)[0], {}


BROKEN = {  # property -> (objective, declaration)
    "on_policy": (sum_where_mean_is_declared, {}),
    "padding": (padding_leak, {}),
    "ascent": (sign_flip, {}),
    "separable": (hidden_coupling, {}),
    "finite": (nan_at_large_ratios, {}),
    "order": (first_row_counts_twice, {}),
    "zero_advantage": (entropy_bonus, {}),
    "inputs_used": (declares_mu_but_ignores_it, {"inputs": ("sampling_logp",)}),
    "metrics": (no_measurements, {}),
}


def test_every_property_has_a_broken_objective():
    assert set(BROKEN) == set(PROPERTIES)


@pytest.mark.parametrize("prop", sorted(BROKEN))
def test_each_property_fails_on_the_objective_broken_for_it(prop, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    fn, declared = BROKEN[prop]
    register_objective("broken", description="d", reference="r", **declared)(fn)
    findings = {f.property: f for f in check_objective("broken")}
    assert findings[prop].passed is False, findings[prop]


def test_the_sign_flip_fails_on_policy_too_and_the_coupling_passes_once_declared(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    register_objective("flipped", description="d", reference="r")(sign_flip)
    register_objective("coupled", description="d", reference="r", coupled=True)(hidden_coupling)
    assert {f.property: f.passed for f in check_objective("flipped")}["on_policy"] is False
    coupled = {f.property: f for f in check_objective("coupled")}["separable"]
    assert coupled.passed is None and "declared coupled" in coupled.note


def test_an_exemption_is_reported_with_its_reason_and_needs_one(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    register_objective("soft", description="d", reference="r", exempt={"ascent": "a soft gate, not a clip"})(GRPO)
    assert {f.property: (f.passed, f.note) for f in check_objective("soft")}["ascent"] == (None, "a soft gate, not a clip")
    with pytest.raises(TypeError, match="exempts unknown properties"):
        register_objective("typo", description="d", reference="r", exempt={"acsent": "x"})(GRPO)
    with pytest.raises(TypeError, match="needs its reason"):
        register_objective("bare", description="d", reference="r", exempt={"ascent": ""})(GRPO)
    with pytest.raises(TypeError, match="declares reduction 'sum'"):
        register_objective("summed", description="d", reference="r", reduction="sum")(GRPO)


PLANTED = '''from gspo_bench.objectives import get_objective, register_objective

@register_objective("xpo", description="GRPO with its sign flipped", reference="-")
def xpo(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = get_objective("grpo")(logp, old_logp, advantages, mask, weights=weights)
    return -loss, metrics
'''


def test_check_prints_every_measurement_and_exits_1_on_a_failure(tmp_path):
    from gspo_bench.config.plugins import unload_plugins

    (tmp_path / "xpo.py").write_text(PLANTED)
    try:
        result = CliRunner().invoke(app, ["check", "xpo", "--plugin", str(tmp_path / "xpo.py")])
    finally:
        unload_plugins()
    assert result.exit_code == 1, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.split() and line.split()[0] in PROPERTIES}
    assert set(lines) == set(PROPERTIES)
    assert "FAIL" in lines["ascent"] and "FAIL" in lines["on_policy"] and "pass" in lines["padding"]
    assert "n/a" in lines["inputs_used"] and "declares no extra inputs" in lines["inputs_used"]
    ok = CliRunner().invoke(app, ["check", "luspo"])
    assert ok.exit_code == 0 and "n/a" in ok.output and "scaled by |y_i|" in " ".join(ok.output.split())


SIGNED = '''from gspo_bench.objectives import get_objective, register_objective

@register_objective("signed", description="GRPO times a sign", reference="-")
def signed(logp, old_logp, advantages, mask, sign=1.0, weights=None):
    loss, metrics = get_objective("grpo")(logp, old_logp, advantages, mask, weights=weights)
    return sign * loss, metrics
'''


def test_check_takes_the_params_a_suite_entry_gives_and_validate_names_them(tmp_path):
    """`check NAME --param KEY=VALUE` measures the objective as a suite entry's params make it (validate
    checks it so, and its refusal names the command with them): the kit passes `signed` at its default
    sign and fails it at sign -1; a keyword it does not take is one error line."""
    from gspo_bench.config import parse_suite
    from gspo_bench.config.plugins import unload_plugins
    from gspo_bench.suite.preflight import _check_plugin_objectives

    plugin = str(tmp_path / "signed.py")
    (tmp_path / "signed.py").write_text(SIGNED)
    try:
        default = CliRunner().invoke(app, ["check", "signed", "--plugin", plugin])
        flipped = CliRunner().invoke(app, ["check", "signed", "--plugin", plugin, "--param", "sign=-1"])
        unknown = CliRunner().invoke(app, ["check", "signed", "--plugin", plugin, "--param", "beta=1"])
        suite = parse_suite({"name": "s", "plugins": [plugin], "task": {"name": "sort"},
                             "budget": {"kind": "steps", "value": 1},
                             "objectives": [{"name": "signed", "params": {"sign": -1.0}}]})
        refusal = _check_plugin_objectives(suite)
    finally:
        unload_plugins()
    assert default.exit_code == 0, default.output
    assert flipped.exit_code == 1 and "FAIL" in flipped.output, flipped.output
    assert unknown.exit_code == 2 and "takes no keyword 'beta'; it takes: sign" in unknown.output
    assert len(refusal) == 1 and f"--plugin {plugin} --param sign=-1.0`" in refusal[0]
