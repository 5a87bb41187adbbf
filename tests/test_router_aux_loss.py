"""model.router_aux_loss_coef: the family's load-balancing loss (transformers' aux_loss) added to the RL
update, a stated setting (TRL's models default it on at 0.001, other stacks 0: a confound across libraries)."""

from __future__ import annotations

import copy
from functools import partial

import pytest
import torch
from pydantic import ValidationError
from torch.testing import assert_close

from gspo_bench.config import TrainConfig
from gspo_bench.config.schema import ModelConfig
from gspo_bench.models.families import NO_AUX_LOSS_FAMILIES, SUPPORTED_FAMILIES
from gspo_bench.models.forward import response_forward, router_aux_loss
from gspo_bench.models.tiny import build_tiny_moe
from gspo_bench.objectives import get_objective
from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.optim import make_optimizer
from gspo_bench.train.policy import Policy
from gspo_bench.train.update import UpdateSettings, update_minibatch
from tests.helpers.phases import rollout

GRPO = partial(get_objective("grpo"), clip_low=0.2, clip_high=0.27)


def expected_loss(model, batch, old, rows):
    """GRPO's loss of `rows` under `model`, computed outside the update."""
    with torch.no_grad():
        logp, _ = response_forward(model, batch.input_ids[rows], batch.attention_mask[rows], batch.n_response, 1.0)
    loss, _ = GRPO(logp=logp, old_logp=old.logp[rows], advantages=batch.advantages[rows], mask=batch.response_mask[rows])
    return loss

FAST = ("qwen3_moe", "olmoe", "mixtral", "deepseek_v3", "llama4_text")  # both kinds, softmax and sigmoid routers


def call(model):
    ids = torch.randint(5, 20, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :2] = 0  # left padding, as the rollout batches have
    return ids, mask


@pytest.mark.parametrize("family", FAST)
def test_the_families_that_compute_a_load_balancing_loss_are_the_ones_allowed_to_add_it(family):
    model = build_tiny_moe(family)
    ids, mask = call(model)
    if family in NO_AUX_LOSS_FAMILIES:
        with pytest.raises(RuntimeError, match="computes no load-balancing loss"), router_aux_loss(model):
            model(input_ids=ids, attention_mask=mask)
        with pytest.raises(ValidationError, match="computes no load-balancing loss"):
            ModelConfig(family=family, router_aux_loss_coef=0.001)
        return
    with router_aux_loss(model) as found:
        out = model(input_ids=ids, attention_mask=mask)
    direct = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
    assert len(found) == 1 and found[0].requires_grad
    assert_close(found[0], direct.aux_loss)  # the family's own loss, over the call's router logits
    assert_close(out.logits, model(input_ids=ids, attention_mask=mask).logits, rtol=0, atol=0)  # logits unchanged
    assert ModelConfig(family=family, router_aux_loss_coef=0.001).router_aux_loss_coef == 0.001


def test_the_family_table_is_what_transformers_computes():
    """Every supported family built once: aux_loss present exactly where NO_AUX_LOSS_FAMILIES says not."""
    without = set()
    for family in SUPPORTED_FAMILIES:
        model = build_tiny_moe(family, num_layers=2, hidden_size=16, expert_hidden=16, num_experts=4, top_k=2)
        ids, mask = call(model)
        if getattr(model(input_ids=ids, attention_mask=mask, output_router_logits=True), "aux_loss", None) is None:
            without.add(family)
    assert without == set(NO_AUX_LOSS_FAMILIES)


def test_the_update_adds_coef_times_the_load_balancing_loss(parts):
    """One minibatch: the loss is the objective's plus coef x aux_loss of the update's own forward (logged
    as loss/router_aux), and the router's gradient, hence its step, changes with it."""
    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    rows = torch.tensor([6, 1, 3, 4])

    def policy_of():
        model = copy.deepcopy(parts[1]).train()
        return Policy(model, make_optimizer(model, TrainConfig(), lr=1e-2))

    plain, with_aux = policy_of(), policy_of()
    objective_loss = expected_loss(with_aux.model, batch, old, rows)
    with torch.no_grad():
        out = with_aux.model(input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows],
                             output_router_logits=True)
    result = update_minibatch(with_aux, GRPO, batch, old, rows, UpdateSettings(aux_coef=0.5))
    update_minibatch(plain, GRPO, batch, old, rows, UpdateSettings())
    assert_close(result.loss, objective_loss + 0.5 * out.aux_loss)
    assert_close(result.metrics["loss/router_aux"], out.aux_loss)
    routers = [name for name, _ in with_aux.model.named_parameters() if name.endswith("mlp.gate.weight")]
    assert routers
    moved = {n: p for n, p in with_aux.model.named_parameters()}
    kept = {n: p for n, p in plain.model.named_parameters()}
    assert all(not torch.equal(moved[n], kept[n]) for n in routers)


def test_the_load_balancing_loss_is_refused_where_it_would_not_be_the_minibatchs(parts):
    batch = rollout(parts)
    old = old_policy_pass(Policy(parts[1]), batch, temperature=1.0)
    policy = Policy(copy.deepcopy(parts[1]).train(), make_optimizer(parts[1], TrainConfig(), lr=1e-3))
    with pytest.raises(ValueError, match="one forward on one process"):
        update_minibatch(policy, GRPO, batch, old, torch.arange(8), UpdateSettings(aux_coef=0.1, micro_batch_tokens=16))


def test_the_setting_changes_no_warm_start_and_no_tiny_model(monkeypatch, tmp_path):
    """The coefficient is the RL update's: a tiny model is built from the same sizes, and the warm start
    (whose cache key holds the model section) is the same whatever it is."""
    import gspo_bench.train as train
    from gspo_bench.config.load import load_suite
    from gspo_bench.suite.runner import starting_weights

    base, aux = ModelConfig(), ModelConfig(router_aux_loss_coef=0.01)
    assert base.tiny_sizes() == aux.tiny_sizes() and "router_aux_loss_coef" not in aux.tiny_sizes()
    with pytest.raises(ValidationError, match="router_aux_loss_coef"):
        ModelConfig(aux_loss=True)
    keys = []

    def fake_warm_start(build, tokenizer, task, params, key_parts, cache, **_):
        keys.append(key_parts)
        build()  # the tiny model builds from the section's sizes
        return None, {"path": str(tmp_path), "cached": True, "accuracy": 0.5, "steps": 0}

    monkeypatch.setattr(train, "warm_start", fake_warm_start)
    for coef in (0.0, 0.01):
        starting_weights(load_suite("experiments/ci.yaml", {"model.router_aux_loss_coef": coef}), seed=0, log=lambda _: None)
    assert len(keys) == 2 and keys[0] == keys[1]


def test_the_report_states_the_load_balancing_loss_of_its_runs():
    import pandas as pd

    from analysis.report.tables import aux_loss_text

    assert "none (model.router_aux_loss_coef = 0)" in aux_loss_text(pd.DataFrame({"router_aux_loss_coef": [0.0, 0.0]}))
    assert "x 0.001" in aux_loss_text(pd.DataFrame({"router_aux_loss_coef": [0.001, 0.001]}))
    mixed = aux_loss_text(pd.DataFrame({"router_aux_loss_coef": [0.0, 0.001]}))
    assert "differs between runs" in mixed and "0, 0.001" in mixed
