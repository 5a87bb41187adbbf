"""An adaptive suite (`adaptive:`) conducted round by round: a placer (the command line hands in
`analysis.AdaptivePlacer`, the rule and its judge, which live above the suite layer) names the runs of the
next round from the runs of the rounds before it; the session runs them, and asks again, until the placer
names none.

Each round is written to OUT/<suite>/adaptive.json before its runs start. A `--resume` replays the log: it
asks the placer for each logged round again, from the runs of the rounds before it only, and refuses to go on
where the answer differs from the log (a run's outcome changed under it); then it finishes the logged
rounds' unfinished runs and goes on. So a resumed suite makes the same choices as one never stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gspo_bench.config.schema import ADAPTIVE_LOG
from gspo_bench.rundir.folder import atomic_write_text

if TYPE_CHECKING:
    from gspo_bench.config import RunSpec

LOG = ADAPTIVE_LOG
ENDED = ("done", "collapsed")  # a round's runs must end so before the next round is placed

# (run folder, run label, arm, level index, seed): one run the rule may ask for
GridRow = tuple[str, str, str, int, int]
# the placer: (suite folder, the grid, the run folders it may judge) -> (the next round's run folders, a line
# per arm on where it stands)
Placer = Callable[[Path, Sequence[GridRow], set[str]], tuple[list[str], list[str]]]
# what builds it: (the suite's `adaptive:` settings, the swept values) -> Placer
PlacerType = Callable[[Any, Sequence[Any]], Placer]
# a round's runs (folders) launched, and their (planned run, final status): (names, round index) -> outcomes
RoundRunner = Callable[[list[str], int], "list[tuple[RunSpec, dict]]"]


class AdaptiveError(ValueError):
    """An adaptive suite that cannot go on as logged."""


def grid_rows(runs: Sequence[RunSpec], values: Sequence[object]) -> list[GridRow]:
    """The grid's rows from the suite's planned runs (one swept setting; `values` its levels in order)."""
    rows = []
    for run in runs:
        (value,) = run.sweep.values()
        rows.append((run.run_dir.name, run.entry.run_label, run.arm, list(values).index(value), run.seed))
    return rows


def read_log(suite_dir: Path) -> list[list[str]]:
    """The rounds logged so far ([] where there is no log); AdaptiveError for a damaged one."""
    path = suite_dir / LOG
    if not path.is_file():
        return []
    try:
        rounds = json.loads(path.read_text())["rounds"]
    except (ValueError, KeyError, TypeError) as err:
        raise AdaptiveError(f"{path}: not an adaptive suite's log ({err}); move it away to start the suite afresh") from None
    if not isinstance(rounds, list) or not all(isinstance(r, list) for r in rounds):
        raise AdaptiveError(f"{path}: rounds is not a list of lists of run folders")
    return [[str(name) for name in r] for r in rounds]


def write_log(suite_dir: Path, rounds: list[list[str]], standing: list[str]) -> None:
    suite_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(suite_dir / LOG, json.dumps({"rounds": rounds, "standing": standing}, indent=1))


def logged_round(index: int, asked: list[str], logged: list[str], path: Path) -> None:
    """AdaptiveError where the placer now asks round `index` (0-based) for other runs than the log holds."""
    if asked != logged:
        raise AdaptiveError(f"{path}: round {index + 1} logged {len(logged)} runs ({', '.join(logged[:3])}...), the "
                            f"rule now asks for {len(asked)} ({', '.join(asked[:3])}...): a finished run's outcome "
                            "changed since; start the suite afresh in another --out")


def run_adaptive(session: Any, placer: Placer, say: Callable[[str], None], run_round: RoundRunner
                 ) -> list[tuple[RunSpec, dict]]:
    """Conduct `session`'s adaptive suite (module docstring; a Session: its suite, suite_dir, resume and grid);
    every run's (planned run, final status). A round with a run that did not end (done or collapsed) stops the
    suite there: the rule waits for its outcome."""
    suite_dir = session.suite_dir
    grid = grid_rows(session.grid, next(iter(session.suite.sweep.values())))
    rounds = read_log(suite_dir) if session.resume else []
    outcomes: list[tuple[RunSpec, dict]] = []
    index = 0
    while True:
        counted = {name for names in rounds[:index] for name in names}
        asked, standing = placer(suite_dir, grid, counted)
        if index < len(rounds):
            logged_round(index, asked, rounds[index], suite_dir / LOG)
        elif not asked:
            write_log(suite_dir, rounds, standing)
            say(f"adaptive: the rule asks for no more runs after {index} rounds and {len(counted)} runs")
            for line in standing:
                say(f"  {line}")
            return outcomes
        else:
            rounds.append(asked)
            write_log(suite_dir, rounds, standing)
            if index:  # where the arms stand after the rounds so far, before the next one
                say(f"adaptive: after round {index}:")
                for line in standing:
                    say(f"  {line}")
        done = run_round(asked, index)
        outcomes += done
        unended = [run.run_dir.name for run, status in done if status.get("status") not in ENDED]
        if unended:
            say(f"adaptive: round {index + 1}'s runs {', '.join(unended)} did not end: the rule waits for their "
                "outcomes; continue with --resume")
            return outcomes
        index += 1


def still_to_do(session: Any, names: list[str]) -> list[RunSpec]:
    """The runs of `names` (folders of the session's grid) not finished yet, checked as a suite's runs are
    (gspo_bench.suite.folder_checks.check_outputs)."""
    from gspo_bench.suite.folder_checks import check_outputs

    by_name = {run.run_dir.name: run for run in session.grid}
    return check_outputs([by_name[name] for name in names], session.resume, allow_changed=session.allow_changed)
