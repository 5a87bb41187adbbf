from __future__ import annotations

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


def test_all_objectives_registered():
    assert list_objectives() == sorted(
        ["grpo", "gspo", "gspo_token", "dapo", "dr_grpo", "gmpo", "sapo", "cispo",
         "rspo", "m2po", "dppo_binary_tv", "luspo", "kl_cov", "clip_cov"]
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
    assert declared == {"dppo_binary_tv": {"sampling_logp"}, "rspo": {"router_shift"}, "clip_cov": {"generator"}}
