from __future__ import annotations

import dataclasses
import functools
import inspect

import pytest
import torch

from gspo_bench.objectives import (
    UnknownObjectiveError,
    get_objective,
    list_objectives,
    objective_spec,
    register_objective,
    registry,
)
from gspo_bench.objectives.conformance import call, random_batch
from gspo_bench.objectives.inputs import prepare
from gspo_bench.objectives.reduce import REDUCTIONS, aggregate, recording_terms
from tests.helpers.contracts import package_objectives, parametrized


def test_all_objectives_registered():
    assert list_objectives() == sorted(
        ["grpo", "gspo", "gspo_token", "dapo", "dr_grpo", "gmpo", "sapo", "cispo",
         "rspo", "m2po", "dppo_binary_tv", "luspo", "kl_cov", "clip_cov", "vespo", "dro", "ipo", "minpro", "vcpo"]
    )


def test_paper_clip_ranges_are_the_defaults():
    assert (objective_spec("gspo").clip_low, objective_spec("gspo").clip_high) == (3e-4, 4e-4)
    assert (objective_spec("gspo_token").clip_low, objective_spec("gspo_token").clip_high) == (3e-4, 4e-4)
    assert (objective_spec("grpo").clip_low, objective_spec("grpo").clip_high) == (0.2, 0.27)
    assert (objective_spec("dapo").clip_low, objective_spec("dapo").clip_high) == (0.2, 0.28)
    assert (objective_spec("gmpo").clip_low, objective_spec("gmpo").clip_high) == (0.4, 0.4)
    assert objective_spec("sapo").clip_low is None


def test_unknown_name_lists_valid_ones():
    with pytest.raises(UnknownObjectiveError) as err:
        get_objective("gpso")
    message = str(err.value)
    assert "gpso" in message
    for name in list_objectives():
        assert name in message


def test_duplicate_name_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())

    def fn(logp, old_logp, advantages, mask, weights=None):
        return torch.zeros(()), {}

    with pytest.raises(ValueError, match="already registered"):
        register_objective("gspo", description="x", reference="y")(fn)
    register_objective("my_objective", description="x", reference="y")(fn)
    assert "my_objective" in list_objectives()
    with pytest.raises(ValueError, match="already registered"):
        register_objective("my_objective", description="x", reference="y")(fn)


def test_registration_checks_the_call_signature(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    with pytest.raises(TypeError, match="lacks"):
        register_objective("broken", description="x", reference="y")(lambda logp, mask: None)


def test_declared_inputs_must_match_the_signature(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())

    def anchored(logp, old_logp, advantages, mask, sampling_logp, weights=None):
        return torch.zeros(()), {}

    with pytest.raises(TypeError, match=r"declares inputs \[\] but its arguments take \['sampling_logp'\]"):
        register_objective("undeclared", description="x", reference="y")(anchored)
    with pytest.raises(TypeError, match=r"declares inputs \['router_shift', 'sampling_logp'\] but"):
        register_objective("overdeclared", description="x", reference="y",
                           inputs=("sampling_logp", "router_shift"))(anchored)
    with pytest.raises(TypeError, match=r"unknown inputs \['mu'\]"):
        register_objective("misnamed", description="x", reference="y", inputs=("mu",))(anchored)
    assert not {"undeclared", "overdeclared", "misnamed"} & set(list_objectives())
    register_objective("declared", description="x", reference="y", inputs=("sampling_logp",))(anchored)
    assert objective_spec("declared").inputs == {"sampling_logp"}


def test_the_registered_objectives_declare_their_extra_inputs():
    declared = {name: set(objective_spec(name).inputs) for name in list_objectives() if objective_spec(name).inputs}
    assert declared == {"dppo_binary_tv": {"sampling_logp"}, "rspo": {"router_shift"}, "clip_cov": {"generator"},
                        "ipo": {"sampling_logp"}, "vcpo": {"sampling_logp"}}


def token_weights(batch, reduction: str) -> torch.Tensor:
    """[B, T] what `aggregate` weighs each token of `batch` by under `reduction` (its contributions for terms of 1)."""
    with recording_terms() as recorded:
        aggregate(torch.ones(batch.mask.shape), batch, reduction)
    return recorded[0]


@pytest.mark.parametrize("name", package_objectives())
def test_each_objective_reduces_its_terms_by_its_declared_reduction(name):
    """An objective states its reduction once, at registration; its body takes `reduction` and hands it to
    `aggregate`. Called with each reduction in turn, the body's per-token contributions are the same terms
    weighed by that reduction's token weights (a body naming a reduction of its own weighs them by that
    one, whatever it is handed), and the registered function is the body handed the declared reduction."""
    spec = objective_spec(name)
    body = spec.fn.__wrapped__
    assert inspect.signature(body).parameters["reduction"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "reduction" not in inspect.signature(spec.fn).parameters and "reduction" not in spec.params()
    batch = random_batch(0)
    weights = {r: token_weights(prepare(batch.logp, batch.old_logp, batch.advantages, batch.mask), r) for r in REDUCTIONS}

    def contributions(fn) -> list[torch.Tensor]:
        with recording_terms() as recorded:
            call(dataclasses.replace(spec, fn=fn), batch)
        return recorded

    by = {r: contributions(functools.partial(body, reduction=r)) for r in REDUCTIONS}
    declared = contributions(spec.fn)
    assert len(declared) == len(by[spec.reduction]) >= 1
    assert all(torch.equal(a, b) for a, b in zip(declared, by[spec.reduction]))
    assert any(bool(c.ne(0).any()) for c in declared)
    for r in REDUCTIONS:
        assert len(by[r]) == len(declared)
        for mine, theirs in zip(by[r], by[spec.reduction]):  # mine / w_r == theirs / w_declared, cross-multiplied
            torch.testing.assert_close(mine * weights[spec.reduction], theirs * weights[r], rtol=1e-5, atol=1e-9)


def test_a_reduction_stated_twice_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())

    def defaulted(logp, old_logp, advantages, mask, weights=None, *, reduction="token_mean"):
        return torch.zeros(()), {}

    def positional(logp, old_logp, advantages, mask, reduction, weights=None):
        return torch.zeros(()), {}

    for fn in (defaulted, positional):
        with pytest.raises(TypeError, match="`reduction` argument must be keyword-only and without a default"):
            register_objective("twice", description="x", reference="y", reduction="token_mean")(fn)
    assert "twice" not in list_objectives()


def test_the_reduction_check_runs_on_every_registered_objective():
    assert parametrized(globals()) == {"test_each_objective_reduces_its_terms_by_its_declared_reduction":
                                       package_objectives()}
