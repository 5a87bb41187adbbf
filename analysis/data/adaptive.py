"""An adaptive suite's placement as its results folder holds it (`adaptive:` in the suite file): the log
OUT/<suite>/adaptive.json (`gspo_bench.suite.adaptive` writes each round's run folders before they start,
and each arm's standing) and the rule's settings in OUT/<suite>/suite.yaml."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from analysis.data.load import Results
from gspo_bench.config.schema import ADAPTIVE_LOG as LOG


@dataclass(frozen=True)
class AdaptiveRecord:
    """One adaptive suite's log: the rule's settings (suite.yaml's `adaptive:`), the run folders of each round,
    each arm's last standing, and the grid it placed runs on (arms, levels, seeds)."""

    rule: dict[str, Any]
    rounds: list[list[str]]
    standing: list[str]
    arms: int
    levels: int
    seeds: int

    @property
    def grid_runs(self) -> int:
        return self.arms * self.levels * self.seeds


def adaptive_records(results: Results) -> dict[str, AdaptiveRecord]:
    """suite name -> its adaptive log, for each suite among `results` whose folder holds one (and whose
    suite.yaml declares `adaptive:`)."""
    found: dict[str, AdaptiveRecord] = {}
    for suite, path in zip(results.runs["suite"], results.runs["path"], strict=True):
        folder = Path(path).parent
        if suite in found or not (folder / LOG).is_file() or not (folder / "suite.yaml").is_file():
            continue
        declared = yaml.safe_load((folder / "suite.yaml").read_text()) or {}
        log = json.loads((folder / LOG).read_text())
        if not declared.get("adaptive"):
            continue
        (values,) = (declared.get("sweep") or {"": []}).values()
        found[suite] = AdaptiveRecord(declared["adaptive"], log["rounds"], log.get("standing", []),
                                      len(declared.get("objectives") or []), len(values), len(declared.get("seeds") or [0]))
    return found
