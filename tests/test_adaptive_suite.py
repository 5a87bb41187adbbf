"""An adaptive suite (`adaptive:`, issue #60): the rule's declared options (a held end confirmed, a stated
factor), its rounds equal to the one-run-at-a-time rule, its next placement on hand outcomes judged from run
folders, the log its rounds are conducted by, a resume that makes the same choices, and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from analysis.evidence.adaptive import GridLevel, Rule, next_level_for, next_round, replay
from analysis.evidence.adaptive_suite import AdaptivePlacer, GridRun, outcomes, place
from gspo_bench.cli import app
from gspo_bench.config import SuiteError, parse_suite
from gspo_bench.rundir.names import run_folder_name
from gspo_bench.suite import adaptive as conduct
from tests.helpers.cli import write_suite
from tests.helpers.runs import tiny_suite
from tests.helpers.stability import FALLING, swept_run

T, F = True, False
VALUES = (1.0, 2.0, 4.0, 8.0, 16.0)
SEEDS = (0, 1, 2, 3)
SUITE = "synth"


def grid(*outcomes_: tuple[bool, ...], doses=VALUES) -> list[GridLevel]:
    return [GridLevel(float(d), tuple(o)) for d, o in zip(doses, outcomes_, strict=True)]


def rounds_of(levels: list[GridLevel], rule: Rule) -> list[list[int]]:
    """The rule run round by round (`next_round`) on a grid already run: each round's levels."""
    taken: list[list[bool]] = [[] for _ in levels]
    rounds = []
    while True:
        left = [len(level.outcomes) - len(runs) for level, runs in zip(levels, taken, strict=True)]
        asked = next_round(taken, left, [level.dose for level in levels], rule)
        if not asked:
            return rounds
        for level in asked:
            taken[level].append(levels[level].outcomes[len(taken[level])])
        rounds.append(asked)


# ------------------------------------------------------------------ the rule's options and its rounds

def test_a_held_end_is_confirmed_to_confirm_seeds_before_the_rule_stops():
    """Held end level 1 on its 2 first seeds; with confirm_seeds 4 it takes seeds 3 and 4 one at a time; its
    fourth fails, so level 1 is open and the bracket falls back to level 0, which is confirmed in turn."""
    levels = grid((F, F, F, F), (F, F, F, T), (T, T, T, T), (T,) * 4, (T,) * 4)
    plain = [level for level, _, _ in replay(levels)]
    assert plain == [0, 0, 4, 4, 2, 2, 1, 1]
    confirmed = [level for level, _, _ in replay(levels, Rule(confirm_seeds=4))]
    assert confirmed == [0, 0, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0]


def test_a_stated_factor_stops_the_bisection_once_the_bracket_is_within_it():
    """Held at 1, failed at 16 after the first round: a factor of 16 stops there, one just under it bisects; a
    factor of 4 stops once level 2 (dose 4, the log middle) held, the bracket (4, 16) within it."""
    levels = grid((F, F), (F, F), (F, F), (F, F), (T, T))
    doses = list(VALUES)
    taken = [[F, F], [], [], [], [T, T]]
    left = [0, 2, 2, 2, 0]
    assert next_level_for(taken, left, doses, Rule(factor=16.0)) is None
    assert next_level_for(taken, left, doses, Rule(factor=15.9)) == 2
    assert [level for level, _, _ in replay(levels, Rule(factor=4.0))] == [0, 0, 4, 4, 2, 2]
    assert [level for level, _, _ in replay(levels)] == [0, 0, 4, 4, 2, 2, 3, 3]


@pytest.mark.parametrize("rule", [Rule(), Rule(confirm_seeds=4), Rule(first_seeds=1), Rule(factor=3.0)])
def test_rounds_ask_for_the_runs_of_the_one_at_a_time_rule_in_its_order(rule):
    levels = grid((F, F, T, F), (F, F, F, F), (T, F, T, F), (T, T, F, T), (T,) * 4)
    rounds = rounds_of(levels, rule)
    assert [level for r in rounds for level in r] == [level for level, _, _ in replay(levels, rule)]
    assert rounds[0] == [0] * rule.first_seeds + [4] * rule.first_seeds  # the first round: both ends


# ------------------------------------------------------------------ placed from run folders

def grid_runs(arms: tuple[str, ...] = ("grpo", "gspo")) -> list[GridRun]:
    """Every run of a 2-arm suite over VALUES x SEEDS, as the planner orders them: level, seed, arm."""
    rows = []
    for level, value in enumerate(VALUES):
        for seed in SEEDS:
            for arm in arms:
                label = f"{arm}@noise={value}"
                rows.append(GridRun(run_folder_name(label, seed), label, arm, level, seed))
    return rows


FAILS = {"grpo": lambda level, seed: level >= 2 or (level, seed) == (1, 1),  # one failure below its boundary
         "gspo": lambda level, seed: level >= 4}


def write_runs(root: Path, runs, fails=FAILS) -> None:
    """The runs' folders as real runs leave them: falling rewards where `fails` says, rising elsewhere."""
    for run in runs:
        columns = {"reward/mean": FALLING} if fails[run.arm](run.level, run.seed) else None
        swept_run(root, run.arm, run.seed, {"noise": VALUES[run.level]}, columns=columns, suite=SUITE,
                  kind=(run.arm, False))


def conducted(root: Path, rule: Rule, budget: int | None = None) -> list[list[str]]:
    """The rounds `place` asks for, each round's runs written before the next is placed."""
    grid, rounds = grid_runs(), []
    while True:
        counted = {name for names in rounds for name in names}
        asked = place(root / SUITE, grid, counted, list(VALUES), rule, budget).names
        if not asked:
            return rounds
        write_runs(root, [run for run in grid if run.name in asked])
        rounds.append(asked)


def test_outcomes_are_judged_from_the_folders_and_only_for_the_counted_runs(tmp_path):
    runs = grid_runs()
    write_runs(tmp_path, [r for r in runs if r.level in (0, 1) and r.seed < 2])
    counted = {r.name for r in runs if r.level in (0, 1) and r.seed < 2 and r.arm == "grpo"}
    seen = outcomes(tmp_path / SUITE, runs, counted)
    assert set(seen) == counted  # the gspo runs are there, but not counted
    assert {name: bad for name, bad in seen.items()} == {
        run_folder_name("grpo@noise=1.0", 0): False, run_folder_name("grpo@noise=1.0", 1): False,
        run_folder_name("grpo@noise=2.0", 0): False, run_folder_name("grpo@noise=2.0", 1): True}


def test_a_run_in_a_degenerate_cell_says_nothing_and_its_level_takes_the_next_seed(tmp_path):
    """grpo at level 0, seed 0: inert (reward and gradient 0 at every step), so it says nothing; its level has
    one informative run of the first round's 2, and the next round gives it seed 2 before anything else."""
    runs = grid_runs(("grpo",))
    first = [r for r in runs if r.level in (0, 4) and r.seed < 2]
    write_runs(tmp_path, first[1:])
    swept_run(tmp_path, "grpo", 0, {"noise": 1.0}, columns={"reward/mean": 0.0, "grad/norm": 0.0}, suite=SUITE,
              kind=("grpo", False))
    counted = {r.name for r in first}
    assert outcomes(tmp_path / SUITE, runs, counted)[run_folder_name("grpo@noise=1.0", 0)] is None
    assert place(tmp_path / SUITE, runs, counted, list(VALUES), Rule()).names == [run_folder_name("grpo@noise=1.0", 2)]


def test_the_next_placement_on_hand_outcomes(tmp_path):
    """Round 1: both arms, levels 0 and 4, seeds 0 and 1. grpo then holds at 1 and fails at 16: bisection
    places level 2 (4, the log middle); gspo holds at 1 and fails at 16 too: level 2 as well."""
    rounds = conducted(tmp_path, Rule())
    name = run_folder_name
    assert rounds[0] == [name(f"{arm}@noise={v}", s) for arm in ("grpo", "gspo") for v in (1.0, 16.0) for s in (0, 1)]
    assert rounds[1] == [name(f"{arm}@noise=4.0", s) for arm in ("grpo", "gspo") for s in (0, 1)]
    # grpo failed at 4 (level 2): level 1 next; gspo held at 4: level 3 next
    assert rounds[2] == [name("grpo@noise=2.0", 0), name("grpo@noise=2.0", 1), name("gspo@noise=8.0", 0),
                         name("gspo@noise=8.0", 1)]
    # grpo's level 1 is open on (F, T): one more seed at a time while it stays open; gspo stopped at (8, 16)
    assert rounds[3:] == [[name("grpo@noise=2.0", 2)], [name("grpo@noise=2.0", 3)]]
    standing = place(tmp_path / SUITE, grid_runs(), {n for r in rounds for n in r}, list(VALUES), Rule()).standing
    rows = {row["arm"]: row for row in standing.to_dict("records")}
    assert rows["gspo"]["kind"] == "bracket" and (rows["gspo"]["held"], rows["gspo"]["failed"]) == (8.0, 16.0)
    assert (rows["grpo"]["held"], rows["grpo"]["failed"], rows["grpo"]["held_runs"]) == (1.0, 4.0, 2)
    assert rows["grpo"]["stopped"] and rows["grpo"]["runs"] == 10


def test_the_budget_cuts_the_rounds_and_says_so(tmp_path):
    rounds = conducted(tmp_path, Rule(), budget=10)
    assert [len(r) for r in rounds] == [8, 2]
    settings = SimpleNamespace(first_seeds=2, confirm_seeds=None, factor=None, spacing="index", budget=10)
    grid = [(r.name, r.label, r.arm, r.level, r.seed) for r in grid_runs()]
    names, lines = AdaptivePlacer(settings, VALUES)(tmp_path / SUITE, grid, {n for r in rounds for n in r})
    assert names == [] and lines[-1] == "the budget (10 runs) is spent: it leaves out 4 more runs the rule asked for"
    assert lines[0].startswith("grpo: held at 1 (2 runs")  # spaced by index, shown by value


# ------------------------------------------------------------------ conducted: the log and a resume

SETTINGS = SimpleNamespace(first_seeds=2, confirm_seeds=None, factor=None, spacing="log", budget=None)


def session_of(root: Path, resume: bool) -> SimpleNamespace:
    """What run_adaptive reads of a session, its grid as the planner would give it."""
    specs = [SimpleNamespace(run_dir=root / SUITE / run.name, entry=SimpleNamespace(run_label=run.label), arm=run.arm,
                             seed=run.seed, sweep={"noise": VALUES[run.level]}) for run in grid_runs()]
    return SimpleNamespace(suite=SimpleNamespace(sweep={"x.noise": list(VALUES)}, name=SUITE), suite_dir=root / SUITE,
                           resume=resume, grid=specs)


def fake_rounds(session: SimpleNamespace, stop_at: int | None = None):
    """A round runner that writes each round's runs as synthetic folders (the ones not there yet); with
    `stop_at`, the round of that index stops (KeyboardInterrupt) after writing half its runs."""
    by_name = {spec.run_dir.name: spec for spec in session.grid}

    def run_round(asked, index):
        todo = [GridRun(n, by_name[n].entry.run_label, by_name[n].arm, VALUES.index(by_name[n].sweep["noise"]),
                        by_name[n].seed) for n in asked if not (session.suite_dir / n).exists()]
        if index == stop_at:
            write_runs(session.suite_dir.parent, todo[:len(todo) // 2])
            raise KeyboardInterrupt
        write_runs(session.suite_dir.parent, todo)
        return [(by_name[run.name], {"status": "done"}) for run in todo]
    return run_round


def conduct_in(root: Path, resume: bool, stop_at: int | None = None, say=None) -> None:
    session = session_of(root, resume)
    conduct.run_adaptive(session, AdaptivePlacer(SETTINGS, VALUES), say or (lambda line: None),
                         fake_rounds(session, stop_at))


def test_a_resumed_adaptive_suite_makes_the_same_choices(tmp_path):
    lines: list[str] = []
    conduct_in(tmp_path / "whole", False, say=lines.append)
    log = json.loads((tmp_path / "whole" / SUITE / conduct.LOG).read_text())
    assert [len(r) for r in log["rounds"]] == [8, 4, 4, 1, 1]
    assert lines[-2].startswith("  grpo: held at 1 (2 runs") and "stopped" in lines[-1]
    after_first = lines.index("adaptive: after round 1:")  # the standing between rounds, each arm placing
    assert lines[after_first + 1:after_first + 3] == [
        "  grpo: held at 1 (2 runs, failure rate <= 78%), most failed at 16 (2 runs); 4 runs judged; placing",
        "  gspo: held at 1 (2 runs, failure rate <= 78%), most failed at 16 (2 runs); 4 runs judged; placing"]
    with pytest.raises(KeyboardInterrupt):
        conduct_in(tmp_path / "cut", False, stop_at=1)
    cut = json.loads((tmp_path / "cut" / SUITE / conduct.LOG).read_text())["rounds"]
    assert cut == log["rounds"][:2]  # the round is logged before its runs start
    conduct_in(tmp_path / "cut", True)
    assert json.loads((tmp_path / "cut" / SUITE / conduct.LOG).read_text()) == log
    assert sorted(p.name for p in (tmp_path / "cut" / SUITE).iterdir()) == sorted(
        p.name for p in (tmp_path / "whole" / SUITE).iterdir())


def test_a_resume_refuses_a_log_its_runs_no_longer_give(tmp_path):
    conduct_in(tmp_path, False)
    flipped = {**FAILS, "gspo": lambda level, seed: True}  # gspo now fails at the lowest level
    write_runs(tmp_path, [r for r in grid_runs() if r.arm == "gspo" and r.level == 0 and r.seed < 2], flipped)
    with pytest.raises(conduct.AdaptiveError, match="round 2 logged 4 runs .* the rule now asks for 2"):
        conduct_in(tmp_path, True)


# ------------------------------------------------------------------ the suite file and the command line

def adaptive_suite(tmp_path: Path, **adaptive) -> dict:
    return tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}], seeds=[0, 1], warm_start={"enabled": False},
                      budget={"kind": "steps", "value": 1}, sweep={"train.lr": [1.0e-4, 1.0e-3]},
                      adaptive={"first_seeds": 1, **adaptive})


@pytest.mark.parametrize(("change", "message"), [
    ({"sweep": {"train.lr": [1.0e-3, 1.0e-4]}}, "must be numbers > 0, increasing"),
    ({"sweep": {"train.lr": [1.0e-4, 1.0e-3], "train.grad_clip": [1.0, 2.0]}}, "along one swept setting"),
    ({"adaptive": {"first_seeds": 3}}, "more than the suite's 2 seeds"),
    ({"adaptive": {"spacing": "index", "factor": 2.0}}, "needs spacing: log"),
    ({"sweep": {"train.lr": [1.0e-4]}}, "two levels or more"),
    ({"tuning": {"trials": 2, "budget_share": 0.5, "seeds": [5], "select": {"metric": "sort", "rule": "final"},
                 "spaces": {"all": {"lr": {"log_uniform": [1e-4, 1e-3]}}}}}, "tuning: together are not supported"),
])
def test_a_bad_adaptive_suite_is_refused_naming_why(tmp_path, change, message):
    data = {**adaptive_suite(tmp_path), **change}
    with pytest.raises(SuiteError, match=message):
        parse_suite(data)


def test_run_places_an_adaptive_suite_round_by_round_and_resume_replays_it(tmp_path):
    """One arm, two learning rates, seeds 0 and 1, one seed per level: a 1-step run is too short to judge, so
    each run says nothing and the rule spends the next seed, then stops with no seed left: 2 rounds of 2."""
    path, out = write_suite(tmp_path / "suite.yaml", adaptive_suite(tmp_path)), tmp_path / "out"
    planned = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
    assert planned.exit_code == 0 and "the rule places at most 4 of these 4 runs" in " ".join(planned.output.split())
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    log = json.loads((out / "tiny" / conduct.LOG).read_text())
    assert log["rounds"] == [["grpo@lr=0.0001-s0", "grpo@lr=0.001-s0"], ["grpo@lr=0.0001-s1", "grpo@lr=0.001-s1"]]
    assert "adaptive: the rule asks for no more runs after 2 rounds and 4 runs" in result.output
    assert "grpo: no bracket yet; 0 runs judged; stopped" in result.output
    again = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert again.exit_code == 2 and "use --resume to continue the adaptive suite" in again.output
    resumed = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "adaptive round 2: 2 runs (0 to do)" in resumed.output
    only = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--resume", "--only", "grpo"])
    assert only.exit_code == 2 and "--only and --seeds do not apply" in only.output


def test_the_report_says_how_the_runs_were_placed_and_where_each_arm_stands(tmp_path):
    from analysis import load_results
    from analysis.data.adaptive import adaptive_records
    from analysis.report.adaptive_text import adaptive_text

    conduct_in(tmp_path, False)
    declared = {"name": SUITE, "objectives": [{"name": "grpo"}, {"name": "gspo"}], "seeds": list(SEEDS),
                "sweep": {"x.noise": list(VALUES)}, "adaptive": {"first_seeds": 2, "confirm_seeds": 4, "budget": 50}}
    (tmp_path / SUITE / "suite.yaml").write_text(yaml.safe_dump(declared))
    text = adaptive_text(adaptive_records(load_results(tmp_path / SUITE)))
    assert ("Suite synth placed its runs by the adaptive rule it declares (first_seeds 2, confirm_seeds 4, spacing "
            "log, budget 50 runs): 5 rounds of 8, 4, 4, 1, 1 runs, 18 runs in all against the grid's 40 (2 arms x 5 "
            "levels x 4 seeds, 45%).") in text
    assert "- gspo: held at 8 (2 runs, failure rate <= 78%), most failed at 16 (2 runs); 8 runs judged; stopped" in text
