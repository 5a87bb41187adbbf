"""Micro-batched updates (train.micro_batch_tokens): the packing, and the gradient accumulated over
micro-batches against the one-shot gradient for every registered objective and every correction,
with the whole minibatch's measurements; FSDP2's gradient sync on the last micro-batch only; a
3-step run with micro-batches and the fused head against the plain run."""

from __future__ import annotations

import copy
import itertools
import sys

import pandas as pd
import pytest
import torch

from gspo_bench.config import TrainConfig
from gspo_bench.objectives import list_objectives, objective_spec
from gspo_bench.objectives.corrections import list_corrections
from gspo_bench.runtime.distributed import World
from gspo_bench.train.micro_batches import plan_micro_batches
from gspo_bench.train.optim import make_optimizer
from gspo_bench.train.policy import Policy
from gspo_bench.train.update import UpdateSettings, update_minibatch
from tests.helpers.micro_batches import (
    BUDGET,
    KWARGS,
    ROWS,
    T,
    assert_same_update,
    update,
)
from tests.helpers.runs import TIME_COLUMNS, metrics, run_suite, tiny_suite

# ---------------------------------------------------------------------------------------- packing

def spans_mask(spans: list[tuple[int, int]], width: int) -> torch.Tensor:
    mask = torch.zeros(len(spans), width, dtype=torch.long)
    for row, (start, stop) in enumerate(spans):
        mask[row, start:stop] = 1
    return mask


def test_rows_are_packed_by_length_within_the_budget_and_never_split():
    # width 10, T = 4 (responses in columns 6..9); spans (first, last + 1): widths 10, 4, 9, 3, 9
    mask = spans_mask([(0, 10), (4, 8), (1, 10), (5, 8), (1, 10)], 10)
    plan = plan_micro_batches(mask, 4, budget=18)
    # widest first (ties in minibatch order): 0 alone (2 x 10 > 18), then 2 + 4 (2 x 9), then 1 + 3 (2 x 4)
    assert [m.positions.tolist() for m in plan] == [[0], [2, 4], [1, 3]]
    assert [(m.start, m.stop) for m in plan] == [(0, 10), (1, 10), (4, 8)]
    assert [m.n_response(10, 4) for m in plan] == [4, 4, 2]
    assert all(m.tokens() <= 18 for m in plan) and not any(m.filler for m in plan)
    alone = plan_micro_batches(mask, 4, budget=5)  # every row wider than 5 / 2: one row each, never split
    assert sorted(m.positions.tolist() for m in alone) == [[0], [1], [2], [3], [4]]
    assert plan_micro_batches(mask, 4, budget=None)[0].positions.tolist() == [0, 1, 2, 3, 4]


def test_a_window_keeps_one_response_column_and_the_last_prompt_token():
    mask = spans_mask([(2, 6)], 10)  # a response of 0 tokens: prompt ends at column 5, T = 4 starts at 6
    (micro,) = plan_micro_batches(mask, 4, budget=100)
    assert (micro.start, micro.stop, micro.n_response(10, 4)) == (2, 7, 1)


def test_ranks_run_as_many_micro_batches_as_the_rank_that_needs_most():
    mask = spans_mask([(0, 10), (0, 10), (0, 10), (6, 8), (0, 10)], 10)  # rank 0: rows 0, 2, 4; rank 1: 1, 3
    rank0 = plan_micro_batches(mask, 4, budget=10, world=World(0, 2))
    rank1 = plan_micro_batches(mask, 4, budget=10, world=World(1, 2))
    assert [m.positions.tolist() for m in rank0] == [[0], [2], [4]]
    # rank 1 would pack rows 1 and 3 into two micro-batches: it repeats row 1 as a filler to make three
    assert [(m.positions.tolist(), m.filler) for m in rank1] == [([1], False), ([3], False), ([1], True)]
    split = plan_micro_batches(mask, 4, budget=25, world=World(1, 2))  # rank 0 needs 2 (3 x 10 > 25)
    assert [m.positions.tolist() for m in split] == [[1], [3]]  # rank 1's one micro-batch halved


# ---------------------------------------------------------------------------------------- exactness

def test_the_test_batch_is_split_into_several_trimmed_micro_batches(setting):
    _, batch, _ = setting
    plan = plan_micro_batches(batch.attention_mask[ROWS], batch.n_response, BUDGET)
    assert len(plan) >= 3 and any(m.stop - m.start < batch.input_ids.shape[1] for m in plan)
    assert any(m.n_response(batch.input_ids.shape[1], T) < T for m in plan)
    assert sum(m.positions.numel() for m in plan) == len(ROWS)


@pytest.mark.parametrize("name", list_objectives())
def test_accumulated_gradient_equals_the_one_shot_gradient(setting, name):
    assert_same_update(setting, name)


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_accumulated_gradient_equals_the_one_shot_gradient_with_a_dual_clip(setting, name):
    _, plain, _ = update(setting, name, None, kwargs={"dual_clip": 1.05})
    assert float(plain.metrics["clip/frac_dual"]) > 0  # the dual clip acts on this batch
    assert_same_update(setting, name, kwargs={"dual_clip": 1.05})


@pytest.mark.parametrize("correction", list_corrections())
def test_accumulated_gradient_equals_the_one_shot_gradient_with_each_correction(setting, correction):
    plain_grads, plain, _ = update(setting, "grpo", None, correction)
    assert 0 < float(plain.metrics["correction/weight_mean"]) and float(plain.metrics["correction/ess"]) < 1
    assert_same_update(setting, "grpo", correction)
    assert_same_update(setting, "m2po", correction)  # with a coupled objective too


def test_fused_head_in_micro_batches_equals_the_plain_update(setting):
    assert_same_update(setting, "gspo_token", head_chunk=5)
    assert_same_update(setting, "kl_cov", head_chunk=3)


@pytest.mark.parametrize("name", ["grpo", "clip_cov"])
def test_micro_batches_of_checkpointed_layers_equal_the_plain_update(setting, name):
    """With activation checkpointing every micro-batch's backward recomputes its layers, routing as
    their forward did; a coupled objective's no-grad pass records no route for a recompute."""
    assert_same_update(setting, name, checkpointed=True)


def test_a_drawing_objective_draws_once_per_update(setting):
    _, _, plain = update(setting, "clip_cov", None)
    _, _, micro = update(setting, "clip_cov", BUDGET)
    assert torch.equal(plain.generator.get_state(), micro.generator.get_state())


def test_gradients_synchronise_on_the_last_micro_batch_only(setting):
    model, batch, old = setting
    policy = Policy(copy.deepcopy(model))
    policy.optimizer = make_optimizer(policy.model, TrainConfig(), lr=0.0)
    calls: list[bool] = []
    policy.model.set_requires_gradient_sync = calls.append  # FSDP2's switch
    n = len(plan_micro_batches(batch.attention_mask[ROWS], batch.n_response, BUDGET))
    update_minibatch(policy, objective_spec("grpo").fn, batch, old, ROWS, UpdateSettings(micro_batch_tokens=BUDGET))
    assert calls == [False] * (n - 1) + [True, True]  # the last backward syncs; the switch is left on


# ---------------------------------------------------------------------------------------- a run

@pytest.mark.slow
def test_three_steps_with_micro_batches_and_the_fused_head_give_the_plain_metrics(tmp_path):
    """Plain against micro-batches with the fused head, and against those with activation checkpointing too."""
    base = tiny_suite(tmp_path / "cache", rollout={"prompts_per_step": 4},
                      train={"minibatches": 2, "lr": 3e-3, "drift_after_update": True},
                      objectives=[{"name": "grpo_rr"}, {"name": "gspo"}, {"name": "clip_cov", "kwargs": KWARGS["clip_cov"]}])
    micro = {**base, "train": {**base["train"], "micro_batch_tokens": 40, "logprob_chunk_tokens": 7}}
    both = {**micro, "train": {**micro["train"], "activation_checkpointing": True}}  # replayed routes recomputed
    run_suite(base, tmp_path / "plain")
    run_suite(micro, tmp_path / "micro")
    run_suite(both, tmp_path / "both")
    for run, other in itertools.product(("grpo_rr-s0", "gspo-s0", "clip_cov-s0"), ("micro", "both")):
        one = metrics(tmp_path / "plain", "tiny", run).drop(columns=TIME_COLUMNS)
        two = metrics(tmp_path / other, "tiny", run).drop(columns=TIME_COLUMNS)
        assert len(one) == 3 and list(one.columns) == list(two.columns)
        # the engine-vs-trainer gaps and the repeat floor are float-noise figures themselves (1e-6): the fused
        # head's other summation order shows there at that scale. Step 1 agrees to rtol 1e-4; from step 2 on
        # the weights carry the first updates' float noise, which the ratio statistics show at up to 1.2e-4
        # relative (measured, clip_cov's ratio/token_var): rtol 1e-3
        # the cosine of consecutive gradients too: near 0 its float noise is absolute (measured 1.03e-6 at 3.5e-3)
        noise = [c for c in one.columns if c.startswith(("mismatch/", "floor/logp_", "grad/cos_prev"))]
        numeric = one.drop(columns=noise).select_dtypes("number").columns
        pd.testing.assert_frame_equal(one[numeric][:1], two[numeric][:1], rtol=1e-4, atol=1e-6)
        pd.testing.assert_frame_equal(one[numeric], two[numeric], rtol=1e-3, atol=1e-6)
        pd.testing.assert_frame_equal(one[noise], two[noise], rtol=0, atol=1e-5)
        assert (one["grad/norm"] > 0).sum() >= 2  # real updates (a step whose rewards all tie has none)


@pytest.mark.slow
def test_two_cpu_ranks_with_micro_batches_give_the_single_process_metrics(tmp_path):
    """FSDP2 under torchrun (gloo): minibatches of 3, 3 and 2 rows over 2 ranks, one row per micro-batch,
    so rank 1 runs a filler where rank 0 has two rows; gradients sync on each minibatch's last
    micro-batch. The metrics are the plain single process's."""
    import os
    import subprocess

    import yaml

    from tests.helpers.distributed import MARGIN_COLUMNS, SUITE

    suite = {**SUITE, "warm_start": {**SUITE["warm_start"], "cache_dir": str(tmp_path / "cache")},
             "train": {**SUITE["train"], "minibatches": 3},
             "objectives": [{"name": "grpo_rr"}, {"name": "clip_cov", "kwargs": KWARGS["clip_cov"]}]}
    micro = {**suite, "train": {**suite["train"], "micro_batch_tokens": 1, "logprob_chunk_tokens": 5}}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("WORLD_SIZE", None)
    for name, data in (("plain", suite), ("micro", micro)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    runs = [[sys.executable, "-m", "gspo_bench.cli", "run", str(tmp_path / "plain.yaml"), "--out", str(tmp_path / "one")],
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "gspo_bench.cli",
             "run", str(tmp_path / "micro.yaml"), "--out", str(tmp_path / "two")]]
    for args in runs:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for run in ("grpo_rr-s0", "clip_cov-s0"):  # clip_cov: coupled (a no-grad pass first) and drawing
        one = metrics(tmp_path / "one", "dist", run).drop(columns=TIME_COLUMNS)
        two = metrics(tmp_path / "two", "dist", run).drop(columns=TIME_COLUMNS)
        assert list(one.columns) == list(two.columns) and len(one) == len(two) == 2
        # sharded generation may route a near-tie otherwise (test_distributed); float-noise figures at 1e-5;
        # the sampler-vs-learner lag figures are the same comparisons (lag/route_diff is moe/rollout_gap_expert)
        loose = [c for c in one.columns if c.startswith(("moe/rollout_gap", "mismatch/", "floor/logp_", "lag/route_diff",
                                                          "lag/k3_response", "lag/ess"))]
        # the margins' change over an update summarises each token's top-2 gap, which float noise in the
        # micro-batched sums moves more than the means (measured, pinned kernels: GRPO-RR's moe/dmargin_abs
        # 2.1e-4 relative, the same on the CI machine)
        margins = [c for c in one.columns if c.startswith(MARGIN_COLUMNS)]
        cosines = [c for c in one.columns if c.startswith("grad/cos_prev")]  # absolute float noise near 0, as above
        numeric = one.drop(columns=loose + margins + cosines).select_dtypes("number").columns
        pd.testing.assert_frame_equal(one[numeric], two[numeric], rtol=1e-4, atol=1e-6)
        pd.testing.assert_frame_equal(one[cosines], two[cosines], rtol=0, atol=1e-5)
        pd.testing.assert_frame_equal(one[margins], two[margins], rtol=1e-2, atol=1e-4)
        pd.testing.assert_frame_equal(one[loose], two[loose], rtol=0, atol=0.02)
        assert one["grad/norm"].gt(0).any()
