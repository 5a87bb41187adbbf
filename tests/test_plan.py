"""The dry run's plan: memory by hand on small cases, the fit against one GPU, proposals, FLOPs against
a real run's own compute columns, and the real-shape suites fitting their GPUs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.config import load_suite, parse_suite
from gspo_bench.models.tiny import TinyMoESpec, tiny_config
from gspo_bench.suite.plan import (
    GIB,
    Fit,
    MemoryPlan,
    Shapes,
    memory_plan,
    plan_suite,
    plan_vs_peak,
    propose,
    step_compute,
    with_changes,
)
from gspo_bench.train.compute import StepCompute
from tests.helpers.runs import metrics, run_suite, tiny_suite

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
N = 1000  # parameters of the hand cases


def suite(train: dict | None = None, rollout: dict | None = None, **model):
    """2 layers, H = 32, 4 experts of width 32 at top-2, 4 heads of 8 with 2 KV heads; P G = 2 x 4 = 8
    responses of T = 8 tokens, K = 2 minibatches of 4 rows."""
    return parse_suite({"name": "small", "task": {"name": "sort", "params": {"max_len": 3}},
                        "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4,
                                  "top_k": 2, **model},
                        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8, **(rollout or {})},
                        "train": {"minibatches": 2, **(train or {})}, "warm_start": {"enabled": False},
                        "budget": {"kind": "steps", "value": 1}, "objectives": [{"name": "grpo"}]})


SHAPES = Shapes.of(tiny_config(TinyMoESpec(num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4, top_k=2,
                                           vocab_size=57)), [(2, 32)] * 2, N)
PER_TOKEN = 2 * 52 * 32 + 2 * 2 * (2 * 32 + 4 * 32) * 4  # L a H + per MoE layer k (2H + 4I) e = 6,400 (fp32)
KV_PER_TOKEN = 2 * 2 * 2 * 8 * 4  # 2 L n_kv d_head, fp32: 256 bytes


def test_memory_by_hand_with_a_prompt_of_three_tokens():
    """S = 3 + 8 = 11 tokens per row; b = 4 rows; V = 57."""
    plan = memory_plan(suite(), SHAPES, prompt_width=3)
    assert plan.state == 16 * N
    assert plan.activations == 4 * 11 * PER_TOKEN == 281_600
    assert plan.logits == 2 * 4 * 8 * 57 * 4 + 2 * 32 * 57 * 4 == 29_184  # logits + their gradient + 2 fp32 chunks
    assert plan.kv_cache == 8 * 11 * KV_PER_TOKEN == 22_528  # all 8 rows at full length
    assert plan.rollout_copy == 0 and plan.engine == 0  # fp32, CPU
    assert plan.peak == 16 * N + 281_600 + 29_184


def test_checkpointing_keeps_one_hidden_state_per_layer_and_one_layer():
    plan = memory_plan(suite({"activation_checkpointing": True}), SHAPES, prompt_width=3)
    one_layer = 52 * 32 + 2 * (2 * 32 + 4 * 32) * 4  # 3,200
    per_token = 2 * 4 * 32 + 2 * 8 * 2 + one_layer  # fp32 residual per layer + int64 ids per MoE layer + one layer
    assert plan.activations == 44 * per_token == 44 * 3_488


def test_micro_batches_chunked_head_and_row_chunks():
    micro = memory_plan(suite({"micro_batch_tokens": 22}), SHAPES, prompt_width=3)  # 22 // 11 = 2 rows
    assert micro.activations == 2 * 11 * PER_TOKEN and micro.logits == 2 * 16 * 57 * 4 + 2 * 16 * 57 * 4
    assert memory_plan(suite({"micro_batch_tokens": 5}), SHAPES, 3).activations == 11 * PER_TOKEN  # one row at least
    head = memory_plan(suite({"logprob_chunk_tokens": 10}), SHAPES, prompt_width=3)
    assert head.logits == 10 * 57 * (2 * 4 + 8)  # one chunk: logits, gradient, fp32 copy, softmax
    budget = 3 * 11 * KV_PER_TOKEN / GIB  # three rows' cache
    assert memory_plan(suite(rollout={"kv_cache_gib": budget}), SHAPES, 3).kv_cache == 3 * 11 * KV_PER_TOKEN


def test_rows_round_up_and_ranks_share_them():
    odd = memory_plan(suite({"minibatches": 4}, {"group_size": 5}), SHAPES, prompt_width=0)  # 10 rows / 4: 3, 3, 2, 2
    assert odd.activations == 3 * 8 * PER_TOKEN
    two = memory_plan(suite(), SHAPES, prompt_width=0, ranks=2)
    assert two.state == 8 * N and two.activations == 2 * 8 * PER_TOKEN and two.kv_cache == 4 * 8 * KV_PER_TOKEN


def test_the_rollout_copy_only_where_the_engine_makes_one_and_8bit_moments():
    bf16 = {"dtype": "bfloat16"}
    assert memory_plan(suite(bf16), SHAPES).rollout_copy == 0  # CPU: sampled under autocast, no copy
    cuda = memory_plan(suite(bf16 | {"device": "cuda"}), SHAPES)
    assert cuda.rollout_copy == 2 * N and cuda.kv_cache == 8 * 8 * KV_PER_TOKEN // 2
    assert memory_plan(suite(bf16 | {"device": "cuda"}), SHAPES, ranks=2).rollout_copy == 0  # FSDP2
    assert memory_plan(suite(bf16 | {"device": "cuda"}, {"engine_options": {"copy_weights": False}}),
                       SHAPES).rollout_copy == 0
    # weights 4 + grads 4 + two 8-bit moments with an fp32 scale per 256: 10.03125 bytes, rounded up
    assert memory_plan(suite({"optimizer": "adamw8bit"}), SHAPES).state == 10_032


def test_a_kl_penalty_adds_a_frozen_reference_and_a_forward_pass():
    """kl_coef > 0: a reference in the compute dtype (fp32: 4 N bytes, bf16: 2 N) and one more no-grad
    forward of every token: 3 passes of the step's 8 x 8 response tokens, not 2."""
    kl = suite({"kl_coef": 0.1})
    assert memory_plan(kl, SHAPES).state == 20 * N and memory_plan(suite(), SHAPES).state == 16 * N
    assert memory_plan(suite({"kl_coef": 0.1, "dtype": "bfloat16"}), SHAPES).state == 18 * N
    assert step_compute(kl, 0) == StepCompute(tokens_forward=3 * 64, tokens_trained=64)
    assert step_compute(suite(), 0) == StepCompute(tokens_forward=2 * 64, tokens_trained=64)


def test_a_log_prob_chunk_longer_than_the_micro_batch_holds_its_positions_only():
    """logprob_chunk_tokens 1000 against a micro-batch of 4 rows x 8 response positions: one chunk of 32."""
    head = memory_plan(suite({"logprob_chunk_tokens": 1000}), SHAPES, prompt_width=3)
    assert head.logits == 32 * 57 * (2 * 4 + 8)


def test_the_fit_leaves_ten_percent_free():
    assert Fit(gpu_bytes=100, peak=90).fits and not Fit(gpu_bytes=100, peak=91).fits
    assert Fit(gpu_bytes=200, peak=150).headroom == 0.25
    assert MemoryPlan(state=10, activations=1, logits=2, kv_cache=50, rollout_copy=4, engine=6).peak == 70


def test_a_plan_that_does_not_fit_gets_the_cheapest_settings_that_do():
    """One GPU of 330 kB: the state (16 kB) and 22.5 kB of KV cache leave room for micro-batches of
    two rows (140.8 kB of activations), not four (281.6 kB)."""
    small = suite({"gpu_memory_gb": 330e-6})
    assert not Fit(round(330e3), memory_plan(small, SHAPES, 3).peak).fits
    changes = propose(small, SHAPES, width=3)
    assert changes == [("train.micro_batch_tokens", 32)]  # 32 // 11 = 2 rows
    fixed = memory_plan(with_changes(small, changes), SHAPES, 3)
    assert fixed.peak == 16 * N + 2 * 11 * PER_TOKEN + 2 * (2 * 16 * 57 * 4)
    assert propose(suite({"gpu_memory_gb": 1e-6}), SHAPES, width=3) is None  # 1 kB: not even the state


# ---------------------------------------------------------------------------- FLOPs against a real run
@pytest.mark.parametrize("minibatches, drift_after", [(1, False), (2, False), (2, True)])
def test_planned_flops_equal_the_runs_own_compute_columns(tmp_path, minibatches, drift_after):
    """Fixed-length responses and the first step's own prompts: the plan's FLOPs are the run's, also
    with one minibatch (the loop then makes the drift-after pass) and with drift_after_update."""
    data = tiny_suite(tmp_path / "cache", warm_start={"enabled": False}, budget={"kind": "steps", "value": 1},
                      objectives=[{"name": "grpo"}], rollout={"prompts_per_step": 2, "group_size": 4,
                                                             "max_new_tokens": 8, "ignore_eos": True},
                      train={"minibatches": minibatches, "drift_after_update": drift_after, "threads": 1})
    plan = plan_suite(parse_suite(data))
    run_suite(data, tmp_path / "out")
    row = metrics(tmp_path / "out", "tiny", "grpo-s0").iloc[0]
    assert plan.prompts == "the first step's prompts"
    assert plan.flops_per_step == row["compute/flops"]
    passes = 2 + (minibatches == 1 or drift_after)
    assert row["compute/tokens"] == (passes + 1) * (8 * 8 + plan.prompt_tokens_per_step)


def test_the_plan_counts_every_sweep_point_s_runs(tmp_path):
    """2 objectives x 1 seed x 3 sweep points: 6 runs, and the whole suite's FLOPs are 6 runs' worth."""
    data = tiny_suite(tmp_path / "cache", warm_start={"enabled": False}, objectives=[{"name": "grpo"}, {"name": "gspo"}],
                      sweep={"train.lr": [1e-3, 2e-3, 3e-3]})
    plan = plan_suite(parse_suite(data))
    assert plan.runs == 6 and plan.flops_total == plan.flops_per_step * plan.steps_per_run * 6


# ---------------------------------------------------------------------------- real shapes
@pytest.mark.parametrize("name, gb", [("granite_1b.yaml", 80), ("olmoe_1b_7b.yaml", 141)])
def test_the_real_shape_suites_fit_their_gpu_with_ten_percent_free(name, gb):
    plan = plan_suite(load_suite(EXPERIMENTS / name))
    assert plan.fit.gpu_bytes == gb * 10**9 and plan.fit.fits and plan.fit.headroom >= 0.10
    assert plan.prompts == "rollout.max_prompt_tokens (upper bound)"


def test_granite_is_the_smallest_open_moe_and_olmoe_unsplit_gets_a_proposal():
    granite = plan_suite(load_suite(EXPERIMENTS / "granite_1b.yaml"))
    assert 1.3e9 < granite.params_total < 1.4e9 and 0.35e9 < granite.params_active < 0.42e9  # "1.3 B, 0.4 B active"
    suite_ = load_suite(EXPERIMENTS / "olmoe_1b_7b.yaml")
    plain = with_changes(suite_, [("train.optimizer", "adamw"), ("train.activation_checkpointing", False),
                                  ("train.micro_batch_tokens", None), ("train.logprob_chunk_tokens", None),
                                  ("rollout.kv_cache_gib", None)])
    plan = plan_suite(plain)
    assert not plan.fit.fits and plan.memory.activations > 400 * GIB
    assert plan.proposal.found and plan.proposal.peak <= 0.9 * plan.fit.gpu_bytes


def test_dry_run_prints_the_fit_and_the_proposal(tmp_path):
    for name, verdict in (("granite_1b.yaml", "fits: peak"), ("qwen3_30b_a3b.yaml", "does not fit")):
        result = CliRunner().invoke(app, ["run", str(EXPERIMENTS / name), "--dry-run"])
        assert result.exit_code == 0, result.output
        assert verdict in result.output and "one GPU of" in result.output
    result = CliRunner().invoke(app, ["run", str(EXPERIMENTS / "granite_1b.yaml"), "--dry-run",
                                      "--set", "train.micro_batch_tokens=null"])
    assert "does not fit" in result.output and "--set train.micro_batch_tokens=" in result.output


def test_step_one_prints_the_plan_beside_the_measured_peak():
    memory = MemoryPlan(state=18 * GIB, activations=20 * GIB, logits=GIB // 2, kv_cache=GIB // 4)
    assert plan_vs_peak(memory, 40.04) == ("GPU memory at step 1: measured peak 40.0 GiB; planned 38.5 GiB = state "
                                           "18.0 + activations 20.0 + logits 0.50 (KV cache 0.25)")


def test_whole_suite_flops_count_every_run_and_compute_alone_makes_plans_differ():
    """Two runs on the suite's plan (F FLOPs per step) and three on one with the same memory and 2 F: the
    plans differ, and the whole suite takes (2 F + 3 x 2 F) steps, not (F + 2 F) steps."""
    from gspo_bench.suite.plan import RunsPlan, group_rows, runs_differ, suite_flops

    base = plan_suite(suite())
    double = dataclasses.replace(base, flops_per_step=2 * base.flops_per_step)
    groups = [RunsPlan(("a-s0", "a-s1"), base), RunsPlan(("b-s0", "b-s1", "b-s2"), double)]
    assert double.memory == base.memory and runs_differ(groups)
    assert not runs_differ([groups[0], RunsPlan(("c-s0",), base)])
    total = (2 + 3 * 2) * base.flops_per_step * base.steps_per_run
    assert suite_flops(base, groups) == f"{total:.3g} (summed over the runs' own plans below)"
    assert [name for name, _ in group_rows(groups)] == ["a-s0, a-s1", "b-s0, b-s1, b-s2"]


def test_the_dry_run_plans_each_arm_whose_set_changes_its_runs_shapes(tmp_path):
    """An arm that doubles max_new_tokens (`set:`) gets its own peak and FLOPs per step, and the whole
    suite's FLOPs are the sum of the runs' own; a sweep over lr alone changes no plan: no extra rows."""
    import yaml

    from gspo_bench.suite.plan import plan_rows, plans_by_suite, runs_differ
    from gspo_bench.suite.runner import plan_runs

    data = tiny_suite(tmp_path / "cache", warm_start={"enabled": False}, budget={"kind": "steps", "value": 3},
                      objectives=[{"name": "grpo"}, {"name": "grpo", "label": "long",
                                                     "set": {"rollout.max_new_tokens": 64}}])
    data["rollout"]["max_new_tokens"] = 32
    suite_ = parse_suite(data)
    runs = plan_runs(suite_, tmp_path / "out")
    groups = plans_by_suite([(run.name, run.suite) for run in runs])
    assert [g.names for g in groups] == [("grpo-s0",), ("long-s0",)] and runs_differ(groups)
    short, long_ = (g.plan for g in groups)
    assert long_.memory.peak > short.memory.peak and long_.flops_per_step > short.flops_per_step
    rows = dict(plan_rows(suite_, plan_suite(suite_), [run.name for run in runs], groups))
    assert rows["FLOPs, whole suite"].startswith(f"{3 * (short.flops_per_step + long_.flops_per_step):.3g} ")
    assert rows["long-s0"].startswith(f"peak {long_.memory.peak / GIB:,.1f} GiB (fits one GPU), "
                                      f"{long_.flops_per_step:.3g} FLOPs per step, >= 3 steps")
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
    assert result.exit_code == 0 and "long-s0" in result.output.split("runs")[-1] and "FLOPs per step, >=" in result.output
    swept = parse_suite({**data, "objectives": [{"name": "grpo"}], "sweep": {"train.lr": [1e-3, 2e-3]}})
    groups = plans_by_suite([(run.name, run.suite) for run in plan_runs(swept, tmp_path / "out")])
    assert len(groups) == 2 and not runs_differ(groups)
    assert dict(plan_rows(swept, plan_suite(swept), [], groups))["FLOPs, whole suite"] == \
        f"{plan_suite(swept).flops_total:.3g}"


def dry_run_rows(output: str) -> dict[str, str]:
    """The dry run's table as {what: how much} (a row's first line)."""
    cells = [line.split("│") for line in output.splitlines()]
    return {row[1].strip(): row[2].strip() for row in cells if len(row) == 4 and row[1].strip()}


def test_the_dry_run_plans_only_the_runs_only_and_seeds_select(tmp_path):
    """`run --dry-run --only gspo --seeds 1` plans what `run` would do with them: the runs row lists gspo-s1
    alone, and the suite's FLOPs are that one run's; a label the suite lacks is one error line, as in `run`."""
    import yaml

    data = tiny_suite(tmp_path / "cache", warm_start={"enabled": False}, budget={"kind": "steps", "value": 3},
                      seeds=[0, 1])
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data))
    per_run = plan_suite(parse_suite(data)).flops_per_step * 3
    whole = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
    assert whole.exit_code == 0 and dry_run_rows(whole.output)["FLOPs, whole suite"] == f"{6 * per_run:.3g}"
    chosen = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--only", "gspo", "--seeds", "1"])
    assert chosen.exit_code == 0, chosen.output
    rows = dry_run_rows(chosen.output)
    assert rows["runs"] == "1: gspo-s1" and rows["FLOPs, whole suite"] == f"{per_run:.3g}"
    assert "--only gspo --seeds 1" in " ".join(chosen.output.split())  # the title wraps where the path is long
    two = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--only", "grpo", "--only", "gspo"])
    assert dry_run_rows(two.output)["runs"] == "4: grpo-s0, gspo-s0, grpo-s1, gspo-s1"
    unknown = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--only", "sapo"])
    assert unknown.exit_code == 2 and "error: --only sapo: no such label in the suite" in unknown.output
