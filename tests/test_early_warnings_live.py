"""The shipped early-warning rules (analysis.evidence.early_warnings): the live watch fires where the offline
scoring's alarm is, once per run; the rules file round-trips and leaves out rules that cannot fire; every shipped
rule's signal reaches the progress display; the progress display prints the alarm line; per-run alarms on a
hand-made suite (first alarm ahead of the onset, none after it)."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from analysis.evidence.early_warnings import (
    BURST,
    SHIPPED_RULES,
    AlarmRule,
    AlarmWatch,
    LiveWarnings,
    Scored,
    ShippedRule,
    alarm_step,
    clip_burstiness,
    load_rules,
    rules_table,
    runs_alarms,
    with_derived,
)
from gspo_bench.config import BudgetConfig
from gspo_bench.suite.launch import PROGRESS_COLUMNS
from gspo_bench.suite.progress import SuiteProgress


def shipped(signal: str, threshold: float, direction: str = "above", persist: int = 2) -> ShippedRule:
    rule = AlarmRule(signal, threshold, direction, persist)  # type: ignore[arg-type]
    return ShippedRule(rule, "hand", ("pilot",), ("stage5",), Scored(rule, 10, 4, 7.0, 20, 2, 0.7, 0.6, 0.8))


def test_the_live_watch_fires_where_the_offline_alarm_is_and_once():
    """Values 5, 0, 5, 5, NaN, 5, 5 against 'above 4 on 2 steps': the offline alarm is step 4; the watch fires
    there and not again at step 7 (after a NaN broke the streak)."""
    values = [5.0, 0.0, 5.0, 5.0, math.nan, 5.0, 5.0]
    rule = shipped("grad/norm", 4.0)
    assert alarm_step(rule.rule, np.arange(1, 8, dtype=float), np.array(values)) == 4.0
    watch = AlarmWatch([rule])
    fired = [step for step, value in enumerate(values, 1) if watch.update({"step": step, "grad/norm": value})]
    assert fired == [4]
    below = AlarmWatch([shipped("lag/ess", 0.2, "below", persist=1)])
    assert [bool(below.update({"lag/ess": v})) for v in (0.5, None, 0.1, 0.1)] == [False, False, True, False]


def test_the_rules_file_round_trips_and_keeps_only_rules_that_fire(tmp_path):
    rules = [shipped("grad/norm", 4.0), shipped("lag/ess", 0.115, "below"), shipped("clip/frac", math.nan)]
    rules_table(rules).to_csv(tmp_path / "rules.csv", index=False)
    loaded = load_rules(tmp_path / "rules.csv")
    assert loaded == rules[:2]


def test_every_shipped_rule_reaches_the_display_and_says_its_held_out_scores():
    """The package's rules exist, each on a signal the launchers send to the display, and the alarm line names
    the value, the rule and the held-out false-alarm rate."""
    rules = load_rules(SHIPPED_RULES)
    assert rules and {r.rule.signal for r in rules} - {BURST} <= set(PROGRESS_COLUMNS)
    assert "clip/frac" in PROGRESS_COLUMNS  # the live watch derives BURST from it
    lines = LiveWarnings([shipped("lag/ess", 0.115, "below")])("run-a", {"step": 3, "lag/ess": 0.05})
    lines += LiveWarnings([shipped("lag/ess", 0.115, "below")])("run-a", {"step": 4, "lag/ess": 0.05})
    assert lines == [] and "lag/ess" in SHIPPED_RULES.read_text()
    live = LiveWarnings([shipped("lag/ess", 0.115, "below")])
    said = [live("run-a", {"step": s, "lag/ess": 0.05}) for s in (3, 4, 5)]
    assert said[0] == [] and said[2] == [] and len(said[1]) == 1
    assert said[1][0].startswith("early warning at step 4: lag/ess = 0.05 (lag/ess at or below 0.115 on 2")
    assert "it warned 4 of 10 failed runs, a median 7 steps ahead, and fired on 10% of the 20 runs that held" in said[1][0]


def test_the_progress_display_prints_the_alarm_once_per_run():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=300)
    budget = BudgetConfig(kind="steps", value=10)
    progress = SuiteProgress(console, {"a": budget, "b": budget}, watch=LiveWarnings([shipped("grad/norm", 4.0)]))
    spent = {"compute/cum_tokens": 0.0, "compute/cum_flops": 0.0}
    for step in (1, 2, 3):
        progress.step("a", {"step": step, "grad/norm": 9.0, **spent})
        progress.step("b", {"step": step, "grad/norm": 1.0, **spent})
    lines = [line for line in out.getvalue().splitlines() if "early warning" in line]
    assert lines == [lines[0]] and lines[0].startswith("[a] early warning at step 2: grad/norm = 9")


def test_runs_alarms_on_a_hand_suite():
    """Run f failed at step 6 with grad/norm alarms at step 3 (lead 3) and lag/ess at step 5; run g failed at
    step 3 with its only alarm at step 4 (after the onset: no warning); run h held and alarmed at step 2."""
    steps = np.arange(1, 9)
    metrics = pd.concat([
        pd.DataFrame({"suite": "s", "label": "f", "seed": 0, "step": steps,
                      "grad/norm": [0, 9, 9, 0, 0, 0, 0, 0], "lag/ess": [1, 1, 1, 0.1, 0.1, 0.1, 1, 1]}),
        pd.DataFrame({"suite": "s", "label": "g", "seed": 0, "step": steps,
                      "grad/norm": [0, 0, 9, 9, 0, 0, 0, 0], "lag/ess": 1.0}),
        pd.DataFrame({"suite": "s", "label": "h", "seed": 0, "step": steps,
                      "grad/norm": [9, 9, 0, 0, 0, 0, 0, 0], "lag/ess": 1.0})])
    classes = pd.DataFrame({"suite": "s", "label": ["f", "g", "h"], "seed": 0,
                            "outcome": ["collapsed", "degraded", "held"], "step": [6.0, 3.0, math.nan]})
    rules = [shipped("grad/norm", 4.0), shipped("lag/ess", 0.2, "below")]
    found = runs_alarms(metrics, classes, rules).set_index("label")
    assert found.loc["f", "first"] == "grad/norm" and found.loc["f", "lead"] == 3.0
    assert found.loc["f", "alarms"] == "grad/norm @ 3, lag/ess @ 5"
    assert found.loc["g", "first"] == "" and np.isnan(found.loc["g", "lead"]) and found.loc["g", "alarms"] == ""
    assert found.loc["h", "alarms"] == "grad/norm @ 2" and np.isnan(found.loc["h", "onset"])
    assert found["carried"].tolist() == [2, 2, 2]


@pytest.mark.parametrize("column", ["threshold", "persist"])
def test_a_rules_file_without_a_column_is_refused(tmp_path, column):
    rules_table([shipped("grad/norm", 4.0)]).drop(columns=column).to_csv(tmp_path / "r.csv", index=False)
    with pytest.raises(ValueError, match=f"not a rules file .*no column {column}"):
        load_rules(tmp_path / "r.csv")


def test_clip_burstiness_by_hand_and_the_live_watch_derives_it_as_offline():
    """Window 10: steps 1-10 have no value; step 11's clip 0.3 over the median 0.1 of the ten before is 3;
    a NaN step has none and is skipped in later baselines; a baseline of 0 is raised to the floor 0.05 / 3."""
    clip = np.array([0.1] * 10 + [0.3, math.nan, 0.1])
    found = clip_burstiness(clip)
    assert np.isnan(found[:10]).all() and found[10] == pytest.approx(3.0) and np.isnan(found[11])
    assert found[12] == pytest.approx(1.0)  # the median of 0.1 x 9 and 0.3 is 0.1
    assert clip_burstiness(np.array([0.0] * 10 + [0.05]))[-1] == pytest.approx(3.0)
    frame = pd.DataFrame({"suite": "s", "label": "a", "seed": 0, "step": np.arange(1, 14), "clip/frac": clip})
    shuffled = with_derived(frame.sample(frac=1.0, random_state=0))  # any row order: computed in step order
    assert np.allclose(shuffled.sort_values("step")[BURST].to_numpy(), found, equal_nan=True)
    # the baseline is the ten steps before, never the step itself: 0.45 over the median 0.15 of 0.1 x 5 and
    # 0.2 x 5 is 3 (with 0.45 in its own baseline it would be 0.45 / 0.2 = 2.25, below the rule's 2.5)
    steps = np.array([0.1] * 5 + [0.2] * 5 + [0.45])
    assert clip_burstiness(steps)[-1] == pytest.approx(3.0)
    live = LiveWarnings([shipped(BURST, 2.5, persist=1)])
    said = [live("a", {"step": step, "clip/frac": value}) for step, value in enumerate(steps, 1)]
    assert [i + 1 for i, lines in enumerate(said) if lines] == [11]
    assert said[10][0].startswith("early warning at step 11: clip/frac_burst = 3 ")
    again = LiveWarnings([shipped(BURST, 0.9, persist=1)])  # NaN steps skipped as offline: step 13 at 1
    assert [bool(again("b", {"step": i, "clip/frac": v})) for i, v in enumerate(clip, 1)][10:] == [True, False, False]


def test_the_shipped_rules_were_chosen_on_runs_they_were_not_scored_on():
    """Held out by construction: each reading's choice folders and scored folders are disjoint
    (experiments/warnings/score.py), and so are the suites the shipped file names."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "experiments" / "warnings" / "score.py"
    spec = importlib.util.spec_from_file_location("warnings_score", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for choose, score in script.READINGS.values():
        assert choose and score and not set(choose) & set(score)
    for rule in load_rules():
        assert rule.chosen_on and rule.scored_on and not set(rule.chosen_on) & set(rule.scored_on)


def test_a_rule_in_a_tasks_own_units_fires_only_on_that_task():
    """A response-length threshold chosen on sort runs stays silent on a countdown run (its responses are twice
    as long), live and in the report's choice of rules; a rule on a unit-free signal fires on either."""
    length = ShippedRule(AlarmRule("response/len_mean", 7.44, "above", 1), "hand", ("a",), ("b",),
                         Scored(AlarmRule("response/len_mean", 7.44), 1, 1, 1.0, 1, 0, 0.5, 0.4, 0.6), ("sort",))
    ess = shipped("lag/ess", 0.2, "below", persist=1)
    assert length.applies_to("sort") and not length.applies_to("countdown") and length.applies_to(None)
    assert ess.applies_to("countdown")
    live = LiveWarnings([length, ess])
    row = {"step": 1, "response/len_mean": 9.5, "lag/ess": 0.1}
    lines = live("c", row, "countdown")
    assert len(lines) == 1 and lines[0].startswith("early warning at step 1: lag/ess = 0.1 ")
    assert len(LiveWarnings([length, ess])("s", row, "sort")) == 2
    assert {r.rule.signal: r.tasks for r in load_rules()}["lag/ess"] == ("sort",)  # the shipped file names its task


def test_the_report_names_the_rules_a_task_leaves_out():
    from analysis.report.warnings_text import left_out_text

    length = ShippedRule(AlarmRule("response/len_mean", 7.44, "above", 1), "hand", ("a",), ("b",),
                         Scored(AlarmRule("response/len_mean", 7.44), 1, 1, 1.0, 1, 0, 0.5, 0.4, 0.6), ("sort",))
    assert left_out_text([], ["countdown"]) == ""
    assert left_out_text([length], ["countdown"]).startswith(
        "Left out here: response/len_mean (chosen on sort). Each is measured in its task's own units")


def test_the_reports_provenance_marks_in_sample_runs_in_bold_and_escapes_suite_names():
    from analysis.report.warnings_text import provenance_text

    rule = shipped("lag/ess", 0.1, "below")  # chosen on suite "pilot", scored on "stage5"
    assert "**In-sample here**: the runs of pilot chose the thresholds" in provenance_text([rule], {"pilot"})
    assert "These runs (stage5) are the rules' held-out runs" in provenance_text([rule], {"stage5"})
    assert "took no part in choosing the rules" in provenance_text([rule], {"other_*suite*"})
    assert provenance_text([], {"x"}) == "No shipped rule applies to these runs."


def test_a_resumed_runs_watch_carries_its_rows_from_before_the_stop(tmp_path):
    """A run stopped after step 2 and resumed: its rows 1-2 (from metrics.parquet) reach the watch before the
    first new row, so a 2-row streak spanning the stop fires at step 3, as it would have without a stop, and an
    alarm that fired before the stop is said once as such, not again; rows the resumed run rewrote (step >= 3 of
    the folder) are not read twice. A run without earlier rows is watched from its first row."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=300)
    budget = BudgetConfig(kind="steps", value=10)
    spent = {"compute/cum_tokens": 0.0, "compute/cum_flops": 0.0}
    run_dir = tmp_path / "a"
    run_dir.mkdir()
    pd.DataFrame([{"step": s, "grad/norm": g, "lag/ess": e, **spent}
                  for s, g, e in ((1, 9.0, 1.0), (2, 9.0, 0.1), (3, 0.0, 1.0))]).to_parquet(run_dir / "metrics.parquet")
    rules = [shipped("grad/norm", 4.0), shipped("lag/ess", 0.2, "below")]
    progress = SuiteProgress(console, {"a": budget, "b": budget}, watch=LiveWarnings(rules),
                             run_dirs={"a": run_dir, "b": tmp_path / "b"})
    for step, ess in ((3, 0.1), (4, 0.1)):
        progress.step("a", {"step": step, "grad/norm": 0.0, "lag/ess": ess, **spent})
        progress.step("b", {"step": step, "grad/norm": 9.0, "lag/ess": 1.0, **spent})
    lines = [line for line in out.getvalue().splitlines() if "early warning" in line]
    assert [line.split(":")[0] for line in lines] == ["[a] before the resume", "[a] early warning at step 3", "[b] early warning at step 4"]
    assert "grad/norm = 9" in lines[0] and "lag/ess = 0.1" in lines[1]
