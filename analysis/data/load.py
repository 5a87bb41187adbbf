"""Results directories -> tidy pandas tables (never imports torch).

    results = load_results("runs/quickstart")        # a suite dir, a root of suites, or a run dir
    results.metrics   # one row per (run, step): run metadata + every metric column
    results.layers    # one row per (run, step, layer): per-layer expert drift
    results.evals     # one row per (run, eval step, task): held-out scores (lm-eval), if any
    results.runs      # one row per run: status, steps, spent compute, budget, provenance
Every table carries `label` (objective@sweep point), `arm` (the label without the point) and
`facet` (the sweep point, e.g. "lr=0.0003,num_experts=64"; "" without a sweep). Results of several
suites label every run by its suite (`quickstart/grpo`); one run given twice, or two same-named
suites with different settings, is refused (analysis.data.suites.MixedSuitesError). A run whose files
cannot be read is left out and named with the file and the reason (`Results.unreadable`).

Only finished runs (`done`, with at least one step) are compared: `finished(results)` keeps them,
`unfinished(results)` lists the others (running, failed, collapsed, killed before their budget).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.data.errors import ResultsError
from analysis.data.plugins import plugin_of
from analysis.data.suites import check_not_mixed, label_by_suite, shared_settings, suite_settings
from gspo_bench.config.yamlread import read_yaml
from gspo_bench.rundir.folder import REQUIRED_COLUMNS, SCHEMA_VERSION, config_problem
from gspo_bench.rundir.records import GitState, ProvenanceRecord, StatusRecord, as_provenance, status_problem
from gspo_bench.rundir.renames import current_run_keys


class NotResultsError(ResultsError):
    """A path that holds no gspo-bench results."""


class SchemaVersionError(ResultsError):
    """Results written by an incompatible version of gspo-bench."""


class RunFileError(ValueError):
    """One file of a run folder that cannot be read; the message names the file."""


FINISHED = "done"  # the status of a run that spent its budget


@dataclass(frozen=True)
class Results:
    metrics: pd.DataFrame
    layers: pd.DataFrame
    runs: pd.DataFrame
    evals: pd.DataFrame
    unreadable: tuple[str, ...] = ()  # "PATH: why" of run folders whose files could not be read
    infinite: tuple[str, ...] = ()  # "COLUMN (N steps)" of metrics that held +-inf (read as NaN)

    @property
    def objectives(self) -> list[str]:
        return list(dict.fromkeys(self.runs["label"]))  # suite order

    def select(self, keep: pd.Series) -> Results:
        """The runs where `keep` (booleans over `runs`) holds, with their rows of every table."""
        runs = self.runs[keep.to_numpy(dtype=bool)]
        chosen = pd.MultiIndex.from_frame(runs[["label", "seed"]])

        def rows(frame: pd.DataFrame) -> pd.DataFrame:
            if frame.empty or not {"label", "seed"} <= set(frame.columns):
                return frame
            return frame[pd.MultiIndex.from_frame(frame[["label", "seed"]]).isin(chosen)]

        return Results(rows(self.metrics), rows(self.layers), runs, rows(self.evals), self.unreadable, self.infinite)


def is_finished(runs: pd.DataFrame) -> pd.Series:
    """Runs that spent their budget: status `done` and at least one step of metrics."""
    return (runs["status"] == FINISHED) & (runs["steps"] > 0)


def finished(results: Results) -> Results:
    """The finished runs only: the ones the report compares."""
    return results.select(is_finished(results.runs))


def unfinished(results: Results) -> pd.DataFrame:
    """The runs that are not finished (running, failed, collapsed, stopped early, no metric rows)."""
    return results.runs[~is_finished(results.runs)]


def why_unfinished(message: Any, steps: Any) -> str:
    """Why a run did not finish, as its status.json says ("RuntimeError: ..."); "no metrics written" where
    it says nothing and wrote no step; "" where it says nothing of a run that did take steps."""
    return str(message) if message else "no metrics written" if steps == 0 else ""


def is_run_dir(path: Path) -> bool:
    """A run folder: status.json with config.yaml or metrics.parquet. A run that failed before its first
    step (a task that fails to build) has config.yaml and status.json alone: it is found, and read as a
    run of no steps, so the report names it. Found even where something not a file, a folder, took
    metrics.parquet's place: `_read_run` names it."""
    return (path / "status.json").is_file() and ((path / "config.yaml").exists() or (path / "metrics.parquet").exists())


def _run_dirs_below(path: Path) -> list[Path]:
    found = sorted(p for p in path.glob("*") if p.is_dir() and is_run_dir(p))
    found += sorted(p for p in path.glob("*/*") if p.is_dir() and is_run_dir(p) and not is_trial_dir(p))
    return found


def _hidden(run_dir: Path, path: Path) -> bool:
    return any(part.startswith(".") for part in run_dir.relative_to(path).parts)


def find_run_dirs(path: Path) -> list[Path]:
    """Run directories at `path`, one level below (a suite) or two levels below (a root of suites); none in
    a hidden folder below `path` (`hidden_run_dirs`)."""
    if is_run_dir(path):
        return [path]
    return [p for p in _run_dirs_below(path) if not _hidden(p, path)]


def hidden_run_dirs(path: Path) -> list[Path]:
    """Run directories below `path` in a hidden folder (a name starting with "."), never read as results:
    `gspo-bench import` killed before it renamed its stage folder (OUT/.<name>.import-*) into place
    leaves one (the next import into OUT removes it)."""
    return [] if is_run_dir(path) else [p for p in _run_dirs_below(path) if _hidden(p, path)]


def is_trial_dir(path: Path) -> bool:
    """A tuned suite's trial run (OUT/<suite>/tuning/<trial>): read by analysis.data.tuning, never compared."""
    from gspo_bench.config.tuning import TRIALS_FOLDER

    return path.parent.name == TRIALS_FOLDER and (path.parent.parent / "suite.yaml").is_file()


def read_file(path: Path, read: Callable[[Path], Any], kind: type | None = None, optional: bool = False) -> Any:
    """`read(path)`, or RunFileError naming `path` and why it cannot be read; `kind`: the type its
    content must have (a JSON or YAML mapping); an `optional` file that is absent reads as None."""
    if optional and not path.exists():
        return None
    try:
        value = read(path)
    except Exception as err:  # a truncated parquet, invalid JSON or YAML, a folder in its place, ...
        first = str(err).splitlines()[0] if str(err) else ""
        raise RunFileError(f"{path}: {type(err).__name__}: {first}") from None
    if kind is not None and not isinstance(value, kind):
        raise RunFileError(f"{path}: expected a {kind.__name__} at the top, found {type(value).__name__}")
    return value


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _yaml(path: Path) -> Any:
    return read_yaml(path.read_text())


def _metrics(path: Path) -> pd.DataFrame:
    """The run's metrics table; RunFileError where a folder or another table (rows, but no reward/mean) is
    in its place (a run silently left out of the report once). A table of no rows, or none at all, is a run
    stopped before its first step: it is shown as unfinished."""
    if path.is_dir():
        raise RunFileError(f"{path}: a folder, not a file")
    if not path.exists():
        return pd.DataFrame()
    metrics = read_file(path, pd.read_parquet)
    if len(metrics) and "reward/mean" not in metrics.columns:
        raise RunFileError(f"{path}: not a metrics table: no column reward/mean")
    return metrics


def _read_run(run_dir: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    status: StatusRecord = read_file(run_dir / "status.json", _json, dict)  # the record, once status_problem passes
    problem = status_problem(status)
    if problem:
        raise RunFileError(f"{run_dir / 'status.json'}: {problem}")
    version = status.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{run_dir}: results schema version {version}, this gspo-bench reads version {SCHEMA_VERSION}"
        )
    config = read_file(run_dir / "config.yaml", _yaml, optional=True)
    problem = config_problem(config)
    if problem:
        raise RunFileError(f"{run_dir / 'config.yaml'}: {problem}")
    config = current_run_keys(config or {})  # a folder of an older release: its old key names
    prov = as_provenance(read_file(run_dir / "provenance.json", _json, dict, optional=True) or {})
    metrics = _metrics(run_dir / "metrics.parquet")  # none: a run that ended before its first step
    # columns a run did not measure (train.measure off, results of an older release) read as NaN
    metrics = metrics.reindex(columns=list(dict.fromkeys([*REQUIRED_COLUMNS, *metrics.columns])))
    layers = read_file(run_dir / "layers.parquet", pd.read_parquet, optional=True)
    evals = read_file(run_dir / "eval.parquet", pd.read_parquet, optional=True)
    layers = pd.DataFrame() if layers is None else layers
    evals = pd.DataFrame() if evals is None else evals
    try:
        meta = _meta(run_dir, status, config, prov, metrics)
    except (AttributeError, TypeError, ValueError, KeyError) as err:  # a setting of the wrong type
        raise RunFileError(f"{run_dir / 'config.yaml'}: {type(err).__name__}: {err}") from None
    for key in ("suite", "label", "arm", "facet", "objective", "replay", "seed"):
        for frame in (metrics, layers, evals):
            if len(frame) or frame is metrics:  # a run without steps still has its columns
                frame[key] = meta[key]
    return meta, metrics, layers, evals


def _meta(run_dir: Path, status: StatusRecord, config: dict, prov: ProvenanceRecord, metrics: pd.DataFrame) -> dict:
    """One row of `runs`: what the run is (config.yaml), how far it got (status.json, metrics) and
    where it ran (provenance.json)."""
    run_cfg, suite_cfg = config.get("run") or {}, config.get("suite") or {}
    budget, task = suite_cfg.get("budget") or {}, suite_cfg.get("task") or {}
    last: pd.Series | dict[str, Any] = metrics.iloc[-1] if len(metrics) else {}
    label = run_cfg.get("label", run_dir.name.rsplit("-s", 1)[0])
    git = prov.get("git") or GitState(commit=None, dirty=None)
    return {
        "suite": suite_cfg.get("name", run_dir.parent.name),
        "label": label,
        "arm": run_cfg.get("arm") or label,  # the label without the sweep point
        "facet": ",".join(f"{k}={format(v, 'g') if isinstance(v, float) else v}"
                          for k, v in (run_cfg.get("sweep") or {}).items()),  # the sweep point ("" without)
        "objective": run_cfg.get("objective"),
        "plugin": plugin_of(run_cfg.get("objective"), prov),  # the plugin file of the objective ("" built in)
        "task": task.get("name"),
        "task_params": task.get("params") or {},
        "task_baseline": prov.get("task_baseline"),  # as the run computed it (None: none, or an older run)
        "replay": bool(run_cfg.get("replay", False)),
        "replay_from": run_cfg.get("replay_from") or ("old_pass" if run_cfg.get("replay") else None),
        "seed": int(run_cfg.get("seed", 0)),
        "status": status.get("status"),
        "message": status.get("message", ""),
        "steps": int(len(metrics)),
        "cum_flops": float(last["compute/cum_flops"]) if len(metrics) else 0.0,
        "cum_tokens": float(last["compute/cum_tokens"]) if len(metrics) and "compute/cum_tokens" in metrics else 0.0,
        "budget_kind": budget.get("kind"),
        "budget_value": float(budget["value"]) if "value" in budget else float("nan"),
        "clip_low": run_cfg.get("clip_low"),
        "clip_high": run_cfg.get("clip_high"),
        "lr": run_cfg.get("lr"),
        "router_lr_scale": float((suite_cfg.get("train") or {}).get("router_lr_scale", 1.0)),  # as the run trained
        # the MoE load-balancing loss's coefficient in the update (0: none, also for runs that predate the setting)
        "router_aux_loss_coef": float((suite_cfg.get("model") or {}).get("router_aux_loss_coef", 0.0)),
        "arm_settings": arm_settings(run_cfg, suite_cfg),
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        "device": prov.get("device"),
        "kernels": kernels_text(prov.get("kernels")),
        "torch": (prov.get("packages") or {}).get("torch"),
        "start": prov.get("start"),
        "end": prov.get("end"),
        "path": str(run_dir),
        "suite_sha256": recorded_suite_sha256(prov),
        "settings": suite_settings(suite_cfg),  # what makes two runs the same suite (analysis.data.suites)
        "shared": shared_settings(suite_settings(suite_cfg), run_cfg),  # less the run's arm and sweep point
        "changed": any(r.get("changed") for r in prov.get("resumed") or [] if isinstance(r, dict)),  # --allow-changed
    }


def arm_settings(run_cfg: dict, suite_cfg: dict) -> dict[str, Any]:
    """What the run's arm trains with beyond the suite's shared settings: config.yaml's `run:` fields (its
    objective, replay, lr, clip range, parameters, correction and `set:`) and its advantages' `credit`, which
    `run:` does not hold: read from the suite's `objectives:` entry of the run's arm (`response` where that entry
    predates the setting, None where no entry names the arm)."""
    arm = run_cfg.get("arm") or run_cfg.get("label")
    entry = next((e for e in suite_cfg.get("objectives") or [] if isinstance(e, dict)
                  and (e.get("label") or e.get("name")) == arm), None)
    keys = ("objective", "replay", "replay_from", "lr", "clip_low", "clip_high", "correction")
    return {**{key: run_cfg.get(key) for key in keys},
            "params": (run_cfg["params"] if "params" in run_cfg else run_cfg.get("kwargs")) or {},  # older: `kwargs`
            "set": run_cfg.get("set") or {}, "credit": None if entry is None else entry.get("credit", "response")}


def kernels_text(kernels: Any) -> str | None:
    """What computed a run on the CPU (provenance's `kernels`, gspo_bench.runtime.kernels): ATen's
    capability, MKL's branch and the thread count, e.g. "AVX2/COMPATIBLE/2 threads"; None where the
    run recorded none (an older release)."""
    if not isinstance(kernels, dict):
        return None
    return f"{kernels.get('aten_cpu_capability')}/{kernels.get('mkl_branch')}/{kernels.get('threads')} threads"


def recorded_suite_sha256(prov: ProvenanceRecord) -> str | None:
    """The sha256 of the suite file the run's last start or resume was given (provenance.json; None
    where it records none: runs written before it was kept, or launched without a suite file)."""
    resumed = prov.get("resumed") or []
    last = resumed[-1] if resumed and isinstance(resumed[-1], dict) else prov
    return last.get("suite_sha256")


def load_results(*paths: str | Path) -> Results:
    """Load every run under `paths` into one `Results`; NotResultsError for a path without results."""
    if not paths:
        raise NotResultsError("no results directory given")
    metas, metric_frames, layer_frames, eval_frames, unreadable = [], [], [], [], []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise NotResultsError(f"{path}: no such directory")
        run_dirs, hidden = find_run_dirs(path), hidden_run_dirs(path)
        if not run_dirs:
            raise NotResultsError(
                f"{path} holds no gspo-bench results: expected run directories with status.json and "
                "config.yaml or metrics.parquet (a run dir, a suite dir OUT/<suite>, or a root OUT)"
                + (f"; runs in hidden folders are never read ({', '.join(map(str, hidden))})" if hidden else "")
            )
        unreadable += [f"{p}: in a hidden folder, never read as results (an import killed before it finished "
                       "leaves one: the next import into that folder removes it)" for p in hidden]
        for run_dir in run_dirs:
            try:
                meta, metrics, layers, evals = _read_run(run_dir)
            except SchemaVersionError:
                raise
            except RunFileError as err:  # a truncated parquet, a broken status.json, ...: skip, say which file
                unreadable.append(str(err))
                continue
            metas.append(meta)
            metric_frames.append(metrics)
            if len(layers):
                layer_frames.append(layers)
            if len(evals):
                eval_frames.append(evals)
    if not metas:
        raise NotResultsError("no readable run among the results: " + "; ".join(f"unreadable: {u}" for u in unreadable))
    runs = pd.DataFrame(metas)
    metrics = pd.concat(metric_frames, ignore_index=True)
    layers = pd.concat(layer_frames, ignore_index=True) if layer_frames else pd.DataFrame(
        columns=["suite", "label", "seed", "step", "layer", "moe/drift"])
    evals = pd.concat(eval_frames, ignore_index=True) if eval_frames else pd.DataFrame(
        columns=["suite", "label", "seed", "step", "task", "score", "compute/cum_flops"])
    check_not_mixed(runs)
    if runs["suite"].nunique() > 1:  # runs of different suites are never pooled under one label
        label_by_suite([runs, metrics, layers, evals])
    metrics, infinite = without_infinities(metrics)
    return Results(metrics=metrics, layers=layers, runs=runs, evals=evals, unreadable=tuple(unreadable),
                   infinite=infinite)


def without_infinities(metrics: pd.DataFrame) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """`metrics` with every +-inf read as NaN (a measurement that overflowed: left out of every mean,
    median and figure, as a missing one is, instead of making them inf or NaN with a warning each),
    and "COLUMN (N steps)" for each float column that held any, by name."""
    floats = metrics.select_dtypes("number")
    counts = np.isinf(floats.to_numpy(dtype=float)).sum(axis=0)
    held = {name: int(n) for name, n in zip(floats.columns, counts, strict=True) if n}
    if not held:
        return metrics, ()
    metrics = metrics.copy()
    metrics[list(held)] = metrics[list(held)].replace([np.inf, -np.inf], np.nan)
    return metrics, tuple(f"{name} ({n} steps)" for name, n in sorted(held.items()))

