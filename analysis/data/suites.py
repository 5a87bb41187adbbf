"""Which suite a run belongs to, so that runs of different suites are never pooled under one label.

A run's suite is its name and its resolved settings (config.yaml's `suite:`), less what does not change
its results, compared by the rule `--resume` compares them by (`gspo_bench.config.changes`: not the
description, output_dir, tracking, the warm-start cache folder, nor the list of seeds run; a setting
an older release did not write reads as its default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.data.errors import ResultsError
from gspo_bench.config.changes import changed_settings, run_settings

SHOWN = 4  # differences named in one message
OWN = "(the run's own)"  # shared_settings' value of a setting that is the run's arm's or sweep point's


class MixedSuitesError(ResultsError):
    """Results that would pool runs of different suites (or one run twice) under one label."""


def suite_settings(suite: dict) -> dict[str, Any]:
    """The settings of a run's suite that its results depend on, flattened."""
    return run_settings(suite or {}, "suite")


def shared_settings(settings: dict[str, Any], run: dict) -> dict[str, Any]:
    """The settings a run shares with every run of its suite: `settings` with its arm's own fields
    (config.yaml's `run.set`, dotted paths) and its sweep point's (`run.sweep`, by short name: a swept
    path's last name, or the whole path where two would clash) marked `OWN`, which no run compares."""
    own = [str(path) for path in run.get("set") or {}]
    swept = [str(name) for name in run.get("sweep") or {}]
    return {key: OWN if any(key == p or key.startswith(f"{p}.") for p in own)
            or any(f".{name}." in f".{key}." for name in swept) else value for key, value in settings.items()}


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """`key: a vs b` for every setting of two runs' suites that differs (`gspo_bench.config.changes`),
    less those either run marks its own (`shared_settings`)."""
    return [f"{key}: {x!r} vs {y!r}" for key, x, y in changed_settings(a, b, "suite") if OWN not in (x, y)]


def shown(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return "; ".join(items[:SHOWN]) + more


def check_not_mixed(runs: pd.DataFrame) -> None:
    """MixedSuitesError for one run given twice, one suite name whose runs in two folders have
    different settings, whatever their labels, or runs of one folder whose settings differ beyond
    their arms' `set:` and sweep points (`shared_settings`; `run` refuses a second suite of one name in
    a folder, and runs resumed with --allow-changed, their change recorded, are not compared). Same-named
    suites with the same settings are one suite, pooled."""
    twice = runs[runs.duplicated(["suite", "label", "seed"], keep=False)]
    if len(twice):
        key = ["suite", "label", "seed"]
        a = twice.iloc[0]
        b = twice[(twice[key] == a[key]).all(axis=1)].iloc[1]
        raise MixedSuitesError(f"the same run twice: {a['path']} and {b['path']} (suite {a['suite']}, label "
                               f"{a['label']}, seed {a['seed']}); give each results folder once")
    folder = runs["path"].map(lambda path: str(Path(path).parent))
    for _, group in runs[~runs["changed"].astype(bool)].groupby(folder, sort=False):
        records: list[dict[str, Any]] = group.to_dict("records")  # type: ignore[assignment]  # keys are the columns
        head, *rest = records
        for record in rest:
            changed = differences(head["shared"], record["shared"])
            if changed:
                raise MixedSuitesError(
                    f"one folder holds runs of two suites named {head['suite']}: {head['path']} and {record['path']} differ "
                    f"in {shown(changed)} (not by an arm's set: or a sweep point); a second suite of that name was "
                    "run into it: move one suite's runs to a folder of their own")
    for suite, group in runs.groupby("suite", sort=False):
        first, *others = [(name, rows.iloc[0]) for name, rows in group.groupby(folder[group.index], sort=False)]
        for name, other in others:
            changed = differences(first[1]["settings"], other["settings"])
            if changed:
                raise MixedSuitesError(
                    f"two suites named {suite} with different settings: {first[0]} and {name} differ in "
                    f"{shown(changed)}; one report compares the runs of one suite: report each folder separately "
                    "or give the suites different names")


def label_by_suite(frames: list[pd.DataFrame]) -> None:
    """Prefix `label` and `arm` with the run's suite (`quickstart/grpo`), in place."""
    for frame in frames:
        if len(frame):
            for column in ("label", "arm"):
                if column in frame:
                    frame[column] = frame["suite"].astype(str) + "/" + frame[column].astype(str)


def suite_differences(current: pd.DataFrame, baseline: pd.DataFrame) -> list[str]:
    """How the suite of `current` runs differs from the `baseline` runs' suite: names, no arm label in
    common (a suite of the same name with other arms is another suite), then the settings of every
    label both have ([] for the same suite)."""
    out = []
    names, base_names = sorted(set(current["suite"])), sorted(set(baseline["suite"]))
    if names != base_names:
        out.append(f"suite name {', '.join(names)} vs baseline {', '.join(base_names)}")
    labels, base_labels = list(dict.fromkeys(current["label"])), list(dict.fromkeys(baseline["label"]))
    if not set(labels) & set(base_labels):
        out.append(f"no arm label in common: {', '.join(map(str, labels))} vs baseline {', '.join(map(str, base_labels))}")
    for label in dict.fromkeys(baseline["label"]):
        if label in set(current["label"]):
            base = baseline.loc[baseline["label"] == label, "settings"].iloc[0]
            cur = current.loc[current["label"] == label, "settings"].iloc[0]
            out += [d.replace(" vs ", " vs baseline ", 1) for d in differences(cur, base)]
    return list(dict.fromkeys(out))
