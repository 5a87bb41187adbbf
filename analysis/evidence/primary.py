"""The confirmatory family a suite declares before it runs, read from its results folder.

    analysis: {primary: {each_vs: grpo}}                       # every other arm of each group against grpo
    analysis: {primary: {pairs: [[grpo_r3, grpo]], paper_checks: true}}

(`gspo_bench.config.PrimaryConfig`, checked by `validate`.) `run` writes the resolved suite to
OUT/<suite>/suite.yaml and each run records that file's sha256 in its provenance (`suite_sha256`) and
the suite, `analysis:` included, in its config.yaml. The report reads the family from suite.yaml,
refuses one that differs from what a run's config.yaml recorded at its start (the family would have
been chosen after the run began), and states the file's sha256 beside what the runs recorded.

Each declared comparison is a test of the final reward, first minus second, in every group (suite and
sweep point) of the suite with finished runs; `each_vs` takes the suite file's arms, so the family does
not depend on which runs finished. The tests and their Holm adjustment: analysis.evidence.family.declared_family.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from pydantic import ValidationError

from analysis.data.errors import ResultsError
from analysis.data.groups import Group
from analysis.data.load import Results
from analysis.evidence.family import REWARD, Test
from analysis.evidence.learning import Learning
from analysis.evidence.outcome_rules import RULES_KEY
from analysis.stats.library import paired
from gspo_bench.config.schema import AnalysisConfig, PrimaryConfig

SUITE_FILE = "suite.yaml"


class DeclarationError(ResultsError):
    """A suite file whose declared family cannot be read, or is not the one its runs started with."""


@dataclass(frozen=True)
class Declaration:
    """One suite's declared family: `arms` its suite file's run labels (suite order), `names` each as
    the report shows it (`suite/label` in a report of several suites: analysis.data.suites.label_by_suite),
    `files` (path, sha256) of each suite file read (one per results folder of the suite), `recorded`
    the suite sha256 each run's provenance holds (None where it holds none)."""

    suite: str
    primary: PrimaryConfig
    arms: tuple[str, ...]
    names: dict[str, str]
    files: tuple[tuple[str, str], ...]
    recorded: tuple[str | None, ...]

    def comparisons(self) -> list[tuple[str, str]]:
        """(first, second) of each declared comparison, as the report names the arms."""
        return [(self.names[a], self.names[b]) for a, b in self.primary.comparisons(list(self.arms))]


def _section(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The `analysis` settings among a run's flattened suite settings; None where it recorded none."""
    found = {k: v for k, v in settings.items() if (k == "analysis" or k.startswith("analysis.")) and k != RULES_KEY}
    if found and all(v is None for v in found.values()):
        return {"analysis": None}  # an `analysis:` that declares outcome rules only: no primary family
    return found or None


def _read(path: Path) -> tuple[dict, str]:
    """The suite file's mapping and its sha256; DeclarationError naming the file."""
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise DeclarationError(f"{path}: cannot be read: {type(err).__name__}: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise DeclarationError(f"{path}: expected a mapping of suite fields at the top level")
    return data, hashlib.sha256(raw).hexdigest()


def _arms(path: Path, data: dict) -> list[str]:
    entries = data.get("objectives")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and e.get("name") for e in entries):
        raise DeclarationError(f"{path}: objectives: expected a list of objective entries with a name")
    return [str(e.get("label") or e["name"]) for e in entries]


def _primary(path: Path, data: dict) -> PrimaryConfig | None:
    """The declared family of the suite file, checked as `validate` checks it."""
    try:
        primary = AnalysisConfig.model_validate(data["analysis"]).primary
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(["analysis", *(str(part) for part in first["loc"])])
        raise DeclarationError(f"{path}: {where}: {first['msg'].removeprefix('Value error, ')}") from None
    if primary is None:
        return None
    try:
        primary.check_arms(_arms(path, data))
    except ValueError as err:
        raise DeclarationError(f"{path}: {err}") from None
    return primary


def _check_recorded(path: Path, declared: dict[str, Any], runs: pd.DataFrame) -> None:
    """DeclarationError where a run beside the suite file recorded (config.yaml) another `analysis:`
    than `declared` (the file's, flattened as gspo_bench.config.changes.flatten); runs that recorded none pass."""
    for run, settings in zip(runs["path"].tolist(), runs["settings"].tolist()):
        recorded = _section(settings)
        if recorded is not None and recorded != declared:
            raise DeclarationError(f"{path}: analysis: the suite file declares {_text(declared)}, but run {run} "
                                   f"started with {_text(recorded)} (its config.yaml): a primary family is declared "
                                   "before the runs start; report them with the suite file they ran with")


def _text(flat: dict[str, Any]) -> str:
    return "no primary family" if flat == {"analysis": None} else ", ".join(f"{k}={v}" for k, v in flat.items())


def _file_declaration(path: Path, runs: pd.DataFrame) -> tuple[PrimaryConfig | None, list[str], str]:
    """The suite file's declared family (None without), its arms and sha256, checked against the runs
    beside it."""
    from gspo_bench.config.changes import flatten

    data, sha = _read(path)
    primary = _primary(path, data) if data.get("analysis") is not None else None
    section = None if primary is None else AnalysisConfig(primary=primary).model_dump(mode="json", exclude={"rules"})
    _check_recorded(path, flatten({"analysis": section}), runs)
    return primary, _arms(path, data) if primary is not None else [], sha


def declarations(results: Results) -> dict[str, Declaration]:
    """The declared family of each suite of `results` whose suite file has an `analysis:` section ({} where
    none has: the report then tests every comparison together, as without one)."""
    several = results.runs["suite"].nunique() > 1
    found = {}
    folder = results.runs["path"].map(lambda p: Path(p).parent)
    for suite, runs in results.runs.groupby("suite", sort=False):
        files = {f / SUITE_FILE: _file_declaration(f / SUITE_FILE, runs[folder[runs.index] == f])
                 for f in dict.fromkeys(folder[runs.index]) if (f / SUITE_FILE).is_file()}
        missing = [run for run, settings in zip(runs["path"].tolist(), runs["settings"].tolist())
                   if Path(run).parent / SUITE_FILE not in files and _section(settings) not in (None, {"analysis": None})]
        if missing:
            raise DeclarationError(f"{missing[0]}: the run declares a primary family (config.yaml suite.analysis) but "
                                   f"its results folder has no {SUITE_FILE} to read it from")
        declared = [(path, primary, arms) for path, (primary, arms, _) in files.items() if primary is not None]
        if not declared:
            continue
        path, primary, arms = declared[0]
        if len(declared) < len(files) or any(p != primary for _, p, _ in declared):
            raise DeclarationError(f"the suite files of suite {suite} declare different primary families: "
                                   f"{', '.join(map(str, files))}")
        names = {arm: f"{suite}/{arm}" if several else arm for arm in arms}
        found[str(suite)] = Declaration(str(suite), primary, tuple(arms), names,
                                        tuple((str(p), sha) for p, (_, _, sha) in files.items()),
                                        tuple(runs["suite_sha256"]))
    return found


def primary_tests(learnings: dict[Group, Learning], declared: dict[str, Declaration]) -> list[Test]:
    """Every declared comparison in every group of a declaring suite: the final reward paired by seed
    where some objective learned, an empty test (no p) where none did or an arm has no finished run."""
    tests = []
    for group, found in learnings.items():
        declaration = declared.get(group[0])
        for first, second in declaration.comparisons() if declaration else []:
            testable = found.learned and {first, second} <= set(found.per_run["arm"])
            values = (found.values(first), found.values(second)) if testable else (pd.Series(dtype=float),) * 2
            tests.append(Test(group, REWARD, first, second, paired(*values)))
    return tests
