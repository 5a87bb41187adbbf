"""What makes MoE routing volatile, measured: ratios split by rerouted tokens, clipping in tokens and
responses, a bf16 rollout against fp32 training, and step-level credit (GSPO-token's own arm)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gspo_bench.config import SuiteError, parse_suite
from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.moe import rerouted_positions
from gspo_bench.objectives import get_objective
from gspo_bench.tasks import Example
from gspo_bench.tasks.countdown import step_verdicts
from gspo_bench.train.credit import step_advantages
from gspo_bench.train.measurements import RatioByRouting
from gspo_bench.train.row import to_host
from tests.helpers.runs import metrics, run_suite, signal_suite, tiny_suite

# ---------------------------------------------------------------------------------------- ratios by routing

def test_rerouted_positions_any_layer():
    old = torch.tensor([[[[0, 1], [2, 3], [1, 2]]], [[[4, 5], [6, 7], [4, 6]]]])  # [L=2, B=1, T=3, k=2]
    new = old.clone()
    new[1, 0, 0] = torch.tensor([5, 4])  # the same set: not rerouted
    new[1, 0, 2] = torch.tensor([4, 7])  # layer 1 of position 2 changed
    assert rerouted_positions(old, new).tolist() == [[False, False, True]]


def test_ratio_split_is_the_pooled_variance_of_each_kind_of_token():
    split = RatioByRouting()
    log_w = torch.log(torch.tensor([[1.0, 2.0, 4.0], [1.0, 3.0, 9.0]]))
    valid = torch.tensor([[True, True, True], [True, True, False]])
    rerouted = torch.tensor([[False, True, True], [False, True, True]])
    split.add(log_w[:1], valid[:1], rerouted[:1])  # two minibatches: pooled, not averaged
    split.add(log_w[1:], valid[1:], rerouted[1:])
    out = to_host(split.result())
    rerouted_w = torch.tensor([2.0, 4.0, 3.0])  # the 9.0 is padding; the stable ones are 1.0 and 1.0
    assert out["ratio/token_var_rerouted"] == pytest.approx(float(rerouted_w.var(unbiased=False)))
    assert out["ratio/token_var_stable"] == pytest.approx(0.0) and out["moe/rerouted_token_frac"] == pytest.approx(3 / 5)
    empty = RatioByRouting()
    empty.add(log_w, valid, torch.zeros_like(valid))
    assert math.isnan(to_host(empty.result())["ratio/token_var_rerouted"])


def test_clip_fraction_in_tokens_and_in_responses():
    logp = torch.zeros(3, 4)
    old = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # row 1: one w = e^-1
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    _, m = get_objective("grpo")(logp=logp, old_logp=old, advantages=torch.tensor([1.0, -1.0, 1.0]), mask=mask)
    assert float(m["clip/frac"]) == pytest.approx(1 / 10) and float(m["clip/seq_frac"]) == pytest.approx(1 / 3)


# ---------------------------------------------------------------------------------------- step credit

COUNTDOWN = Example("24:4,7,3,9=", "4+7=11,11*3=33,33-9=24", {"numbers": [4, 7, 3, 9], "target": 24})


def test_countdown_step_verdicts_hand_case():
    assert step_verdicts("4+7=11,11*3=33,33-9=24", COUNTDOWN) == [(0, 7, True), (7, 15, True), (15, 22, True)]
    # a wrong sum, then a step on its stated value (judged on its own), then one on an unavailable number
    assert step_verdicts("4+7=12,12*3=36,8-1=7", COUNTDOWN) == [(0, 7, False), (7, 15, True), (15, 20, False)]
    assert step_verdicts("(4+7)*3-9", COUNTDOWN) == [(0, 9, True)]
    assert step_verdicts("4+", COUNTDOWN) == [(0, 2, False)]


def test_step_advantages_lower_only_the_tokens_of_wrong_steps():
    tokenizer = build_char_tokenizer()
    texts = ["4+7=12,12*3=36", "4+7=11,11*3=33"]
    ids = [tokenizer.encode(t) + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, ids))
    response = torch.tensor([row + [0] * (width - len(row)) for row in ids])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids], dtype=torch.bool)
    out = step_advantages(torch.tensor([1.0, -0.5]), response, mask, texts, [COUNTDOWN, COUNTDOWN],
                          step_verdicts, tokenizer, penalty=0.5)
    assert out[0, :7].tolist() == [0.5] * 7  # "4+7=12," is wrong
    assert out[0, 7:15].tolist() == [1.0] * 8  # "12*3=36" and </s> keep A_i
    assert out[1].tolist() == [-0.5] * width  # every step right: A_it = A_i


def test_step_credit_is_refused_where_it_cannot_apply(tmp_path):
    with pytest.raises(SuiteError, match="takes one per response"):
        parse_suite(tiny_suite(tmp_path, objectives=[{"name": "gspo", "credit": "step"}]))
    with pytest.raises(SuiteError, match="checks steps"):
        parse_suite(tiny_suite(tmp_path, objectives=[{"name": "gspo_token", "credit": "step"}]))  # sort task


@pytest.fixture(scope="module")
def countdown_runs(tmp_path_factory) -> Path:
    cache, out = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("countdown")
    data = tiny_suite(cache, task={"name": "countdown", "params": {"count": 3, "max_target": 30}},
                      model={"num_layers": 2, "hidden_size": 64, "expert_hidden": 64},
                      warm_start={"band": [0.05, 1.0], "eval_every": 25, "eval_examples": 32, "batch_size": 32},
                      rollout={"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 16},
                      budget={"kind": "steps", "value": 3},
                      objectives=[{"name": "gspo"}, {"name": "gspo_token"},
                                  {"name": "gspo_token", "label": "gspo_token_step", "credit": "step"}])
    run_suite(data, out)
    return out


def test_gspo_token_equals_gspo_with_response_credit_and_differs_with_step_credit(countdown_runs):
    gspo, token = metrics(countdown_runs, "tiny", "gspo-s0"), metrics(countdown_runs, "tiny", "gspo_token-s0")
    step = metrics(countdown_runs, "tiny", "gspo_token_step-s0")
    keys = ["loss", "clip/frac", "ratio/seq_var", "grad/norm"]
    assert gspo[keys].iloc[0].tolist() == pytest.approx(token[keys].iloc[0].tolist(), rel=1e-5, abs=1e-8)
    assert gspo["reward/mean"].iloc[0] == step["reward/mean"].iloc[0]  # the same rollout ...
    assert gspo["loss"].iloc[0] != step["loss"].iloc[0]  # ... another loss: wrong steps got less credit


# ---------------------------------------------------------------------------------------- knobs

def test_a_bf16_rollout_against_fp32_training_is_a_real_mismatch(tmp_path):
    data = signal_suite(tmp_path / "cache", rollout={"dtype": "bfloat16"}, train={"minibatches": 1},
                        objectives=[{"name": "grpo"}, {"name": "grpo_r3"}])
    run_suite(data, tmp_path / "out")
    grpo, r3 = metrics(tmp_path / "out", "tiny", "grpo-s0").iloc[0], metrics(tmp_path / "out", "tiny", "grpo_r3-s0").iloc[0]
    assert grpo["mismatch/max_abs"] > 1e-3 and grpo["mismatch/k3_kl"] > 0
    assert r3["ratio/token_var"] < 1e-10  # R3 replays the bf16 engine's experts in every training forward


def test_model_knobs_reach_the_transformers_config(tmp_path):
    model = build_tiny_moe("qwen2_moe", num_experts=16, top_k=4, norm_topk_prob=True, shared_expert_hidden=24)
    assert model.config.norm_topk_prob and model.config.shared_expert_intermediate_size == 24
    assert model.config.num_experts == 16 and model.config.num_experts_per_tok == 4
    assert not build_tiny_moe("qwen3_moe", norm_topk_prob=False).config.norm_topk_prob
    with pytest.raises(SuiteError, match="only qwen2_moe has one"):
        parse_suite(tiny_suite(tmp_path, model={"family": "qwen3_moe", "shared_expert_hidden": 16}))
    with pytest.raises(SuiteError, match="divide"):
        parse_suite(tiny_suite(tmp_path, model={"hidden_size": 30}))


def test_measured_rerouting_in_a_training_step(tmp_path):
    """After a real update, some tokens are rerouted (in (0, 1)); both ratio variances are recorded."""
    data = signal_suite(tmp_path / "cache", train={"lr": 3e-3, "minibatches": 2}, objectives=[{"name": "grpo"}])
    run_suite(data, tmp_path / "out")
    row = metrics(tmp_path / "out", "tiny", "grpo-s0").iloc[0]
    assert 0 < row["moe/rerouted_token_frac"] < 1
    assert row["ratio/token_var_rerouted"] >= 0 and row["ratio/token_var_stable"] >= 0
    assert 0 <= row["clip/seq_frac"] <= 1
