"""`make gpu-check` (experiments/gpu_check/): its CPU rehearsal runs every part's set-up, run, parsing
and table-writing on a tiny model without CUDA, so that the first call on a GPU does not fail on a
typo; the table's readers are checked on hand-made outputs, figure for figure."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.scripts import script

HERE = Path(__file__).resolve().parent
CHECK = HERE.parent / "experiments" / "gpu_check"
check_table = script("gpu_check/check_table.py")
gpu_check = script("gpu_check/run.py")


def read_csv(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """One dry run of every part (the tiny model on the CPU): ~1 minute of CPU, mostly seven processes'
    imports of torch and transformers; each part's own work takes seconds."""
    out = tmp_path_factory.mktemp("gpu-check")
    env = {key: value for key, value in os.environ.items() if key not in ("OUT", "WORLD_SIZE", "RANK")}
    done = subprocess.run([sys.executable, str(CHECK / "run.py"), "--dry", "--out", str(out)],
                          env=env | {"OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_rehearsal_finishes_every_part_and_tables_its_measures(rehearsal):
    statuses = read_csv(rehearsal / "status.csv")
    assert [(s["part"], s["status"]) for s in statuses] == [(part, "done") for part in gpu_check.LIMITS]
    rows = {(r["part"], r["measure"]): r for r in read_csv(rehearsal / "gpu-check.csv")}
    tests = [rows[("tests", measure)] for measure in ("gpu-marked tests passed", "skipped", "failed or errors")]
    assert [t["value"] for t in tests] == ["0", tests[0]["note"].removeprefix("of "), "0"]  # all skipped: no CUDA
    assert int(tests[1]["value"]) >= 6  # the gpu-marked tests of test_gpu_path, test_router_noise, ...
    for measure in ("  rollout", "  old-policy pass", "  updates", "  measurements", "ours / TRL"):
        assert float(rows[("mid", measure)]["value"]) > 0, measure
    for shape in ("granite", "olmoe"):
        assert float(rows[(shape, "planned peak")]["value"]) > 0
        assert {(shape, f"{phase}: plan / measured peak") for phase in ("rollout", "update", "step")} <= set(rows)
    assert rows[("fsdp", "FSDP2 step 1 equals the single-process step")]["value"] == "yes"
    assert rows[("fsdp", "FSDP2 steps equal the single-process steps")]["value"] == "yes"
    assert "gloo, world size 1, DTensor parameters True" in rows[("fsdp", "torchrun: s per step")]["note"]
    assert {("stability", f"{label}: projected cell") for label in ("grpo", "gspo")} <= set(rows)
    assert "| stability | done |" in (rehearsal / "gpu-check.md").read_text()


@pytest.mark.slow
def test_the_rehearsal_brings_back_small_files_only(rehearsal):
    files = [p for p in rehearsal.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 2_000_000
    assert not [p for p in files if p.suffix in (".safetensors", ".pt", ".bin")]
    assert {"gpu-tests.xml", "fsdp-single.parquet", "fsdp-torchrun.parquet", "mid.json"} <= {p.name for p in files}


# ---------------------------------------------------------------------------- the readers, by hand
def write_progress(raw: Path, part: str, **data) -> None:
    raw.mkdir(parents=True, exist_ok=True)
    (raw / f"{part}.json").write_text(json.dumps({"part": part, "stage": "done", "done": True, **data}))


def phases(rollout: float, old: float, update: float, peak: float) -> dict:
    return {"rollout_s": rollout, "old_pass_s": old, "phase_update_s": update, "update_s": update,
            "rollout_peak_gib": peak, "old_pass_peak_gib": peak / 2, "update_peak_gib": peak + 1}


def test_mid_reads_medians_tokens_per_second_and_the_ratio_to_trl(tmp_path):
    ours = [phases(1.0, 0.2, 0.5, 30.0) | {"step_s": 2.0, "measure_s": 0.1, "mfu": 0.03},
            phases(1.2, 0.2, 0.7, 31.0) | {"step_s": 2.4, "measure_s": 0.3, "mfu": 0.02},
            phases(1.1, 0.3, 0.6, 29.0) | {"step_s": 2.2, "measure_s": 0.2, "mfu": 0.025}]
    setting = {"prompts": 32, "group": 8, "max_new_tokens": 128, "minibatches": 4, "device": "cuda", "dtype": "bfloat16"}
    write_progress(tmp_path, "mid", setting=setting, ours=ours, trl=[{"step_s": 9.0}, {"step_s": 11.0}])
    rows = {r.measure: r.value for r in check_table.parse_mid(tmp_path, "mid")}
    assert rows["gspo-bench: RL step"] == 2.2 and rows["  old-policy pass"] == 0.2 and rows["  updates"] == 0.6
    assert rows["  measurements"] == 0.2 and rows["gspo-bench: MFU"] == 0.025
    assert rows["gspo-bench: response tokens/s"] == pytest.approx(32 * 8 * 128 / 2.2)
    assert rows["gspo-bench: rollout tokens/s"] == pytest.approx(32 * 8 * 128 / 1.1)
    assert rows["gspo-bench: peak memory"] == 32.0  # the largest phase of any step: the update of step 2
    assert rows["TRL GRPOTrainer: RL step"] == 10.0 and rows["ours / TRL"] == pytest.approx(0.22)


def test_mid_cut_short_after_our_steps_keeps_them_without_trl(tmp_path):
    setting = {"prompts": 2, "group": 2, "max_new_tokens": 4, "minibatches": 2, "device": "cpu", "dtype": "float32"}
    write_progress(tmp_path, "mid", setting=setting, ours=[phases(1, 1, 1, 1) | {"step_s": 3, "measure_s": 0, "mfu": 0}])
    measures = [r.measure for r in check_table.parse_mid(tmp_path, "mid")]
    assert "gspo-bench: RL step" in measures and not [m for m in measures if "TRL" in m]


def test_a_shape_compares_each_phase_with_the_plan_terms_it_holds(tmp_path):
    gib = 2**30
    plan = {"state": 20 * gib, "rollout_copy": 2 * gib, "engine": 0, "kv_cache": 6 * gib, "activations": 10 * gib,
            "logits": 2 * gib, "peak": 34 * gib, "params_total": 1.33e9, "fits": True, "gpu_memory_gb": 80,
            "batching": {"micro_rows": 15, "length": 530}}
    step = {"rollout_peak_gib": 25.0, "old_pass_peak_gib": 26.0, "update_peak_gib": 40.0, "rollout_s": 9.0,
            "update_s": 5.0, "step_s": 15.0}
    write_progress(tmp_path, "granite", plan=plan, steps=[step | {"update_peak_gib": 99.0}, step])
    rows = {r.measure: r.value for r in check_table.parse_shape(tmp_path, "granite")}
    assert rows["planned peak"] == 34.0
    assert rows["rollout: plan / measured peak"] == pytest.approx(28 / 25)  # state + copy + KV cache
    assert rows["update: plan / measured peak"] == pytest.approx(34 / 40)  # state + copy + activations + logits
    assert rows["step: plan / measured peak"] == pytest.approx(34 / 40)  # the last step's, not the first's 99
    assert rows["old-policy pass: measured peak"] == 26.0


def test_fsdp_equality_ignores_timings_and_catches_a_metric_apart():
    one = pd.DataFrame({"step": [1, 2], "loss": [0.5, 0.25], "time/step_s": [1.0, 2.0], "reward/mean": [0.0, float("nan")]})
    two = one.assign(**{"time/step_s": [9.0, 9.0]})
    assert check_table.fsdp_difference(one, two)[0] == 0
    rel, gap, column = check_table.fsdp_difference(one, two.assign(loss=[0.5, 0.25 * (1 + 1e-3)]))
    assert column == "loss" and rel > check_table.FSDP_RTOL and gap == pytest.approx(0.25e-3)
    assert check_table.fsdp_difference(one, two.assign(**{"reward/mean": [0.0, 1.0]}))[2] == "reward/mean"


def test_fsdp_says_which_steps_equal_and_refuses_a_run_that_was_not_sharded(tmp_path):
    one = pd.DataFrame({"step": [1, 2], "loss": [0.5, 0.25], "time/step_s": [1.0, 2.0]})
    one.to_parquet(tmp_path / "fsdp-single.parquet")
    one.assign(loss=[0.5, 0.3]).to_parquet(tmp_path / "fsdp-torchrun.parquet")
    world = {"process_group": True, "backend": "nccl", "world_size": 1, "dtensor_parameters": True}
    write_progress(tmp_path, "fsdp", single=world | {"process_group": False, "backend": None}, torchrun=world)
    rows = {r.measure: r.value for r in check_table.parse_fsdp(tmp_path, "fsdp")}
    assert rows["FSDP2 step 1 equals the single-process step"] == "yes"
    assert rows["FSDP2 steps equal the single-process steps"] == "no" and rows["single: s per step"] == 2.0
    write_progress(tmp_path, "fsdp", single=world, torchrun=world | {"dtensor_parameters": False})
    with pytest.raises(ValueError, match="not sharded"):
        check_table.parse_fsdp(tmp_path, "fsdp")


def test_the_stability_cell_is_projected_from_the_steps_after_the_first(tmp_path):
    write_progress(tmp_path, "stability", runs={"grpo": {"step_s": [30.0, 2.0, 4.0], "eval_s": [6.0, 6.0]}})
    rows = {r.measure: r.value for r in check_table.parse_stability(tmp_path, "stability")}
    assert rows["grpo: s per step"] == 3.0
    assert rows["grpo: projected cell"] == pytest.approx(3 * (81 * 3.0 + 5 * 6.0) / 60)


def test_the_tests_part_counts_the_junit_outcomes(tmp_path):
    (tmp_path / "gpu-tests.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="4" failures="1" errors="0" skipped="1" time="3.5">'
        '<testcase classname="tests.test_a" name="test_ok"/><testcase classname="tests.test_a" name="test_bad">'
        '<failure message="x"/></testcase></testsuite></testsuites>')
    rows = {r.measure: r for r in check_table.parse_tests(tmp_path, "tests")}
    assert rows["gpu-marked tests passed"].value == 2 and rows["skipped"].value == 1
    assert rows["failed or errors"].value == 1 and rows["failed or errors"].note == "tests.test_a::test_bad"


def test_a_part_whose_outputs_cannot_be_read_is_an_error(tmp_path):
    write_progress(tmp_path, "mid", setting={}, ours=[{}])
    rows, status = gpu_check.parsed("mid", tmp_path, check_table.Status("mid", "done", 1.0, "done"))
    assert rows == [] and status.status == "error" and "KeyError" in status.note


def test_a_part_past_its_limit_is_killed_and_says_how_far_it_got(tmp_path):
    status = gpu_check.run_part("env", 0.2, tmp_path, tmp_path / "work", dry=True, env=dict(os.environ))
    assert status.status == "timed out" and status.stage in ("not started", "starting") and status.seconds < 5
