"""Synthetic results of a suite that declares a primary family (`analysis: {primary: ...}`): runs with
a reward bonus per seed beside the suite file `run` would write, and the evidence the report gathers."""

from __future__ import annotations

from pathlib import Path

import yaml

from analysis.data.load import finished, load_results
from analysis.evidence.gather import gather
from analysis.evidence.primary import declarations
from tests.helpers.reports import JITTER
from tests.helpers.results import make_run

KINDS = {"grpo": ("grpo", False), "grpo_rr": ("grpo", True), "grpo_r3": ("grpo", True), "gspo": ("gspo", False),
         "grpo_tis": ("grpo", False), "grpo_clean": ("grpo", False)}
GAIN = [0.05 + j for j in JITTER]  # 8 seeds: +0.05 +- 0.01, every one positive
SIX_ARMS = {label: GAIN if label == "grpo_r3" else [0.0] * 8 for label in KINDS}


def suite_folder(root: Path, bonuses: dict[str, list[float]], analysis: dict | None, arms: list[str] | None = None,
                 suite: str = "synth", **kwargs) -> Path:
    """Runs with the given reward bonus per seed, and the suite file `run` would write beside them:
    `arms` its objectives (default: the labels run), `analysis` its analysis section (None: no key)."""
    for label, per_seed in bonuses.items():
        for seed, bonus in enumerate(per_seed):
            make_run(root, label, seed, bonus=bonus, kind=KINDS[label], suite=suite, **kwargs)
    data = {"name": suite, "objectives": [{"name": label} for label in arms or bonuses]}
    if analysis is not None:
        data["analysis"] = analysis
    (root / suite / "suite.yaml").write_text(yaml.safe_dump(data))
    return root / suite


def evidence_of(folder: Path):
    results = load_results(folder)
    return gather(finished(results), declarations(results)), results
