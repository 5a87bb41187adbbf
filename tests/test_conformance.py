"""The conformance kit (gspo_bench.objectives.conformance): every built-in objective passes each property
or declares why it does not apply; each property fails on an objective broken on purpose for it; and
`gspo-bench check` prints every measurement and exits 1 on a failure."""

from __future__ import annotations

import signal
import time

import pytest
import torch
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.objectives import get_objective, objective_spec, register_objective, registry
from gspo_bench.objectives.conformance import PROPERTIES, check_objective, not_applicable
from tests.helpers.contracts import package_objectives, parametrized

GRPO = get_objective("grpo")


@pytest.mark.parametrize("prop", list(PROPERTIES))
@pytest.mark.parametrize("name", package_objectives())
def test_every_builtin_objective_passes_or_says_why_not(name, prop):
    spec = objective_spec(name)
    reason = not_applicable(spec, prop)
    if reason is not None:
        assert len(reason) > 10  # a reason, not a bare opt-out
        return
    finding = PROPERTIES[prop](spec, 0)
    assert finding.passed is True, finding


def test_the_conformance_kit_runs_on_every_registered_objective():
    """An objective registered later is checked without an edit here; a list of names put back in place
    of the registry fails here."""
    assert parametrized(globals()) == {"test_every_builtin_objective_passes_or_says_why_not": package_objectives()}


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


def divides_by_unclamped_length(logp, old_logp, advantages, mask, weights=None):
    """Each response's token mean over its unclamped length: an all-padding row is 0 / 0, NaN."""
    _, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    valid = mask.bool()
    terms = torch.where(valid, -advantages[:, None] * torch.exp(logp - old_logp), 0.0)
    return (terms.sum(-1) / valid.sum(-1)).sum() / valid.any(-1).sum().clamp(min=1), metrics


def masks_by_multiplying(logp, old_logp, advantages, mask, weights=None):
    """Padding masked by multiplying with the mask after clamping the log-ratio and the advantage: 123
    and inf padding give 0, NaN padding gives NaN * 0 = NaN."""
    _, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    m = mask.float()
    terms = -advantages.clamp(-1e6, 1e6)[:, None] * torch.exp((logp - old_logp).clamp(-20.0, 20.0)) * m
    return (terms.sum(-1) / m.sum(-1).clamp(min=1)).sum() / (m.sum(-1) > 0).sum().clamp(min=1), metrics


def declares_two_inputs_uses_one(logp, old_logp, advantages, mask, sampling_logp, router_shift, weights=None):
    """GRPO scaled by exp(mean log pi_old - log mu) (1 at mu = pi_old); router_shift declared, never read."""
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    valid = mask.bool()
    return loss * torch.exp(torch.where(valid, old_logp - sampling_logp, 0.0).sum() / valid.sum().clamp(min=1)), metrics


SUBTLE = {  # objective -> (the properties that must fail, declaration): each passes every other property
    divides_by_unclamped_length: ({"finite", "padding"}, {}),  # the all-masked row of each
    masks_by_multiplying: ({"padding"}, {}),  # NaN in the padding, not 123 or inf
    declares_two_inputs_uses_one: ({"inputs_used"}, {"inputs": ("sampling_logp", "router_shift")}),
}


def test_every_property_has_a_broken_objective():
    assert set(BROKEN) == set(PROPERTIES)


@pytest.mark.parametrize("fn", list(SUBTLE), ids=lambda fn: fn.__name__)
def test_the_kit_catches_breaks_that_one_case_alone_exposes(fn, monkeypatch):
    """An all-padding row, NaN padding, each declared input moved alone: the one case of the kit that
    sees each of these; the objective fails those properties and passes the others."""
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    failing, declared = SUBTLE[fn]
    register_objective("subtle", description="d", reference="r", **declared)(fn)
    assert {f.property for f in check_objective("subtle") if f.passed is False} == failing


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


# ---------------------------------------------------------------- the objective's contract, time limit, --param


def vector_loss(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    return loss * torch.ones(3), metrics


def float_loss(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    return loss.item(), metrics


def three_items(logp, old_logp, advantages, mask, weights=None):
    return (*GRPO(logp, old_logp, advantages, mask, weights=weights), 1.0)


def detached_loss(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    return loss.detach(), metrics


def string_metric(logp, old_logp, advantages, mask, weights=None):
    loss, metrics = GRPO(logp, old_logp, advantages, mask, weights=weights)
    return loss, {**metrics, "note": "fine"}


def masks_in_place(logp, old_logp, advantages, mask, weights=None):
    mask[:, 0] = False  # "skip the first token", on the caller's tensor
    return GRPO(logp, old_logp, advantages, mask, weights=weights)


def raises(logp, old_logp, advantages, mask, weights=None):
    return 1 / 0


CONTRACT = {  # objective -> what the one error line says it did
    vector_loss: "returned as its loss a tensor of shape [3] (float32); the loss is a 0-d floating tensor",
    (lambda logp, old_logp, advantages, mask, weights=None: None): "returned None (NoneType); an objective returns "
                                                                    "the pair (loss, metrics)",
    float_loss: "returned as its loss 969.374267578125 (float); the loss is a 0-d floating tensor",
    three_items: "returned a tuple of 3 items; an objective returns the pair (loss, metrics)",
    detached_loss: "returned a loss that does not depend on logp",
    string_metric: "returned the metric 'note' as 'fine' (str); a metric is a number or a one-element tensor",
    masks_in_place: "changed its input 'mask' in place; an objective leaves its inputs as it got them",
    raises: "raised ZeroDivisionError: division by zero",
}


@pytest.mark.parametrize("fn", list(CONTRACT), ids=lambda fn: fn.__name__)
def test_check_names_a_broken_contract_in_one_line(fn, monkeypatch):
    """An objective that returns anything but (0-d loss with a gradient, dict of numbers) or changes an
    input: `check` exits 1 with one line naming the objective, the check and what it returned or did."""
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    register_objective("mine", description="d", reference="r")(fn)
    result = CliRunner().invoke(app, ["check", "mine"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith(" ")]
    text = " ".join(result.output.split())
    assert len(lines) == 1 and text.startswith("error: objective mine (the 'finite' check) "), result.output
    assert CONTRACT[fn] in text, result.output
    assert "Traceback" not in result.output


def test_the_preflight_refuses_a_broken_contract_with_the_same_words(tmp_path):
    from gspo_bench.config import parse_suite
    from gspo_bench.config.plugins import unload_plugins
    from gspo_bench.suite.preflight import _check_plugin_objectives

    plugin = tmp_path / "inplace.py"
    plugin.write_text("from gspo_bench.objectives import get_objective, register_objective\n\n"
                      "@register_objective('inplace', description='d', reference='r')\n"
                      "def inplace(logp, old_logp, advantages, mask, weights=None):\n"
                      "    mask[:, 0] = False\n"
                      "    return get_objective('grpo')(logp, old_logp, advantages, mask, weights=weights)\n")
    try:
        suite = parse_suite({"name": "s", "plugins": [str(plugin)], "task": {"name": "sort"},
                             "budget": {"kind": "steps", "value": 1}, "objectives": [{"name": "inplace"}]})
        refusal = _check_plugin_objectives(suite)
    finally:
        unload_plugins()
    assert refusal == [f"objectives.0 (inplace): objective inplace (the 'finite' check) changed its input 'mask' in "
                       "place; an objective leaves its inputs as it got them (the training loop reads them again): "
                       f"work on a copy (mask = mask.clone()) ({plugin})"]


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="the time limit is SIGALRM's (POSIX)")
def test_check_stops_a_loss_that_never_returns_at_its_time_limit(monkeypatch):
    """A loss that sleeps (or a loop that swallows the first interruption) is stopped at --timeout: one
    line naming the objective and the check, exit 1, in far less than the sleep."""
    def sleeps(logp, old_logp, advantages, mask, weights=None):
        try:
            time.sleep(600)
        except BaseException as err:  # a user's broad except: the limit interrupts again
            if isinstance(err, KeyboardInterrupt):  # Ctrl-C, SIGTERM: the test run stays stoppable
                raise
        time.sleep(600)

    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    register_objective("sleepy", description="d", reference="r")(sleeps)
    start = time.monotonic()
    result = CliRunner().invoke(app, ["check", "sleepy", "--timeout", "0.2"])
    assert time.monotonic() - start < 30
    assert result.exit_code == 1
    assert " ".join(result.output.split()) == ("error: objective sleepy: the 'finite' check ran over 0.2 s on batches "
                                               "of a few tokens (a loss that loops or waits?)")
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the timer is off again
    assert check_objective("grpo", timeout=5.0)[0].passed  # and the next check runs


def test_the_default_time_limit_is_the_kits():
    import inspect

    from gspo_bench.cli import check
    from gspo_bench.objectives.conformance import CHECK_SECONDS

    assert inspect.signature(check).parameters["timeout"].default.default == CHECK_SECONDS


@pytest.mark.parametrize("item, expected", [
    ("clip_high=abc", "--param clip_high: expected float (the objective's type for it), got 'abc' (str)"),
    ("clip_high=yes", "--param clip_high: expected float (the objective's type for it), got True (bool)"),
    ("clip_high=.inf", "--param clip_high: expected a finite number, got inf"),
    ("dual_clip=[3]", "--param dual_clip: expected float | None (the objective's type for it), got [3] (list)"),
])
def test_check_refuses_a_param_of_the_wrong_type_naming_it(item, expected):
    result = CliRunner().invoke(app, ["check", "grpo", "--param", item])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert expected in " ".join(result.output.split()), result.output


def test_a_param_without_a_hint_is_read_as_its_defaults_type(tmp_path):
    from gspo_bench.config.plugins import unload_plugins

    plugin = str(tmp_path / "signed.py")
    (tmp_path / "signed.py").write_text(SIGNED)
    try:
        word = CliRunner().invoke(app, ["check", "signed", "--plugin", plugin, "--param", "sign=minus"])
        integer = CliRunner().invoke(app, ["check", "signed", "--plugin", plugin, "--param", "sign=-1"])
    finally:
        unload_plugins()
    assert word.exit_code == 2 and "--param sign: expected float" in " ".join(word.output.split()), word.output
    assert integer.exit_code == 1 and "FAIL" in integer.output, integer.output  # -1 taken as -1.0
