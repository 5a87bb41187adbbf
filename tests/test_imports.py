"""`gspo-bench import`: verl-format logs (TensorBoard event files written by torch's SummaryWriter, as verl's
`_TensorboardAdapter` writes them, and verl's file logger's JSON lines) under verl's own key names
(volcengine/verl: verl/utils/tracking.py, verl/trainer/ppo/metric_utils.py, verl/trainer/ppo/core_algos.py,
verl/workers/actor/dp_actor.py, verl/trainer/ppo/rollout_corr_helper.py), the refusals of bad input, and
the report over imported runs. Every file here is written as the library writes it, with hand-chosen values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from gspo_bench.imports.mapping import MAPPABLE_COLUMNS, MappingError, load_mapping
from gspo_bench.imports.plan import PlanError
from gspo_bench.imports.sources import SourceError
from gspo_bench.imports.write import ImportError_, import_plan

VERL, _, _ = load_mapping("verl")
# verl's key of each column, read from verl's source (module docstring); the built-in mapping must say the same
VERL_KEYS = {"reward/mean": "critic/score/mean", "response/len_mean": "response_length/mean",
             "response/len_max": "response_length/max", "loss": "actor/pg_loss", "grad/norm": "actor/grad_norm",
             "clip/frac": "actor/pg_clipfrac", "kl/old_new": "actor/ppo_kl", "entropy/mean": "actor/entropy",
             "mismatch/k3_kl": "rollout_corr/k3_kl", "time/step_s": "timing_s/step", "lr": "actor/lr"}
STEPS = 8


def verl_values(step: int, arm: str = "grpo", seed: int = 0) -> dict[str, float]:
    """One step's metrics under verl's key names: distinct per key, arm, seed and step, so a key mapped to
    the wrong column or a row shifted by one shows."""
    lift = 0.04 if arm == "gspo" else 0.0
    values = {key: 0.01 * (i + 1) + 0.001 * step + 0.0001 * seed for i, key in enumerate(VERL.columns.values())}
    values["critic/score/mean"] = 0.2 + (0.03 + lift) * step + 0.002 * seed
    values["perf/total_num_tokens"] = 1000.0 + 10 * step
    values["val-core/custom/reward"] = 0.5  # ignored on purpose by the mapping
    values["custom/router_entropy"] = 1.0  # a key the mapping does not know: listed
    return values


def write_verl_events(folder: Path, arm: str = "grpo", seed: int = 0, steps: range = range(1, STEPS + 1),
                      override: dict[int, dict[str, float]] | None = None) -> Path:
    """verl's TensorBoard backend: add_scalar(key, value, step) for every key of a step's dict."""
    writer = SummaryWriter(str(folder))
    for step in steps:
        for key, value in {**verl_values(step, arm, seed), **(override or {}).get(step, {})}.items():
            writer.add_scalar(key, value, step)
    writer.close()
    return folder


def write_plan(where: Path, runs: list[dict], mapping: str = "verl", **extra) -> Path:
    plan = {"name": "imported", "mapping": mapping, "compute": {"flops_per_token": 1.0e6}, "runs": runs, **extra}
    path = where / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def test_verl_event_files_fill_every_mapped_column(tmp_path):
    write_verl_events(tmp_path / "tb")
    suite, reads = import_plan(write_plan(tmp_path, [{"arm": "grpo", "seed": 0, "files": ["tb"]}]), tmp_path / "out")
    metrics = pd.read_parquet(suite / "grpo-s0" / "metrics.parquet")
    assert metrics["step"].tolist() == list(range(1, STEPS + 1))
    assert VERL.columns == VERL_KEYS
    for column, key in VERL_KEYS.items():  # float32 in the event file
        expected = [verl_values(step)[key] for step in range(1, STEPS + 1)]
        np.testing.assert_allclose(metrics[column], expected, rtol=1e-6, err_msg=column)
    assert metrics["compute/tokens"].tolist() == [1000.0 + 10 * s for s in range(1, STEPS + 1)]
    assert metrics["compute/cum_flops"].iloc[-1] == pytest.approx(1e6 * sum(1000 + 10 * s for s in range(1, 9)))
    unmapped = [c for c in MAPPABLE_COLUMNS if c not in VERL.columns]
    assert metrics[unmapped].isna().all().all()  # not measured, never filled
    prov = json.loads((suite / "grpo-s0" / "provenance.json").read_text())["imported"]
    assert prov["unknown_keys"] == ["custom/router_entropy"] and reads[0].unknown == ("custom/router_entropy",)
    assert prov["not_measured"] == unmapped and prov["columns"] == VERL.columns
    [source] = prov["sources"]
    import hashlib
    assert source["sha256"] == hashlib.sha256(Path(source["path"]).read_bytes()).hexdigest()
    assert "events.out.tfevents" in source["path"]


def write_verl_jsonl(path: Path, lines: list[tuple[int, dict]]) -> Path:
    """verl's FileLogger: one orjson line {"step": step, "data": data} per log call (NaN and inf as null)."""
    path.write_text("".join(json.dumps({"step": step, "data": data}, allow_nan=False) + "\n" for step, data in lines))
    return path


def test_verl_json_lines_and_nan_inf_kept(tmp_path):
    lines = [(s, verl_values(s)) for s in range(1, 4)]
    lines[1][1]["actor/grad_norm"] = None  # orjson's NaN or inf
    write_verl_jsonl(tmp_path / "metrics.jsonl", lines)
    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in (1, 2):
        for key, value in verl_values(step).items():
            writer.add_scalar(key, math.inf if key == "actor/pg_loss" and step == 2 else value, step)
    writer.close()
    plan = write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["metrics.jsonl"]},
                                 {"arm": "b", "seed": 0, "files": ["tb"]}])
    suite, _ = import_plan(plan, tmp_path / "out")
    from_lines = pd.read_parquet(suite / "a-s0" / "metrics.parquet")
    assert from_lines["reward/mean"].tolist() == [verl_values(s)["critic/score/mean"] for s in (1, 2, 3)]
    assert math.isnan(from_lines["grad/norm"].iloc[1]) and not math.isnan(from_lines["grad/norm"].iloc[0])
    from_events = pd.read_parquet(suite / "b-s0" / "metrics.parquet")
    assert from_events["loss"].iloc[1] == math.inf


def test_two_arms_three_seeds_report_names_the_paired_test_and_family(tmp_path):
    from analysis.data.load import load_results
    from analysis.data.matching import check_matched
    from analysis.report.markdown import render_markdown
    from analysis.report.sections import Context, build_sections

    runs = []
    for arm in ("grpo", "gspo"):
        for seed in range(3):
            write_verl_events(tmp_path / f"{arm}{seed}", arm, seed)
            runs.append({"arm": arm, "seed": seed, "files": [f"{arm}{seed}"]})
    plan = write_plan(tmp_path, runs, analysis={"primary": {"each_vs": "grpo"}})
    suite, _ = import_plan(plan, tmp_path / "out")
    results = load_results(suite)
    context = Context(results, check_matched(results), False)  # report.md's text, without drawing its figures
    text = render_markdown(build_sections(context), context.figures_shown)
    assert "**Primary family of 1 test, declared in the suite file** imported/suite.yaml" in text
    assert "gspo against grpo (primary)" in text and "gspo minus grpo" in text and "over 3 paired seeds" in text
    assert "exact two-sided sign-flip p" in text and "Holm-adjusted 0.25 over the primary family's 1 test" in text
    assert "no run recorded a suite hash" not in text  # each imported run records its suite.yaml's sha256


def plan_of(tmp_path: Path, files: list[str], **run) -> Path:
    return write_plan(tmp_path, [{"arm": "grpo", "seed": 0, "files": files, **run}])


def refused(plan: Path, out: Path, error: type[Exception], words: str) -> str:
    """The import of `plan` refused with `error` whose one line holds `words`, and nothing written."""
    with pytest.raises(error) as caught:
        import_plan(plan, out)
    message = str(caught.value)
    assert words in message and "\n" not in message, message
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
    return message


def test_missing_and_cut_short_files_are_refused(tmp_path):
    refused(plan_of(tmp_path, ["nowhere.jsonl"]), tmp_path / "out", ImportError_, "no such file")
    write_verl_events(tmp_path / "tb")
    [events] = (tmp_path / "tb").iterdir()
    events.write_bytes(events.read_bytes()[:-5])
    refused(plan_of(tmp_path, ["tb"]), tmp_path / "out", ImportError_, "cut short")
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": [{"step": 1, "reward": 0.5}]})[:-9])
    refused(plan_of(tmp_path, ["trainer_state.json"]), tmp_path / "out", ImportError_, "not valid JSON (cut short?)")
    lines = write_verl_jsonl(tmp_path / "m.jsonl", [(1, verl_values(1)), (2, verl_values(2))])
    lines.write_bytes(lines.read_bytes()[:-20])
    refused(plan_of(tmp_path, ["m.jsonl"]), tmp_path / "out", ImportError_, "m.jsonl line 2")


def write_text_events(folder: Path) -> Path:
    """verl's ValidationGenerationsLogger: validation samples as text, through a SummaryWriter of its own."""
    writer = SummaryWriter(str(folder))
    writer.add_text("val/generations", "no numbers here", 1)
    writer.close()
    return next(f for f in sorted(folder.iterdir(), key=lambda f: f.stat().st_mtime_ns))


def test_an_event_file_without_scalars_is_refused(tmp_path):
    text_only = write_text_events(tmp_path / "tb")
    refused(plan_of(tmp_path, ["tb"]), tmp_path / "out", ImportError_, "its event files hold no scalar values")
    refused(plan_of(tmp_path, [str(text_only)]), tmp_path / "out", ImportError_, "holds no scalar values")
    write_verl_events(tmp_path / "tb")  # beside the scalars of the run, a text-only event file is read as such
    suite, _ = import_plan(plan_of(tmp_path, ["tb"]), tmp_path / "out")
    assert len(pd.read_parquet(suite / "grpo-s0" / "metrics.parquet")) == STEPS


def test_repeated_steps_refused_unless_resumed(tmp_path):
    """A run resumed from its step-5 checkpoint writes a second event file from step 6 on, after the first
    had logged steps 6-8 (and died): the later values replace those from step 6 on only where the run is
    declared resumed; the resumed run stopped at step 7, so the first file's step 8 is gone too."""
    write_verl_events(tmp_path / "tb", steps=range(1, 9))
    write_verl_events(tmp_path / "tb", steps=range(6, 8), override={s: {"critic/score/mean": 9.0} for s in range(6, 8)})
    assert len(list((tmp_path / "tb").iterdir())) == 2
    message = refused(plan_of(tmp_path, ["tb"]), tmp_path / "out", ImportError_, "logged at step 6 after step 8")
    assert "resumed" in message
    suite, _ = import_plan(plan_of(tmp_path, ["tb"], resumed=True), tmp_path / "out")
    metrics = pd.read_parquet(suite / "grpo-s0" / "metrics.parquet")
    assert metrics["step"].tolist() == list(range(1, 8))
    assert (metrics["reward/mean"].iloc[5:] == 9.0).all() and (metrics["reward/mean"].iloc[:5] < 1).all()


def test_steps_out_of_order_in_json_lines_are_refused(tmp_path):
    write_verl_jsonl(tmp_path / "m.jsonl", [(1, verl_values(1)), (3, verl_values(3)), (2, verl_values(2))])
    refused(plan_of(tmp_path, ["m.jsonl"]), tmp_path / "out", ImportError_, "at step 2 after step 3")


def test_two_runs_claiming_one_arm_and_seed_are_refused(tmp_path):
    write_verl_events(tmp_path / "tb")
    plan = write_plan(tmp_path, [{"arm": "grpo", "seed": 1, "files": ["tb"]}, {"arm": "gspo", "seed": 1, "files": ["tb"]},
                                 {"arm": "grpo", "seed": 1, "files": ["tb"]}])
    refused(plan, tmp_path / "out", PlanError, "runs 0 and 2 both claim arm 'grpo' seed 1")


def test_an_existing_suite_folder_is_not_overwritten(tmp_path):
    write_verl_events(tmp_path / "tb")
    (tmp_path / "out" / "imported").mkdir(parents=True)
    with pytest.raises(ImportError_, match="already exists"):
        import_plan(plan_of(tmp_path, ["tb"]), tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == [tmp_path / "out" / "imported"]


def test_a_mapping_with_an_unknown_column_is_refused(tmp_path):
    (tmp_path / "mine.yaml").write_text("library: mine\ncolumns: {reward/mean: score, clip/fraction: clipfrac}\n")
    with pytest.raises(MappingError, match=r"columns: unknown column 'clip/fraction' \(a mapping fills one of: "):
        load_mapping("mine.yaml", base=tmp_path)
    write_verl_events(tmp_path / "tb")
    refused(write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["tb"]}], mapping="mine.yaml"), tmp_path / "out",
            MappingError, "unknown column 'clip/fraction'")


def test_a_home_made_mapping_imports_without_code(tmp_path):
    (tmp_path / "mine.yaml").write_text("library: homemade\ncolumns: {reward/mean: critic/score/mean, "
                                        "clip/frac: actor/pg_clipfrac}\nignore: ['*']\n")
    write_verl_events(tmp_path / "tb")
    plan = write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["tb"]}], mapping="mine.yaml",
                      compute={"flops_per_step": 5.0})
    suite, reads = import_plan(plan, tmp_path / "out")
    metrics = pd.read_parquet(suite / "a-s0" / "metrics.parquet")
    assert metrics["compute/cum_flops"].tolist() == [5.0 * s for s in range(1, STEPS + 1)]
    assert metrics["grad/norm"].isna().all() and reads[0].unknown == ()


def test_compute_needs_a_flop_figure(tmp_path):
    with pytest.raises(PlanError, match="compute: give one of flops_per_token"):
        import_plan(write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["x"]}], compute={}), tmp_path / "out")
    lines = [(s, verl_values(s)) for s in range(1, 4)]
    del lines[1][1]["perf/total_num_tokens"]
    write_verl_jsonl(tmp_path / "m.jsonl", lines)
    refused(plan_of(tmp_path, ["m.jsonl"]), tmp_path / "out", ImportError_, "no tokens logged at step 2 (1 steps in all)")


def test_the_cli_says_one_line_and_lists_unknown_keys(tmp_path, cli):
    write_verl_events(tmp_path / "tb")
    result = cli("import", plan_of(tmp_path, ["tb"]), "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "grpo seed 0: 8 steps from events.out.tfevents" in result.output
    assert "keys not in the mapping: custom/router_entropy" in result.output
    again = cli("import", plan_of(tmp_path, ["tb"]), "--out", tmp_path / "out")
    assert again.exit_code == 2 and again.output.count("\n") == 1 and "already exists" in again.output


def test_sources_name_unknown_file_kinds(tmp_path):
    from gspo_bench.imports.sources import read_records
    (tmp_path / "log.txt").write_text("reward 1\n")
    with pytest.raises(SourceError, match="not a known log file"):
        read_records(tmp_path / "log.txt")


def test_an_import_needs_no_torch(tmp_path):
    """Reading event files and writing the run folders loads neither torch nor transformers: an import runs
    where only the logs are."""
    import subprocess
    import sys

    write_verl_events(tmp_path / "tb")
    plan = plan_of(tmp_path, ["tb"])
    code = (f"from gspo_bench.imports.write import import_plan\nimport_plan({str(plan)!r}, {str(tmp_path / 'out')!r})\n"
            "import sys\nprint(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert not {"torch", "transformers"} & set(done.stdout.split()), done.stdout
    assert (tmp_path / "out" / "imported" / "grpo-s0" / "metrics.parquet").is_file()


def test_a_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    """The suite is written into a hidden folder and renamed into place: a write that fails on the second
    run leaves neither the first run's folder nor the hidden one."""
    from gspo_bench.imports import write

    write_verl_events(tmp_path / "tb")
    calls = []

    def failing(folder, *args):
        calls.append(folder)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(folder, *args)

    real = write.write_run
    monkeypatch.setattr(write, "write_run", failing)
    plan = write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["tb"]}, {"arm": "b", "seed": 0, "files": ["tb"]}])
    with pytest.raises(OSError, match="disk full"):
        import_plan(plan, tmp_path / "out")
    assert len(calls) == 2 and list((tmp_path / "out").iterdir()) == []


def test_imported_runs_beside_the_harness_runs(tmp_path):
    """Imported runs and this harness's (the committed CI baseline) load together, labelled by suite; their
    budgets differ in kind (steps against FLOPs), so the report's matched-compute rule refuses them unless
    allowed."""
    from analysis.data.load import load_results
    from analysis.data.matching import UnmatchedComputeError, check_matched

    write_verl_events(tmp_path / "tb")
    suite, _ = import_plan(plan_of(tmp_path, ["tb"]), tmp_path / "out")
    baseline = Path(__file__).resolve().parent.parent / "results" / "ci-baseline"
    results = load_results(suite, baseline)
    assert results.objectives[0] == "imported/grpo" and "ci/grpo" in results.objectives
    with pytest.raises(UnmatchedComputeError, match="different budget kinds"):
        check_matched(results)
    assert np.isnan(check_matched(results, allow_unmatched=True))


def test_reading_a_log_is_linear_in_its_steps():
    """Each record is checked against its key's last step without going over the key's earlier steps:
    the order comparisons of steps are counted (a step that counts them), one per record, and a restart
    of a resumed run costs a bisection of its key's steps (a few comparisons), not one per earlier step.
    Finding the last step by scanning (max over the steps so far) would cost ~n^2/2 for n steps."""
    from gspo_bench.imports.series import by_key
    from gspo_bench.imports.sources import Record

    compared = [0]

    class Step(int):
        def __lt__(self, other):
            compared[0] += 1
            return int.__lt__(self, other)

        def __le__(self, other):
            compared[0] += 1
            return int.__le__(self, other)

        def __gt__(self, other):
            compared[0] += 1
            return int.__gt__(self, other)

        def __ge__(self, other):
            compared[0] += 1
            return int.__ge__(self, other)

    keys = ("critic/score/mean", "actor/pg_loss", "actor/pg_clipfrac", "actor/grad_norm", "perf/total_num_tokens")
    steps = list(range(1, 4001))
    records = [Record(Step(s), key, float(s), "log") for s in steps for key in keys]
    values, unknown = by_key(records, VERL, resumed=False)
    assert unknown == [] and all(list(values[k]) == steps and values[k][4000] == 4000.0 for k in keys)
    assert compared[0] <= len(records), compared[0]
    # resumed: 40 restarts, each logging again the 10 steps before it (checkpoints every 100 steps)
    restarted = [s for block in range(40) for s in range(max(1, block * 100 - 9), block * 100 + 101)]
    records = [Record(Step(s), "critic/score/mean", float(i), "log") for i, s in enumerate(restarted)]
    compared[0] = 0
    values, _ = by_key(records, VERL, resumed=True)
    assert list(values["critic/score/mean"]) == steps  # every step once, in order
    assert values["critic/score/mean"][95] == float(restarted.index(95, 100))  # the value logged after the restart
    assert compared[0] <= len(records) + 40 * 13, compared[0]  # 13 >= log2(4000) + 1


def test_compute_that_is_infinite_negative_or_falling_is_refused(tmp_path):
    """Compute is the report's x-axis and what runs are matched at: an infinite figure in the plan, a
    negative or infinite token count, a count so far that falls (restarted), or FLOPs past the largest
    float are refused in one line naming the key, the step and the value."""
    for field in ("flops_per_step", "flops_per_token", "tokens_per_step"):
        compute = {"flops_per_step": 1.0, field: math.inf} if field == "tokens_per_step" else {field: math.inf}
        refused(write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["x"]}], compute=compute), tmp_path / "out",
                PlanError, f"compute.{field}: inf is not a finite number")
    lines = [(s, verl_values(s)) for s in range(1, 5)]
    lines[2][1]["perf/total_num_tokens"] = -5.0
    write_verl_jsonl(tmp_path / "m.jsonl", lines)
    refused(plan_of(tmp_path, ["m.jsonl"]), tmp_path / "out", ImportError_,
            "run 'grpo' seed 0: perf/total_num_tokens is -5 at step 3: tokens must be a finite number, 0 or more")
    write_verl_events(tmp_path / "tb", override={4: {"perf/total_num_tokens": math.inf}})
    refused(plan_of(tmp_path, ["tb"]), tmp_path / "out", ImportError_, "perf/total_num_tokens is inf at step 4")
    (tmp_path / "so_far.yaml").write_text("library: mine\ncolumns: {reward/mean: critic/score/mean}\n"
                                          "tokens: {key: perf/total_num_tokens, cumulative: true}\nignore: ['*']\n")
    counts = {1: 1000.0, 2: 2000.0, 3: 300.0, 4: 1300.0}  # a count that started again from zero at step 3
    write_verl_jsonl(tmp_path / "c.jsonl", [(s, {**verl_values(s), "perf/total_num_tokens": n}) for s, n in counts.items()])
    plan = write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["c.jsonl"]}], mapping="so_far.yaml")
    refused(plan, tmp_path / "out", ImportError_, "perf/total_num_tokens falls from 2000 to 300 at step 3")
    write_verl_jsonl(tmp_path / "c.jsonl", [(s, {**verl_values(s), "perf/total_num_tokens": 1000.0 * s}) for s in counts])
    suite, _ = import_plan(plan, tmp_path / "ok")  # rising: its growth per step
    assert pd.read_parquet(suite / "a-s0" / "metrics.parquet")["compute/tokens"].tolist() == [1000.0] * 4
    plan = write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["m.jsonl"]}], compute={"flops_per_token": 1e305})
    write_verl_jsonl(tmp_path / "m.jsonl", [(s, verl_values(s)) for s in range(1, 5)])
    refused(plan, tmp_path / "out", ImportError_, "compute reaches inf FLOPs at step 2 (1.02e+308 in that step)")
    plan = write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["m.jsonl"]}], compute={"flops_per_token": 1e306})
    refused(plan, tmp_path / "out", ImportError_, "compute reaches inf FLOPs at step 1 (inf in that step)")


def test_an_import_killed_outright_breaks_neither_report_nor_the_next_import(tmp_path):
    """kill -9 while the second run is written leaves the stage folder (OUT/.NAME.import-*) with the first
    run in it: the report never reads it as results and names it; the next import into OUT removes it,
    unless a live import holds it (its lock: a stage being written is not removed)."""
    import fcntl
    import os
    import signal
    import subprocess
    import sys

    from analysis.data.load import NotResultsError, load_results

    write_verl_events(tmp_path / "tb")
    plan = write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["tb"]}, {"arm": "b", "seed": 0, "files": ["tb"]}])
    out = tmp_path / "out"
    code = ("import os, signal\nfrom gspo_bench.imports import write\nreal = write.write_run\n"
            "def dying(folder, *args):\n    if folder.name == 'b-s0':\n        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    real(folder, *args)\n"
            f"write.write_run = dying\nwrite.import_plan({str(plan)!r}, {str(out)!r})\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == -signal.SIGKILL, done.stderr
    [stage] = list(out.iterdir())
    assert stage.name.startswith(".imported.import-") and (stage / "a-s0" / "metrics.parquet").is_file()
    with pytest.raises(NotResultsError, match=r"runs in hidden folders are never read \(.*/\.imported\.import-\w+/a-s0\)"):
        load_results(out)
    live = os.open(stage, os.O_RDONLY)  # as the import writing it would hold it
    fcntl.flock(live, fcntl.LOCK_EX)
    try:
        suite, _ = import_plan(plan, out)
    finally:
        os.close(live)
    assert stage.is_dir() and sorted(p.name for p in out.iterdir()) == sorted([stage.name, "imported"])
    results = load_results(out)  # the suite's two runs, the stage's run named and left out
    assert sorted(results.runs["label"]) == ["a", "b"] and set(results.runs["suite"]) == {"imported"}
    assert [u.split(": ")[0] for u in results.unreadable] == [str(stage / "a-s0")]
    assert "in a hidden folder, never read as results" in results.unreadable[0]
    import_plan(write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["tb"]}], name="again"), out)
    assert sorted(p.name for p in out.iterdir()) == ["again", "imported"]  # the stale stage removed


def test_two_imports_into_one_folder_at_once_both_finish(tmp_path):
    """An import's stage folder is locked while it is written: a second import into the same OUT, which
    removes stale stages, leaves it alone, and both suites arrive whole."""
    import subprocess
    import sys
    import time

    write_verl_events(tmp_path / "tb")
    first = write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["tb"]}])
    out, ready, go = tmp_path / "out", tmp_path / "ready", tmp_path / "go"
    code = ("import pathlib, time\nfrom gspo_bench.imports import write\nreal = write.write_run\n"
            "def paused(folder, *args):\n"
            f"    pathlib.Path({str(ready)!r}).touch()\n"
            f"    while not pathlib.Path({str(go)!r}).exists():\n        time.sleep(0.05)\n"
            "    real(folder, *args)\n"
            f"write.write_run = paused\nwrite.import_plan({str(first)!r}, {str(out)!r})\n")
    slow = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and slow.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), slow.communicate()
        [stage] = list(out.iterdir())
        import_plan(write_plan(tmp_path, [{"arm": "b", "seed": 0, "files": ["tb"]}], name="second"), out)
        assert stage.is_dir()
    finally:
        go.touch()
        _, err = slow.communicate(timeout=120)
    assert slow.returncode == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["imported", "second"]
    assert (out / "imported" / "a-s0" / "metrics.parquet").is_file()


def test_a_step_beyond_64_bits_is_refused(tmp_path):
    """A run folder's steps are 64-bit integers (TensorBoard's too): a larger step in JSON lines or a
    trainer_state.json is refused naming the file, the line or entry and the step; the largest one imports."""
    largest = 2**63 - 1
    write_verl_jsonl(tmp_path / "m.jsonl", [(1, verl_values(1)), (10**20, verl_values(2))])
    refused(plan_of(tmp_path, ["m.jsonl"]), tmp_path / "out", ImportError_,
            "m.jsonl line 2: step 100000000000000000000 is out of the range of a 64-bit integer")
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 2**63, "reward": 0.5}]}))
    refused(write_plan(tmp_path, [{"arm": "a", "seed": 0, "files": ["trainer_state.json"]}], mapping="trl"),
            tmp_path / "out", ImportError_, f"log_history[0]: step {2**63} is out of the range of a 64-bit integer")
    write_verl_jsonl(tmp_path / "m.jsonl", [(1, verl_values(1)), (largest, verl_values(2))])
    suite, _ = import_plan(plan_of(tmp_path, ["m.jsonl"]), tmp_path / "out")
    assert pd.read_parquet(suite / "grpo-s0" / "metrics.parquet")["step"].tolist() == [1, largest]


def test_event_file_checksums_are_verified(tmp_path):
    """Each record of an event file carries TensorBoard's masked CRC-32C of its length and of its data: a
    value changed after writing (one bit of a logged float), a changed length or a changed checksum is
    refused naming the file, the record and its byte; the checksum is TensorBoard's own to the bit."""
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboards

    from gspo_bench.imports.sources import crc32c, masked_crc32c

    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in [*range(300), 4095, 4096, 4097, 20_000]]
    assert int(crc32c([b"123456789"])[0]) == 0xE3069283  # CRC-32C's check value
    assert masked_crc32c(chunks).tolist() == [tensorboards(c) for c in chunks]
    write_verl_events(tmp_path / "tb", override={5: {"critic/score/mean": 0.8125}})
    [events] = (tmp_path / "tb").iterdir()
    raw = bytes(events.read_bytes())
    suite, _ = import_plan(plan_of(tmp_path, ["tb"]), tmp_path / "ok")
    assert pd.read_parquet(suite / "grpo-s0" / "metrics.parquet")["reward/mean"].iloc[4] == 0.8125
    value = struct.pack("<f", 0.8125)
    assert raw.count(value) == 1
    for at, words in ((raw.index(value), "its data fails its checksum"),  # 0.8125 -> 0.81250006
                      (0, "record 0 at byte 0: its length fails its checksum"),  # the first record's length
                      (8, "record 0 at byte 0: its length fails its checksum"),  # that length's checksum
                      (len(raw) - 1, "its data fails its checksum")):  # the last record's data checksum
        changed = bytearray(raw)
        changed[at] ^= 1
        events.write_bytes(bytes(changed))
        message = refused(plan_of(tmp_path, ["tb"]), tmp_path / "out", ImportError_, words)
        assert f"{events}: record " in message and "changed or damaged after it was written" in message


def test_the_report_of_a_reward_only_import_leaves_out_what_was_never_logged(tmp_path):
    """A mapping of the reward alone: the report is written, its figures of columns no run logged (clip
    fraction, ratio variances, drift, KL and entropy) left out and named with the column; where one arm
    logged the clip fraction and the other did not, Figure 2 draws the one and names the other."""
    import matplotlib.pyplot as plt

    from analysis.data.load import load_results
    from analysis.figures.curves import clip_fraction
    from analysis.figures.curves_interactive import clip_fraction as clip_fraction_html
    from analysis.report.writer import write_report

    (tmp_path / "mine.yaml").write_text("library: mine\ncolumns: {reward/mean: critic/score/mean}\nignore: ['*']\n")
    for arm in ("grpo", "gspo"):
        write_verl_events(tmp_path / arm, arm)
    plan = write_plan(tmp_path, [{"arm": arm, "seed": 0, "files": [arm]} for arm in ("grpo", "gspo")],
                      mapping="mine.yaml", compute={"flops_per_step": 1.0e9})
    suite, _ = import_plan(plan, tmp_path / "out")
    paths = write_report(load_results(suite), tmp_path / "report")
    text = paths["md"].read_text()
    left_out = text.split("## Figures left out (nothing to draw)\n\n")[1].split("\n\n")[0].splitlines()
    assert left_out == ["- Figure 2: clipped token fraction: no run logged clip/frac",
                        "- Importance-ratio variance (medians over seeds of rolling medians, log scale): no run logged "
                        "ratio/token_var or ratio/seq_var",
                        "- Expert-activation drift: no run logged moe/drift",
                        "- KL and entropy: no run logged kl/old_new or entropy/mean"], left_out
    assert sorted(p.name for p in paths["figures"].glob("*.png")) == [
        "clip_by_length.png", "fig1_reward_vs_compute.png", "fig3_routing_replay.png"]
    assert "fig2_clip_fraction" not in text and "no run logged clip/frac" in paths["html"].read_text()

    lines = [(s, verl_values(s)) for s in range(1, 4)]
    write_verl_jsonl(tmp_path / "with.jsonl", lines)
    write_verl_jsonl(tmp_path / "without.jsonl", [(s, {k: v for k, v in d.items() if k != "actor/pg_clipfrac"})
                                                  for s, d in lines])
    plan = write_plan(tmp_path, [{"arm": "grpo", "seed": 0, "files": ["with.jsonl"]},
                                 {"arm": "gspo", "seed": 0, "files": ["without.jsonl"]}], name="half")
    suite, _ = import_plan(plan, tmp_path / "out")
    results = load_results(suite)
    ax = clip_fraction(results.metrics)
    try:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["grpo"] and ax.get_title().endswith("not logged by gspo")
        [bar] = ax.patches
        assert bar.get_height() == pytest.approx(np.mean([verl_values(s)["actor/pg_clipfrac"] for s in (1, 2, 3)]))
    finally:
        plt.close(ax.figure)
    [figure] = clip_fraction_html(results)
    assert [trace.x[0] for trace in figure.data if trace.type == "bar"] == ["grpo"]
    assert figure.layout.title.text.endswith("; not logged by gspo")


def test_event_files_are_read_in_the_order_they_were_written(tmp_path):
    """A writer numbers its files of one second .1, .2, ... .10: the tenth comes after the ninth (plain name
    order put ".10" first, and a resumed run's later file was read before the one it continues)."""
    from gspo_bench.imports.sources import source_files

    names = [f"events.out.tfevents.1795896752.host.29606.{n}" for n in (2, 9, 10, 11)]
    names += ["events.out.tfevents.1795896753.host.29606.1"]  # the next second
    for name in reversed(names):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in source_files(tmp_path)] == names
