"""The stress pilot's scripts (experiments/stress_pilot/): the chain baseline and the run table."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gspo_bench.tasks import Example, make_task
from tests.helpers.scripts import script

allowed_ops, expected_reward, sample_response = (getattr(script("stress_pilot/chain_baseline.py"), name) for name in
                                                 ("allowed_ops", "expected_reward", "sample_response"))


def chain_example(start: int, ops: list[tuple[str, int]]) -> Example:
    values, value = [], start
    for op, b in ops:
        value = value + b if op == "+" else value - b
        values.append(value)
    return Example(prompt="", answer="", meta={"start": start, "ops": ops, "values": values})


def test_the_random_operation_policy_picks_among_the_operations_that_stay_in_range():
    assert allowed_ops(0, 2, 4) == [("+", 1), ("+", 2)]
    assert allowed_ops(1, 2, 4) == [("+", 1), ("+", 2), ("-", 1)]
    assert allowed_ops(4, 2, 4) == [("-", 1), ("-", 2)]


def test_the_exact_baseline_carries_the_policys_own_value_from_step_to_step():
    # max_operand 1, max_value 2, start 0: step 1 has one allowed op (+1, right surely); at 1 the
    # policy picks +1 or -1, so step 2 (-1) is right with 1/2: (1 + 1/2) / 2
    assert expected_reward(chain_example(0, [("+", 1), ("-", 1)]), 1, 2) == pytest.approx(0.75)
    # max_operand 2, max_value 4, start 0: step 1 (+2) right with 1/2 (of +1, +2); the policy is then
    # at 1 or 2 (1/2 each), where -1 is one of 3 and of 4 ops: (1/2 + (1/3 + 1/4) / 2) / 2 = 19/48
    assert expected_reward(chain_example(0, [("+", 2), ("-", 1)]), 2, 4) == pytest.approx(19 / 48)


def test_a_sampled_baseline_response_is_well_formed_and_scored_by_the_task():
    task = make_task("chain", steps=3, max_operand=1, max_value=2)
    example = chain_example(0, [("+", 1), ("+", 1), ("-", 1)])
    rng = random.Random(0)
    responses = {sample_response(example, 1, 2, rng) for _ in range(40)}
    # from 0 only +1; from 1 either way; from 0 or 2 the one op that stays in 0..2
    assert responses == {"0+1=1;1+1=2;2-1=1", "0+1=1;1-1=0;0+1=1"}
    assert sorted(task.reward(r, example) for r in responses) == [pytest.approx(1 / 3), 1.0]


def fake_run(root: Path, name: str, seed: int, rewards: list[float], evals: list[tuple[int, float]],
             step_s: list[float], overrides: dict, stderr: float = 0.03, warm_start: dict | None = None) -> None:
    import json

    import pandas as pd
    import yaml

    run = root / "stress_pilot" / name
    run.mkdir(parents=True)
    suite = {"warm_start": warm_start or {"seed": 1}, "train": {"minibatches": 8}}
    (run / "config.yaml").write_text(yaml.safe_dump({"run": {"seed": seed, "overrides": overrides}, "suite": suite}))
    steps = list(range(1, len(rewards) + 1))
    pd.DataFrame({"step": steps, "reward/mean": rewards, "response/len_mean": [150.0] * len(steps),
                  "time/step_s": step_s}).to_parquet(run / "metrics.parquet")
    pd.DataFrame({"step": [s for s, _ in evals], "score": [v for _, v in evals],
                  "stderr": [stderr] * len(evals), "time/eval_s": [10.0, 20.0][:len(evals)]}).to_parquet(run / "eval.parquet")
    times = {"start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:04:30+00:00"}
    (run / "provenance.json").write_text(json.dumps(times))
    (run / "status.json").write_text(json.dumps({"status": "done"}))


def test_the_pilot_table_reads_start_end_slope_evals_and_times_of_each_run(tmp_path):
    table = script("stress_pilot/table.py")
    runs_table, settings_table = table.runs_table, table.settings_table

    ramp = [0.1 + 0.01 * s for s in range(1, 13)]  # 12 steps: slope 1.0 per 100 steps
    fake_run(tmp_path / "a", "grpo-s0", 0, ramp, [(0, 0.30), (12, 0.42)], [1.0, 2.0, 3.0] * 4, {"train.lr": 0.001})
    fake_run(tmp_path / "a", "grpo-s1", 1, [0.5] * 12, [(0, 0.40), (12, 0.45)], [2.0] * 12, {"train.lr": 0.001},
             stderr=0.05)
    fake_run(tmp_path / "b", "grpo-s0", 0, [0.2] * 4, [(0, 0.30), (4, 0.25)], [4.0] * 4, {})
    runs = runs_table([tmp_path / "b", tmp_path / "a"])
    assert list(runs["setting"]) == ["b", "a", "a"] and list(runs["run"]) == ["grpo-s0", "grpo-s0", "grpo-s1"]
    first = runs.iloc[1]
    assert first["reward_first10"] == pytest.approx(0.1 + 0.01 * 5.5)  # steps 1-10
    assert first["reward_last25"] == pytest.approx(0.1 + 0.01 * 11)  # the last 3 of 12 steps
    assert first["reward_slope_per100"] == pytest.approx(1.0)
    assert (first["eval_start"], first["eval_end"], first["eval_s"], first["evals"]) == (0.30, 0.42, 15.0, 2)
    assert first["eval_rise"] == pytest.approx(0.12)
    # the report's gate: z = 0.12 / hypot(0.03, 0.03) = 2.83, one-sided p = 0.0023; the second run's
    # rise of 0.05 at se 0.05 each gives z = 0.707, p = 0.240: it rose but did not pass
    assert first["eval_p"] == pytest.approx(0.0023389, abs=2e-7)
    assert runs.iloc[2]["eval_p"] == pytest.approx(0.23975, abs=2e-5)
    assert first["step_s_median"] == 2.0 and first["step_s_p10"] == pytest.approx(1.0)
    assert (first["warm_start_seed"], first["updates"], first["wall_min"]) == (1, 96, 4.5)
    assert first["overrides"] == "train.lr=0.001"
    assert runs.iloc[0]["reward_last25"] == pytest.approx(0.2)  # 4 steps: the last one
    settings = settings_table(runs)
    assert list(settings["setting"]) == ["b", "a"]
    a = settings.iloc[1]
    assert a["runs"] == 2 and a["eval_rose"] == 2 and a["eval_passed"] == 1
    assert a["min_eval_rise"] == pytest.approx(0.05) and a["eval_rise"] == pytest.approx(0.085)
    assert settings.iloc[0]["eval_rose"] == 0 and settings.iloc[0]["eval_passed"] == 0
    assert settings.iloc[0]["eval_rise"] == pytest.approx(-0.05)
    # the warm start of a suite with warm_start.seeds: seeds[seed mod 2], not the RL seed
    fake_run(tmp_path / "c", "grpo-s3", 3, [0.2] * 4, [(0, 0.3), (4, 0.3)], [1.0] * 4, {}, warm_start={"seeds": [0, 1]})
    fake_run(tmp_path / "c", "grpo-s4", 4, [0.2] * 4, [(0, 0.3), (4, 0.3)], [1.0] * 4, {}, warm_start={"seeds": [0, 1]})
    assert list(runs_table([tmp_path / "c"])["warm_start_seed"]) == [1, 0]


def test_warm_start_curves_append_one_row_per_evaluation_under_one_header(tmp_path):
    import pandas as pd
    warm_start = script("stress_pilot/warm_start.py")
    append_rows, curve_rows = warm_start.append_rows, warm_start.curve_rows

    path = tmp_path / "curves.csv"
    append_rows(path, curve_rows("a", 0, [(0, 0.0, 20.04, 19.96), (100, 0.12345, 460.0, 150.0)], "x=1"))
    append_rows(path, curve_rows("b", 1, [(0, 0.05, 21.0, 20.0)], ""))
    table = pd.read_csv(path, keep_default_na=False)
    assert list(table["name"]) == ["a", "a", "b"] and list(table["step"]) == [0, 100, 0]
    assert list(table["accuracy"]) == [0.0, 0.1235, 0.05] and list(table["warm_start_seed"]) == [0, 0, 1]
    assert list(table["elapsed_s"]) == [20.0, 460.0, 21.0] and list(table["cpu_s"]) == [20.0, 150.0, 20.0]
    assert list(table["overrides"]) == ["x=1", "x=1", ""]


def test_the_stress_reading_tests_each_runs_held_out_rise_as_the_gate_does_and_counts_the_seeds_per_arm():
    import pandas as pd

    reading = script("stress_reading.py")
    arm_summary, held_out = reading.arm_summary, reading.held_out

    # seed 0 rises 0.10 at se 0.02 each (z 3.54, p 0.0002); seed 1 rises 0.02 (z 0.707, p 0.240)
    evals = pd.DataFrame({"label": ["a"] * 4, "seed": [0, 0, 1, 1], "step": [20, 0, 0, 20],
                          "score": [0.60, 0.50, 0.50, 0.52], "stderr": [0.02] * 4})
    runs = held_out(evals)
    assert list(runs["seed"]) == [0, 1] and list(runs["start"]) == [0.50, 0.50] and list(runs["end"]) == [0.60, 0.52]
    assert list(runs["p"]) == [pytest.approx(2.0e-4, abs=1e-5), pytest.approx(0.23975, abs=1e-4)]
    metrics = pd.DataFrame({"label": ["a"] * 2, "clip/frac": [0.1, 0.3], "moe/rollout_gap": [0.2, 0.4],
                            "ratio/token_gt_10": [2, 1], "ratio/token_gt_100": [1, 0], "ratio/token_gt_1000": [0, 0],
                            "moe/drift_expert_1": [0.01, 0.03], "moe/drift_1": [0.02, 0.04]})
    arm = arm_summary(runs, metrics).loc["a"]
    assert (arm["rose"], arm["seeds"], arm["gt_10"], arm["gt_100"]) == (1, 2, 3, 1)
    assert arm["end"] == pytest.approx(0.56) and arm["clip"] == pytest.approx(0.2) and arm["gap_median"] == pytest.approx(0.3)
