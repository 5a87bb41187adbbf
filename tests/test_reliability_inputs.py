"""Reliability of what a user types: run folders that cannot leave --out whatever a label holds, labels
that collide refused, results of different suites never pooled, regress against its own suite with the
package's tolerances from any directory, NaN/inf settings refused, and the messages of an empty
dataset split and of a dead --parallel worker."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import queue
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from analysis.data.load import load_results
from analysis.data.suites import suite_differences, suite_settings
from gspo_bench.config import SuiteConfig, dump_config, load_suite
from gspo_bench.rundir.folder import REQUIRED_COLUMNS, RunDir
from gspo_bench.rundir.names import MAX_NAME, folder_name, is_folder_name, run_folder_name

sys.path.insert(0, str(Path(__file__).parent))
from test_harness import tiny_suite  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def write_suite(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    text = result.output.strip()
    assert "Traceback" not in text and text.startswith("error:") and "\n" not in text, text
    return text


def every_path(root: Path) -> list[Path]:
    return [Path(dirpath) / name for dirpath, dirs, files in os.walk(root) for name in dirs + files]


# ------------------------------------------------------------------ 1. a sweep value never becomes a path

@given(st.text(max_size=300))
def test_a_folder_name_is_one_safe_path_component_whatever_the_text(text):
    name = folder_name(text)
    assert "/" not in name and "\\" not in name and "\0" not in name and ".." not in name
    assert not name.startswith(".") and len(name) <= MAX_NAME and name.isascii()
    assert Path(name).name == name or name == ""


@given(st.text(max_size=200), st.text(max_size=200))
def test_two_texts_never_share_a_folder_name(a, b):
    assert (folder_name(a) == folder_name(b)) == (a == b)


def test_plain_labels_keep_their_folder_names():
    assert run_folder_name("grpo@lr=0.0001,num_experts=64", 3) == "grpo@lr=0.0001,num_experts=64-s3"
    assert run_folder_name("a/b", 0) == "a%2Fb-s0" and folder_name("../x") == "%2E%2E%2Fx"


def cut_name(head: str, text: str) -> str:
    return f"{head}~{hashlib.sha256(text.encode()).hexdigest()[:16]}"


@pytest.mark.parametrize("k,head", [
    (99, "a" * 99 + "%2Fb"), (100, "a" * 100 + "%2F"),  # the escape whole in the kept part
    (101, "a" * 101), (102, "a" * 102),  # it would be cut after its '%2' or its '%': it goes whole
    (103, "a" * 103),
])
def test_a_cut_name_never_ends_inside_an_escape(k, head):
    """The kept part of a cut name is 120 - 16 - 1 = 103 characters, or fewer where the cut would
    split an escape; here '/' (%2F) sits at each position around the cut."""
    text = "a" * k + "/" + "b" * 200
    assert folder_name(text) == cut_name(head, text)


def test_names_at_the_length_limit():
    assert folder_name("x" * MAX_NAME) == "x" * MAX_NAME  # 120 characters: kept whole
    assert folder_name("x" * (MAX_NAME + 1)) == cut_name("x" * 103, "x" * (MAX_NAME + 1))
    assert folder_name("/" * 40) == "%2F" * 40  # 120 once escaped: whole
    assert folder_name("/" * 41) == cut_name("%2F" * 34, "/" * 41)  # the 35th escape would be cut: 119 characters


def test_a_tilde_is_escaped_so_no_label_takes_a_cut_names_name():
    assert folder_name("a~b") == "a%7Eb" and folder_name("~") == "%7E"
    long = "x" * 300
    cut = folder_name(long)
    assert len(cut) == MAX_NAME and "~" in cut
    assert folder_name(cut) != cut  # the cut name written as a label is a different folder
    assert not is_folder_name(cut)


def test_the_empty_name_is_no_folder_name():
    assert not is_folder_name("") and is_folder_name("a") and folder_name("") == ""
    with pytest.raises(ValueError, match="a suite name is a folder name"):
        SuiteConfig.model_validate({"name": "", "task": {"name": "sort"}, "budget": {"kind": "steps", "value": 1},
                                    "objectives": [{"name": "grpo"}]})


def test_a_swept_path_like_value_stays_in_the_suite_folder_and_report_finds_it(tmp_path, cli):
    values = ["../../../../ESCAPED", "be/brief"]
    data = tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}], warm_start={"enabled": False},
                      rollout={"chat_template": True}, budget={"kind": "steps", "value": 1},
                      sweep={"rollout.system_prompt": values})
    suite = write_suite(tmp_path / "s.yaml", data)
    assert cli("validate", suite).exit_code == 0
    out = tmp_path / "out" / "esc" / "inner"
    result = cli("run", suite, "--out", out)
    assert result.exit_code == 0, result.output
    assert all(p.is_relative_to(out / "tiny") for p in every_path(tmp_path / "out") if p not in out.parents
               and p != out), every_path(tmp_path / "out")
    runs = sorted(p.name for p in (out / "tiny").iterdir() if p.is_dir())
    assert runs == sorted(run_folder_name(f"grpo@system_prompt={v}", 0) for v in values)
    report = cli("report", out / "tiny", "--out", tmp_path / "report")
    assert report.exit_code == 0, report.output
    assert set(load_results(out / "tiny").runs["label"]) == {f"grpo@system_prompt={v}" for v in values}


# ------------------------------------------------------------------ 4. labels that collide

@pytest.mark.parametrize("values, shown", [
    ([1.0e-4, 1.000000001e-4], "sweep points 1 (train.lr=0.0001) and 2 (train.lr=0.0001000000001)"),
    ([1e-4, 1e-4], "sweep points 1 (train.lr=0.0001) and 2 (train.lr=0.0001)"),
])
def test_sweep_points_with_the_same_label_are_refused_naming_both(tmp_path, cli, values, shown):
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache", sweep={"train.lr": values}))
    for command in (["validate", suite], ["run", suite, "--out", tmp_path / "out"]):
        output = one_line_error(cli(*command))
        assert "s.yaml" in output and shown in output and "'grpo@lr=0.0001'" in output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("objectives, shown", [
    ([{"name": "grpo"}, {"name": "gspo", "label": "grpo"}], "objectives.0 (grpo) and objectives.1 (grpo)"),
    ([{"name": "grpo"}, {"name": "gspo", "label": "GRPO"}], "objectives.0 (grpo) and objectives.1 (GRPO)"),
])
def test_objective_entries_with_the_same_label_or_folder_are_refused_naming_both(tmp_path, cli, objectives, shown):
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache", objectives=objectives))
    output = one_line_error(cli("validate", suite))
    assert shown in output and "labels must be unique" in output


# ------------------------------------------------------------------ 7. results of different suites

def make_run(root: Path, suite: str, label: str, seed: int, lr: float = 1e-3, reward: float = 0.2) -> Path:
    """A finished run of suite `suite` with 8 steps of made-up metrics (reward rising from `reward`)."""
    run = RunDir(root / suite / f"{label}-s{seed}")
    rng = np.random.default_rng(seed)
    rows = [{**{c: float(rng.uniform(0.01, 0.2)) for c in REQUIRED_COLUMNS}, "step": step, "objective": label,
             "label": label, "seed": seed, "reward/mean": reward + 0.01 * step, "compute/cum_flops": 1e9 * step,
             "compute/cum_tokens": 100.0 * step} for step in range(1, 9)]
    run.write_rows("metrics.parquet", rows)
    config = {"run": {"label": label, "objective": label, "replay": False, "seed": seed},
              "suite": {"name": suite, "description": f"made up ({root.name})", "output_dir": str(root),
                        "train": {"lr": lr}, "budget": {"kind": "steps", "value": 8}}}
    run.write_text("config.yaml", yaml.safe_dump(config))
    run.write_status("done", step=8)
    return run.path


def test_report_shows_runs_of_two_suites_apart_and_never_pools_them(tmp_path, cli):
    make_run(tmp_path / "A", "alpha", "grpo", 0, reward=0.1)
    make_run(tmp_path / "B", "beta", "grpo", 0, reward=0.5)
    make_run(tmp_path / "B", "beta", "grpo", 1, reward=0.5)
    runs = load_results(tmp_path / "A" / "alpha", tmp_path / "B" / "beta").runs
    assert sorted(runs["label"]) == ["alpha/grpo", "beta/grpo", "beta/grpo"]
    result = cli("report", tmp_path / "A" / "alpha", tmp_path / "B" / "beta", "--out", tmp_path / "r",
                 "--allow-unmatched")
    assert result.exit_code == 0, result.output
    summary = (tmp_path / "r" / "report.md").read_text().split("## Summary per objective")[1].split("##")[0]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in summary.splitlines()
            if line.startswith("| ") and "/grpo" in line}
    assert rows == {"alpha/grpo": "1", "beta/grpo": "2"}  # seeds per label: nothing pooled across suites


def test_report_refuses_one_run_twice_and_one_suite_name_with_two_settings(tmp_path, cli):
    first = make_run(tmp_path / "A", "ci", "grpo", 0)
    output = one_line_error(cli("report", tmp_path / "A" / "ci", first, "--out", tmp_path / "r"))
    assert "the same run twice" in output and "seed 0" in output
    make_run(tmp_path / "B", "ci", "grpo", 1, lr=3e-3)
    output = one_line_error(cli("report", tmp_path / "A" / "ci", tmp_path / "B" / "ci", "--out", tmp_path / "r"))
    assert "two suites named ci" in output and "train.lr: 0.001 vs 0.003" in output
    make_run(tmp_path / "C", "ci", "grpo", 2)  # same name, same settings, another folder: one suite, pooled
    assert set(load_results(tmp_path / "A" / "ci", tmp_path / "C" / "ci").runs["label"]) == {"grpo"}


def test_regress_refuses_the_baseline_of_another_suite_naming_the_differences(tmp_path, cli):
    make_run(tmp_path / "base", "ci", "grpo", 0)
    make_run(tmp_path / "new", "quick", "grpo", 0, lr=3e-3)
    output = one_line_error(cli("regress", tmp_path / "new" / "quick", "--baseline", tmp_path / "base" / "ci"))
    assert "another suite" in output and "suite name quick vs baseline ci" in output
    assert "train.lr: 0.003 vs baseline 0.001" in output and "--allow-other-suite" in output
    allowed = cli("regress", tmp_path / "new" / "quick", "--baseline", tmp_path / "base" / "ci", "--allow-other-suite")
    assert allowed.exit_code in (0, 1) and "warning: the baseline is another suite" in allowed.output
    assert "regress" in allowed.output and "invariant: run finished" in allowed.output


def test_regress_finds_its_own_tolerances_from_any_directory(tmp_path, cli, monkeypatch):
    make_run(tmp_path / "base", "ci", "grpo", 0)
    make_run(tmp_path / "new", "ci", "grpo", 0)
    monkeypatch.chdir(tmp_path)  # no experiments/ here
    result = cli("regress", tmp_path / "new" / "ci", "--baseline", tmp_path / "base" / "ci")
    assert result.exit_code in (0, 1) and "final reward/mean" in result.output, result.output


def test_the_tolerances_ship_in_the_wheel_and_experiments_points_to_them(tmp_path):
    import shutil
    import subprocess
    import zipfile

    assert (ROOT / "experiments" / "regress_tolerances.yaml").resolve() == ROOT / "analysis" / "checks" / "regress_tolerances.yaml"
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info beside the sources
    for name in ("gspo_bench", "analysis"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(source)], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("gspo_bench-*.whl")
    assert "analysis/checks/regress_tolerances.yaml" in zipfile.ZipFile(wheel).namelist()


def test_the_committed_baseline_is_the_ci_suite():
    """`make regress` compares experiments/ci.yaml's runs with results/ci-baseline: the same suite."""
    ci = suite_settings(yaml.safe_load(dump_config(load_suite(ROOT / "experiments" / "ci.yaml"))))
    current = pd.DataFrame([{"suite": "ci", "label": label, "settings": ci} for label in
                            ("grpo", "grpo_rr", "gspo", "gspo_token")])
    assert suite_differences(current, load_results(ROOT / "results" / "ci-baseline").runs) == []


# ------------------------------------------------------------------ 8. an empty split, a dead worker (NaN/inf: tests/test_reliability_refusals.py)

def test_an_empty_test_split_of_an_hf_dataset_is_named(tmp_path, cli):
    data = tmp_path / "arith"
    data.mkdir()
    records = pd.DataFrame({"question": ["1+1", "2+2"], "answer": ["2", "4"]})
    records.to_parquet(data / "train-00000-of-00001.parquet")
    records.iloc[:0].to_parquet(data / "test-00000-of-00001.parquet")
    task = {"name": "hf_dataset", "params": {"path": str(data)}}
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache", task=task))
    output = one_line_error(cli("validate", suite))
    assert f"hf_dataset '{data}' split 'test' is empty or cannot be read (test-00000-of-00001.parquet)" in output


def test_a_dead_parallel_worker_names_its_run_and_says_resume(tmp_path):
    """A real worker process dies (os._exit, as kill -9 would): the pool breaks; the run that was
    training is marked failed in its folder, the queued one is named as not started, both say --resume."""
    from gspo_bench.suite import launch

    started, queued = (SimpleNamespace(run_dir=tmp_path / "tiny" / name) for name in ("grpo-s0", "gspo-s0"))
    RunDir(started.run_dir).write_status("running", step=3)
    ended = {}
    observer = SimpleNamespace(start_run=lambda name: None, step=lambda name, row: None,
                               end_run=lambda name, status: ended.__setitem__(name, status))
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(os._exit, 9): 0, pool.submit(abs, -1): 1}
        messages = queue.Queue()
        messages.put(("start", "grpo-s0", {}))  # what the worker of a run reports first
        statuses = launch._collect(futures, [started, queued], lambda: launch._next_ray(messages, queue.Empty), observer)
    assert [s["status"] for s in statuses] == ["failed", "failed"] and statuses[0]["step"] == 3
    assert "run grpo-s0: its worker process died at step 3" in statuses[0]["message"]
    assert "run gspo-s0 did not start" in statuses[1]["message"]
    assert all("--resume" in s["message"] for s in statuses) and ended["grpo-s0"] == statuses[0]
    recorded = json.loads((started.run_dir / "status.json").read_text())
    assert recorded["status"] == "failed" and recorded["message"] == statuses[0]["message"]


def test_a_second_suite_of_the_same_name_is_refused_before_it_runs_into_one_out(tmp_path, cli):
    """OUT/tiny holds suite A (its suite.yaml); suite B, also named tiny, with another lr and other labels,
    is refused in one line naming the difference, before anything is written; A itself is welcome. B with
    --resume --allow-changed is refused too: --allow-changed continues started runs, and B's run never
    started (it would start under settings the folder's suite did not have)."""
    from gspo_bench.suite.runner import write_suite_file
    from gspo_bench.suite.session import plan_session

    out = tmp_path / "out"
    a = write_suite(tmp_path / "a.yaml", tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}]))
    b = write_suite(tmp_path / "b.yaml", tiny_suite(tmp_path / "cache", objectives=[{"name": "gspo"}],
                                                   train={"lr": 2e-3}))
    write_suite_file(load_suite(a), out)
    written = (out / "tiny" / "suite.yaml").read_text()
    error = one_line_error(cli("run", b, "--out", out))
    assert f"{out / 'tiny' / 'suite.yaml'}: another suite named tiny ran into {out}" in error
    assert "train.lr: 0.001 -> 0.002" in error and "objectives.0.name: 'grpo' -> 'gspo'" in error
    assert (out / "tiny" / "suite.yaml").read_text() == written and sorted(p.name for p in (out / "tiny").iterdir()) == [
        "suite.yaml"]
    assert [run.name for run in plan_session(a, None, out).todo] == ["grpo-s0"]
    with pytest.raises(ValueError, match=r"1 run\(s\) have not started \(gspo-s0\)"):
        plan_session(b, None, out, resume=True, allow_changed=True)


def test_report_refuses_two_suites_of_one_name_in_one_folder_but_not_sweep_points_or_arms(tmp_path, cli):
    """Runs of one folder (written there before `run` refused a second suite) differ in train.lr: refused,
    naming both runs. An arm's own `set:` and a sweep point's value differ by design: one suite."""
    make_run(tmp_path, "ci", "grpo", 0)
    arm = make_run(tmp_path, "ci", "gspo", 0, lr=3e-3)
    output = one_line_error(cli("report", tmp_path / "ci", "--out", tmp_path / "r"))
    assert "one folder holds runs of two suites named ci" in output and "train.lr: 0.001 vs 0.003" in output
    assert f"{tmp_path / 'ci' / 'grpo-s0'}" in output and f"{arm}" in output
    config = yaml.safe_load((arm / "config.yaml").read_text())
    config["run"]["set"] = {"train.lr": 3e-3}  # the gspo arm sets its own lr: part of the suite
    (arm / "config.yaml").write_text(yaml.safe_dump(config))
    assert len(load_results(tmp_path / "ci").runs) == 2
    point = make_run(tmp_path, "ci", "grpo", 1, lr=3e-3)
    config = yaml.safe_load((point / "config.yaml").read_text())
    config["run"]["sweep"] = {"lr": 3e-3}  # a sweep point of train.lr (short name lr)
    (point / "config.yaml").write_text(yaml.safe_dump(config))
    assert len(load_results(tmp_path / "ci").runs) == 3
