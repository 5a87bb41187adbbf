"""What a researcher sees while a suite runs (bars on a terminal, throttled lines elsewhere, other
libraries' output in the run's log, what to do next) and `--set PATH=VALUE` overrides."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import queue
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.config import (
    BudgetConfig,
    SuiteError,
    WarmStartConfig,
    apply_overrides,
    parse_overrides,
    parse_suite,
)
from gspo_bench.config.run import config_changes, resolved_config
from gspo_bench.rundir.folder import RunDir
from gspo_bench.suite.folder_checks import check_outputs
from gspo_bench.suite.progress import SuiteProgress, Throttle, TimeLeft, budget_fraction
from gspo_bench.suite.runner import plan_runs
from tests.helpers.runs import tiny_suite

BUDGETS = {"grpo-s0": BudgetConfig(kind="flops", value=100.0), "gspo-s0": BudgetConfig(kind="steps", value=10)}


def row(step: int, flops: float, reward: float = 0.5) -> dict:
    return {"step": step, "compute/cum_flops": flops, "compute/cum_tokens": 0, "reward/mean": reward,
            "clip/frac": 0.01, "moe/drift": 0.02}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def screen(progress: SuiteProgress) -> str:
    """The bars as the terminal shows them now."""
    out = Console(record=True, width=160, file=io.StringIO())
    out.print(progress.progress.get_renderable())
    return out.export_text()


# ------------------------------------------------------------------ progress: the pieces

def test_budget_fraction_counts_the_budget_kind_and_the_step_cap():
    assert budget_fraction(BudgetConfig(kind="flops", value=100.0), row(3, 25.0)) == 0.25
    assert budget_fraction(BudgetConfig(kind="steps", value=10), row(3, 25.0)) == 0.3
    assert budget_fraction(BudgetConfig(kind="flops", value=100.0, max_steps=4), row(3, 25.0)) == 0.75
    assert budget_fraction(BudgetConfig(kind="flops", value=100.0), row(9, 250.0)) == 1.0


def test_throttle_lets_one_pass_per_key_per_interval():
    clock = Clock()
    throttle = Throttle(30.0, clock)
    assert throttle.ready("a") and not throttle.ready("a") and throttle.ready("b")
    clock.now = 29.9
    assert not throttle.ready("a")
    clock.now = 30.0
    assert throttle.ready("a") and not throttle.ready("a")
    later = Throttle(30.0, clock, first_free=False)  # a run's lines: the first one an interval in
    assert not later.ready("c")
    clock.now = 60.0
    assert later.ready("c") and not later.ready("c")


def test_a_run_that_reaches_its_budget_prints_its_end_only():
    out, clock = io.StringIO(), Clock()
    with SuiteProgress(Console(file=out, force_terminal=False), BUDGETS, clock=clock, interval=30.0) as progress:
        progress.start_run("gspo-s0")
        for step in (1, 10):
            clock.now = 40.0 * step
            progress.step("gspo-s0", row(step, 0.0))  # step 10 of 10: the budget is spent
        progress.end_run("gspo-s0", {"status": "done", "step": 10})
    assert out.getvalue().splitlines() == ["[gspo-s0] done at step 10  (1/2 runs finished)"]


def test_time_left_extrapolates_the_rate_since_the_first_report():
    clock = Clock()
    left = TimeLeft(clock)
    assert left("r", 0.5) is None  # a resumed run starts at half: no rate yet
    clock.now = 10.0
    assert left("r", 0.6) == pytest.approx(40.0)  # 0.1 per 10 s, 0.4 to go


# ------------------------------------------------------------------ progress: terminal and plain modes

def test_on_a_terminal_every_active_run_and_the_warm_start_and_the_suite_have_a_bar():
    console = Console(record=True, force_terminal=True, width=160, file=io.StringIO())
    with SuiteProgress(console, BUDGETS) as progress:
        assert progress.progress is not None
        progress.warm_start(0, 75, 0.156, WarmStartConfig(max_steps=2000, band=(0.2, 0.6)))
        text = screen(progress)
        assert "warm start s0" in text and "step 75/2000  accuracy 0.156 (stops in 0.2-0.6)" in text
        progress.warm_start_done(0)
        progress.start_run("grpo-s0")
        progress.start_run("gspo-s0")
        progress.step("grpo-s0", row(4, 50.0))
        progress.step("gspo-s0", row(1, 10.0, reward=0.25))
        lines = screen(progress).splitlines()
        grpo = next(line for line in lines if line.startswith("grpo-s0"))
        assert "50%" in grpo and "step    4  reward 0.500  clip 0.0100  drift 0.020" in grpo
        gspo = next(line for line in lines if line.startswith("gspo-s0"))
        assert "10%" in gspo and "reward 0.250" in gspo
        suite = next(line for line in lines if line.startswith("suite"))
        assert "30%" in suite and "0/2 runs finished" in suite  # (0.5 + 0.1) / 2
        assert not any("warm start" in line for line in lines)  # its bar went when it was done
        progress.end_run("grpo-s0", {"status": "done", "step": 8})
        lines = screen(progress).splitlines()
        assert not any(line.startswith("grpo-s0") for line in lines)  # only active runs have bars
        assert "1/2 runs finished" in next(line for line in lines if line.startswith("suite"))
    printed = console.export_text()
    assert "[grpo-s0] done at step 8  (1/2 runs finished)" in printed
    assert "[gspo-s0]  10%" not in printed  # no plain step lines on a terminal


def test_off_a_terminal_plain_lines_at_most_one_per_run_per_interval():
    out, clock = io.StringIO(), Clock()
    console = Console(file=out, force_terminal=False, width=160)
    with SuiteProgress(console, BUDGETS, clock=clock, interval=30.0) as progress:
        assert progress.progress is None
        for name in BUDGETS:
            progress.start_run(name)
        for second in range(0, 65, 2):  # a step every 2 s for 64 s, both runs
            clock.now = float(second)
            progress.step("grpo-s0", row(second // 2, second / 2))
            progress.step("gspo-s0", row(second // 8, 0.0))
        progress.end_run("grpo-s0", {"status": "collapsed", "step": 32, "message": "reward collapse"})
    lines = out.getvalue().splitlines()
    grpo = [line for line in lines if line.startswith("[grpo-s0]")]
    assert len(grpo) == 3  # at 30 and 60 s (none at its start), and its end
    assert grpo[0].startswith("[grpo-s0]  15%  step   15") and grpo[0].endswith("left 0:02:50")
    assert grpo[2] == "[grpo-s0] collapsed at step 32: reward collapse  (1/2 runs finished)"
    assert len([line for line in lines if line.startswith("[gspo-s0]")]) == 2


def test_warm_start_lines_are_throttled_off_a_terminal():
    out, clock = io.StringIO(), Clock()
    progress = SuiteProgress(Console(file=out, force_terminal=False), BUDGETS, clock=clock, interval=30.0)
    cfg = WarmStartConfig()
    for step in range(0, 200, 25):
        clock.now = step / 5  # an evaluation every 5 s
        progress.warm_start(0, step, step / 1000, cfg)
    lines = out.getvalue().splitlines()
    assert lines == ["  warm start s0: step 0/2000  accuracy 0.000 (stops in 0.2-0.6)",
                     "  warm start s0: step 150/2000  accuracy 0.150 (stops in 0.2-0.6)"]


def test_workers_progress_reaches_the_parents_display_through_the_queue():
    from gspo_bench.suite.launch import _next_ray, _QueueReport, _relay

    messages = queue.Queue()
    report = _QueueReport(messages)  # what a worker process calls
    report("start", "grpo-s0", {})
    report("step", "grpo-s0", row(2, 40.0))
    console = Console(record=True, force_terminal=True, width=160, file=io.StringIO())
    with SuiteProgress(console, BUDGETS) as progress:
        _relay(lambda: _next_ray(messages, queue.Empty), progress)
        assert progress.fractions == {"grpo-s0": 0.4}
        assert "40%" in next(line for line in screen(progress).splitlines() if line.startswith("grpo-s0"))


# ------------------------------------------------------------------ other libraries' output -> run.log

def test_library_output_goes_to_the_run_log_and_the_console_stays_clean(tmp_path, capsys):
    from tqdm import tqdm

    from gspo_bench.rundir.runlog import library_output

    before = logging.getLogger("a_library")
    handler = logging.StreamHandler(sys.stderr)  # a library that logs to the console
    before.addHandler(handler)
    inside = logging.getLogger("made_inside")
    try:
        with library_output(tmp_path / "run" / "run.log"):
            for _ in tqdm(range(3), desc="Running generate_until requests"):
                pass
            before.warning("a library warning")
            inside.addHandler(logging.StreamHandler())  # made now (lm-eval does on its first evaluation)
            inside.warning("logged inside")
        inside.warning("logged after")  # back on the console, not into a closed file
    finally:
        before.removeHandler(handler)
        inside.handlers.clear()
    log = (tmp_path / "run" / "run.log").read_text()
    for text in ("Running generate_until requests", "a library warning", "logged inside"):
        assert text in log
    err = capsys.readouterr().err
    assert "generate_until" not in err and "a library warning" not in err and "logged inside" not in err
    assert "logged after" in err and "logged after" not in log


def test_a_run_sends_library_output_to_its_run_log(tmp_path, monkeypatch, capsys):
    from tqdm import tqdm

    from gspo_bench.suite import launch
    from gspo_bench.train import loop

    def train_run(spec, on_step=None, **mode):
        for _ in tqdm(range(2), desc="lm-eval requests"):
            pass
        return {"status": "done", "step": 1}

    monkeypatch.setattr(loop, "train_run", train_run)
    status = launch.run_one(SimpleNamespace(run_dir=tmp_path / "grpo-s0"), {})
    assert status["status"] == "done"
    assert "lm-eval requests" in (tmp_path / "grpo-s0" / "run.log").read_text()
    assert "lm-eval requests" not in capsys.readouterr().err


# ------------------------------------------------------------------ --set: parsing and validation

def test_set_values_are_read_as_yaml():
    assert parse_overrides(["train.lr=2e-3", "train.device=cuda", "eval.greedy=true", "train.threads=null",
                            "train.betas=[0.9, 0.95]", "model.num_experts=16"]) == {
        "train.lr": 0.002, "train.device": "cuda", "eval.greedy": True, "train.threads": None,
        "train.betas": [0.9, 0.95], "model.num_experts": 16}
    for bad, why in ((["train.lr"], "expected PATH=VALUE"), (["=3"], "expected PATH=VALUE"),
                     (["train.lr=[1"], "not valid YAML"), (["a=1", "a=2"], "given twice")):
        with pytest.raises(SuiteError, match=why):
            parse_overrides(bad)


def test_set_changes_the_suite_and_keeps_its_sweep(tmp_path):
    suite = parse_suite(tiny_suite(tmp_path, sweep={"train.minibatches": [1, 2]}))
    changed = apply_overrides(suite, {"train.lr": 2e-3, "objectives.1.clip_high": 0.3, "rollout.dtype": "bfloat16"})
    assert changed.train.lr == 2e-3 and changed.objectives[1].clip_high == 0.3 and changed.rollout.dtype == "bfloat16"
    assert changed.sweep == {"train.minibatches": [1, 2]} and suite.train.lr == 1e-3
    runs = plan_runs(changed, tmp_path, overrides={"train.lr": 2e-3})
    assert len(runs) == 6 and all(r.suite.train.lr == 2e-3 and r.overrides == {"train.lr": 2e-3} for r in runs)
    with pytest.raises(SuiteError, match="sweeps this field"):
        apply_overrides(suite, {"train.minibatches": 4})


def test_set_refuses_the_sweep_and_a_field_that_holds_a_swept_one(tmp_path):
    """`--set sweep...` would be replaced by the file's sweep, `--set rollout.engine_options={...}` by the
    swept router_noise at each point: both would be silently lost, so both are refused, naming the override."""
    suite = parse_suite(tiny_suite(tmp_path, sweep={"rollout.engine_options.router_noise": [0.1, 0.2]}))
    for path, value in (("sweep", {"train.lr": [1e-3, 2e-3]}), ("sweep.train.lr", [1e-3])):
        with pytest.raises(SuiteError, match=rf"^s\.yaml: --set {path}: the sweep is set in the suite file, not with "
                                             "--set$"):
            apply_overrides(suite, {path: value}, "s.yaml")
    with pytest.raises(SuiteError, match=r"^s\.yaml: --set rollout\.engine_options: the suite sweeps this field"):
        apply_overrides(suite, {"rollout.engine_options": {"router_noise": 0.0}}, "s.yaml")
    beside = apply_overrides(suite, {"rollout.engine_options.copy_weights": False})  # beside the swept field
    assert beside.rollout.engine_options["copy_weights"] is False and beside.sweep == suite.sweep


def test_a_bad_path_is_refused_as_a_sweep_refuses_it_in_one_line(tmp_path):
    suite = parse_suite(tiny_suite(tmp_path))
    with pytest.raises(SuiteError) as by_set:
        apply_overrides(suite, {"train.lrr": 1e-3}, "s.yaml")
    with pytest.raises(SuiteError) as by_sweep:
        parse_suite(tiny_suite(tmp_path, sweep={"train.lrr": [1e-3]}), "s.yaml")
    reason = str(by_sweep.value).splitlines()[-1].split("sweep.train.lrr: ")[1]
    assert str(by_set.value) == f"s.yaml: --set train.lrr: {reason}"  # the same check, one line
    assert "'lrr'" in reason and "'lr'" in reason


def test_a_bad_value_is_refused_naming_the_override_and_the_field_in_one_line(tmp_path):
    suite = parse_suite(tiny_suite(tmp_path))
    for overrides, field in (({"model.top_k": 16}, "top_k"), ({"train.dtype": "float16"}, "train.dtype"),
                             ({"train.minibatches": 64}, "minibatches"), ({"rollout.group_size": 1}, "group_size")):
        with pytest.raises(SuiteError) as err:
            apply_overrides(suite, overrides, "s.yaml")
        text = str(err.value)
        assert "\n" not in text and text.startswith(f"s.yaml: --set {next(iter(overrides))}=") and field in text


# ------------------------------------------------------------------ --set on the command line

def suite_file(tmp_path: Path, **changes) -> Path:
    data = tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}], budget={"kind": "steps", "value": 1},
                      **changes)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("command", [["validate"], ["run", "--dry-run"], ["run", "--out", "OUT"]])
def test_validate_dry_run_and_run_refuse_a_bad_set_with_exit_2_and_one_line(tmp_path, command):
    path = suite_file(tmp_path)
    args = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    for bad, words in ((["--set", "train.lrr=1e-3"], ["--set train.lrr", "'lrr'"]),
                       (["--set", "model.top_k=16"], ["--set model.top_k=16", "top_k"]),
                       (["--set", "train.lr"], ["expected PATH=VALUE"])):
        result = CliRunner().invoke(app, [args[0], str(path), *args[1:], *bad])
        assert result.exit_code == 2, result.output
        assert result.output.count("\n") == 1 and result.output.startswith("error:"), result.output
        assert all(word in result.output for word in words), result.output
    assert not (tmp_path / "out").exists()


def test_validate_and_dry_run_show_the_overridden_suite(tmp_path):
    path = suite_file(tmp_path)
    result = CliRunner().invoke(app, ["validate", str(path), "--set", "budget.value=7", "--set", "seeds=[0, 1]"])
    output = " ".join(result.output.split())  # long lines wrap
    assert result.exit_code == 0 and "with budget.value=7, seeds=[0, 1]" in output
    assert "2 runs, budget steps=7" in output and "grpo-s1" in output
    result = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--set", "budget.value=7"])
    output = " ".join(result.output.split())
    assert result.exit_code == 0 and "--set budget.value=7" in output and ">= 7 steps per run" in output


def test_run_records_the_overrides_and_ends_with_the_report_command(tmp_path, monkeypatch):
    """... and prints the live early warnings: with a rules file whose one rule fires on every step (reward/mean
    at or above -1), its line once, at step 1."""
    from analysis.evidence import early_warnings

    path, out = suite_file(tmp_path), tmp_path / "out"
    rule = early_warnings.AlarmRule("reward/mean", -1.0, "above", 1)
    early_warnings.rules_table([early_warnings.ShippedRule(rule, "hand", ("a",), ("b",), early_warnings.Scored(
        rule, 4, 2, 3.0, 8, 1, 0.7, 0.6, 0.8))]).to_csv(tmp_path / "rules.csv", index=False)
    monkeypatch.setattr(early_warnings, "SHIPPED_RULES", tmp_path / "rules.csv")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--set", "train.lr=2e-3",
                                      "--set", "objectives.0.clip_high=0.3"])
    assert result.exit_code == 0, result.output
    run_dir = out / "tiny" / "grpo-s0"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["suite"]["train"]["lr"] == 2e-3 and config["run"]["lr"] == 2e-3
    assert config["suite"]["objectives"][0]["clip_high"] == 0.3 and config["run"]["clip_high"] == 0.3
    assert config["run"]["overrides"] == {"train.lr": 2e-3, "objectives.0.clip_high": 0.3}
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["overrides"] == config["run"]["overrides"]
    # the suite file the run was started with, as the report checks suite.yaml against it
    assert provenance["suite_sha256"] == hashlib.sha256((out / "tiny" / "suite.yaml").read_bytes()).hexdigest()
    lines = result.output.strip().splitlines()
    assert "  warm start s0: step 0/2000" in result.output  # a fresh warm start, as plain lines here
    alarms = [line for line in lines if "early warning" in line]
    assert len(alarms) == 1 and alarms[0].startswith("[grpo-s0] early warning at step 1: reward/mean = ")
    answer = lines.index("answer:")  # the suite's answer in plain sentences, between the results and the report
    assert lines[answer - 1] == f"results: {out / 'tiny'}" and lines[-1] == f"report:  gspo-bench report {out / 'tiny'}"
    assert 1 <= len(lines[answer + 1:-1]) <= 5 and lines[answer + 1].startswith("  1 run finished: grpo on 1 seed")
    again = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--resume", "--report",
                                     "--set", "train.lr=2e-3", "--set", "objectives.0.clip_high=0.3"])
    assert again.exit_code == 0, again.output
    assert "nothing to do" in again.output and (out / "tiny" / "report" / "report.md").is_file()
    assert "report:  gspo-bench report" not in again.output
    assert f"full report: {out / 'tiny' / 'report' / 'report.html'}" in again.output.splitlines()[-1]


# ------------------------------------------------------------------ --set and --resume

def unfinished_run(tmp_path: Path, overrides: dict) -> Path:
    """A run folder as an interrupted run of the suite (with `overrides`) leaves it."""
    suite = apply_overrides(parse_suite(tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}])), overrides)
    planned = plan_runs(suite, tmp_path / "out", overrides=overrides)[0]
    out = RunDir(planned.run_dir)
    out.write_text("config.yaml", resolved_config(planned))
    out.write_status("failed", step=1)
    return planned.run_dir


def planned(tmp_path: Path, overrides: dict):
    suite = apply_overrides(parse_suite(tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}])), overrides)
    return plan_runs(suite, tmp_path / "out", overrides=overrides)


def test_resume_with_another_set_is_an_edit_and_the_same_set_is_not(tmp_path):
    run_dir = unfinished_run(tmp_path, {"train.lr": 2e-3})
    assert config_changes(run_dir, planned(tmp_path, {"train.lr": 2e-3})[0]) == []
    assert config_changes(run_dir, planned(tmp_path, {"train.lr": 0.002})[0]) == []
    assert "suite.train.lr: 0.002 -> 0.001" in config_changes(run_dir, planned(tmp_path, {})[0])
    changed = planned(tmp_path, {"train.lr": 5e-3})
    with pytest.raises(ValueError, match=r"suite.train.lr: 0.002 -> 0.005.*--allow-changed"):
        check_outputs(changed, resume=True)
    assert check_outputs(changed, resume=True, allow_changed=True) == changed


def test_run_resume_refuses_a_changed_set_in_one_line_unless_allow_changed(tmp_path, monkeypatch):
    unfinished_run(tmp_path, {})
    path = suite_file(tmp_path)
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "budget": {"kind": "steps", "value": 3}}))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "--resume",
                                      "--set", "rollout.temperature=0.5"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "suite.rollout.temperature: 1.0 -> 0.5" in result.output and "--allow-changed" in result.output


def test_a_fresh_init_draws_no_warm_start_bar_and_long_lines_stay_whole():
    from gspo_bench.suite.runner import _warm_start_eval

    out = io.StringIO()
    progress = SuiteProgress(Console(file=out, force_terminal=False, width=40), BUDGETS, clock=Clock(), interval=30.0)
    _warm_start_eval(progress, 0, WarmStartConfig(enabled=False), 0, 0.0)  # the one score of a fresh init
    assert out.getvalue() == ""
    _warm_start_eval(progress, 0, WarmStartConfig(), 0, 0.0)
    progress.say("x" * 100)  # e.g. step 1's memory plan beside the measured peak
    assert out.getvalue().splitlines() == ["  warm start s0: step 0/2000  accuracy 0.000 (stops in 0.2-0.6)", "x" * 100]


def test_a_gpu_runs_first_step_prints_the_memory_plan_beside_its_peak(tmp_path):
    from gspo_bench.config import parse_suite
    from gspo_bench.suite.plan import plan_suite, plan_vs_peak

    suite = parse_suite({"name": "s", "task": {"name": "sort"}, "budget": {"kind": "steps", "value": 10},
                         "objectives": [{"name": "gspo"}], "warm_start": {"enabled": False}})
    out = io.StringIO()
    progress = SuiteProgress(Console(file=out, force_terminal=False), BUDGETS, clock=Clock(), suites={"gspo-s0": suite})
    progress.start_run("gspo-s0")
    progress.step("gspo-s0", row(1, 0.0) | {"gpu/peak_mem_gib": 1.5})
    progress.step("gspo-s0", row(2, 0.0) | {"gpu/peak_mem_gib": 1.5})  # step 1 only
    assert out.getvalue().splitlines() == [f"[gspo-s0] {plan_vs_peak(plan_suite(suite).memory, 1.5)}"]


def test_a_stopped_suites_resume_command_repeats_its_overrides(monkeypatch):
    import gspo_bench.cli as cli
    from gspo_bench.runtime.stopping import Stopped

    monkeypatch.setattr(cli, "console", Console(file=io.StringIO(), width=300, record=True))
    stop = cli.suite_stopped(Stopped(15), Path("s.yaml"), Path("runs"), ["train.lr=3e-4"])
    assert stop.exit_code == 143
    assert "`gspo-bench run s.yaml --set train.lr=3e-4 --out runs --resume` continues the suite" in cli.console.export_text()
