"""`make gpu-check`'s table: each part's raw outputs (RAW/<part>.json, the JUnit XML, the FSDP2 runs'
metrics) read into rows of (part, measure, value, unit, note), and the table written, in CSV and
markdown, with one status line per part. Standard library and pandas only (what the GPU image has),
no gspo_bench import: `run.py` calls these before and after the carried wheels are installed."""

from __future__ import annotations

import csv
import json
import math
import statistics
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

GIB = 2**30
# the stability map's stage 1 (experiments/stability/README.md): ~81 steps per run (its FLOP budget),
# held-out evaluation at step 0 and every 20 steps, 3 seeds per cell
CELL_STEPS, CELL_EVALS, CELL_SEEDS = 81, 5, 3
# one process against FSDP2: test_distributed.py's tolerance for every metric but the timings
FSDP_RTOL, FSDP_ATOL = 1e-4, 1e-6
FSDP_SKIP = ("time/", "perf/", "gpu/")  # timings and the GPU's figures differ between any two runs


@dataclass(frozen=True)
class Row:
    part: str
    measure: str
    value: float | str | None
    unit: str = ""
    note: str = ""


@dataclass(frozen=True)
class Status:
    part: str
    status: str  # done / timed out / error / skipped
    seconds: float
    stage: str  # how far it got: the last stage the part reported
    note: str = ""


def read_progress(raw: Path, part: str) -> dict[str, Any]:
    """RAW/<part>.json, or {} where the part wrote none (it failed before starting)."""
    path = raw / f"{part}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def counted(values: list[float]) -> list[float]:
    """A run's steps without its first (CUDA graphs captured, kernels chosen) where there are others."""
    return values[1:] if len(values) > 1 else values


# ---------------------------------------------------------------------------- one parser per part
def parse_env(raw: Path, part: str) -> list[Row]:
    env = read_progress(raw, part).get("env")
    if env is None:
        return []
    packages = ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v)
    return [Row(part, "device", env["device"], note="dry run on the CPU: figures mean nothing" if env["dry"] else ""),
            Row(part, "GPU memory", env["gpu_memory_gib"], "GiB"),
            Row(part, "versions", f"python {env['python']}, cuda {env['cuda']}", note=packages),
            Row(part, "commit", env["commit"] or "unknown")]


def parse_tests(raw: Path, part: str) -> list[Row]:
    xml = raw / "gpu-tests.xml"
    if not xml.is_file():
        return []
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise ValueError(f"{xml}: no <testsuite>")
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return [Row(part, "gpu-marked tests passed", passed, note=f"of {counts['tests']}"),
            Row(part, "failed or errors", counts["failures"] + counts["errors"], note="; ".join(failed[:5])),
            Row(part, "skipped", counts["skipped"]),
            Row(part, "seconds", float(suite.get("time", "nan")), "s")]


def parse_mid(raw: Path, part: str) -> list[Row]:
    data = read_progress(raw, part)
    if "ours" not in data:
        return []
    s, ours = data["setting"], data["ours"]
    tokens = s["prompts"] * s["group"] * s["max_new_tokens"]
    step = median([r["step_s"] for r in ours])
    rows = [Row(part, "gspo-bench: RL step", step, "s", f"median of {len(ours)}; P={s['prompts']} G={s['group']} "
                                                         f"T={s['max_new_tokens']}, {s['device']} {s['dtype']}"),
            Row(part, "  rollout", median([r["rollout_s"] for r in ours]), "s"),
            Row(part, "  old-policy pass", median([r["old_pass_s"] for r in ours]), "s"),
            Row(part, "  updates", median([r["phase_update_s"] for r in ours]), "s", f"{s['minibatches']} minibatches"),
            Row(part, "  measurements", median([r["measure_s"] for r in ours]), "s", "the rest of the step"),
            Row(part, "gspo-bench: response tokens/s", tokens / step, "tokens/s"),
            Row(part, "gspo-bench: rollout tokens/s", tokens / median([r["rollout_s"] for r in ours]), "tokens/s"),
            Row(part, "gspo-bench: MFU", median([r["mfu"] for r in ours]), "", "compute/flops per step second over "
                                                                               "the dense bf16 peak"),
            Row(part, "gspo-bench: peak memory", max(max(r[f"{p}_peak_gib"] for p in ("rollout", "old_pass", "update"))
                                                     for r in ours), "GiB", "the largest phase's")]
    if "trl" in data:
        trl = median([r["step_s"] for r in data["trl"]])
        rows += [Row(part, "TRL GRPOTrainer: RL step", trl, "s", f"median of {len(data['trl'])}, same settings"),
                 Row(part, "TRL: response tokens/s", tokens / trl, "tokens/s"),
                 Row(part, "ours / TRL", step / trl, "", "step time")]
    return rows


# phase -> the plan's terms that phase holds (`MemoryPlan.peak`: the larger of training and KV cache)
PLAN_PHASES = {"rollout": ("state", "rollout_copy", "engine", "kv_cache"),
               "update": ("state", "rollout_copy", "engine", "activations", "logits")}


def parse_shape(raw: Path, part: str) -> list[Row]:
    data = read_progress(raw, part)
    if "plan" not in data:
        return []
    plan, batching = data["plan"], data["plan"]["batching"]
    rows = [Row(part, "planned peak", plan["peak"] / GIB, "GiB",
                f"{plan['params_total'] / 1e9:.3g} B parameters; micro-batch {batching['micro_rows']} rows x "
                f"{batching['length']} tokens; {'fits' if plan['fits'] else 'does not fit'} "
                f"{plan['gpu_memory_gb']:g} GB")]
    steps = [s for s in data.get("steps", []) if "update_peak_gib" in s]
    if not steps:
        return rows
    last = steps[-1]  # the last step: the optimizer's moments exist, the previous step's gradients too
    measured = {"rollout": last["rollout_peak_gib"], "update": last["update_peak_gib"],
                "step": max(last[f"{p}_peak_gib"] for p in ("rollout", "old_pass", "update"))}
    planned = {phase: sum(plan[term] for term in terms) / GIB for phase, terms in PLAN_PHASES.items()}
    planned["step"] = plan["peak"] / GIB
    for phase in ("rollout", "update", "step"):
        rows.append(Row(part, f"{phase}: plan / measured peak", planned[phase] / measured[phase], "",
                        f"planned {planned[phase]:.2f} GiB, measured {measured[phase]:.2f} GiB (step {len(steps)})"))
    rows += [Row(part, "old-policy pass: measured peak", last["old_pass_peak_gib"], "GiB"),
             Row(part, "step time", last["step_s"], "s", f"step {len(steps)}: rollout {last['rollout_s']:.2f} s, "
                                                         f"updates {last['update_s']:.2f} s")]
    return rows


def fsdp_difference(one: Any, two: Any) -> tuple[float, float, str]:
    """(largest relative difference past the absolute tolerance, largest absolute difference, its
    column) over the numeric metrics two runs share; timings and GPU figures left out."""
    columns = [c for c in one.select_dtypes("number").columns if not c.startswith(FSDP_SKIP)]
    if list(one.columns) != list(two.columns) or len(one) != len(two):
        raise ValueError(f"the runs differ in shape: {one.shape} against {two.shape}")
    worst_rel, worst_abs, where = 0.0, 0.0, ""
    for column in columns:
        a, b = one[column].astype(float), two[column].astype(float)
        both_nan = a.isna() & b.isna()
        gap = (a - b).abs().where(~both_nan, 0.0).fillna(math.inf)
        rel = ((gap - FSDP_ATOL).clip(lower=0) / b.abs().where(b.abs() > 0, 1.0)).max()
        if rel > worst_rel or (rel == worst_rel and gap.max() > worst_abs):
            worst_rel, worst_abs, where = float(rel), float(gap.max()), column
    return worst_rel, worst_abs, where


def parse_fsdp(raw: Path, part: str) -> list[Row]:
    import pandas as pd

    data = read_progress(raw, part)
    rows = [Row(part, f"{name}: s per step", median(counted(pd.read_parquet(raw / f"fsdp-{name}.parquet")
                                                             ["time/step_s"].tolist())), "s",
                f"process group {data[name]['backend'] or 'none'}, world size {data[name]['world_size']}, "
                f"DTensor parameters {data[name]['dtensor_parameters']}")
            for name in ("single", "torchrun") if name in data]
    if "torchrun" not in data:
        return rows
    if not (data["torchrun"]["process_group"] and data["torchrun"]["dtensor_parameters"]):
        raise ValueError("the torchrun run was not sharded: no FSDP2 step was compared")
    one, two = pd.read_parquet(raw / "fsdp-single.parquet"), pd.read_parquet(raw / "fsdp-torchrun.parquet")
    for measure, steps in (("FSDP2 step 1 equals the single-process step", 1),
                           ("FSDP2 steps equal the single-process steps", len(one))):
        rel, gap, column = fsdp_difference(one.head(steps), two.head(steps))
        rows.append(Row(part, measure, "yes" if rel <= FSDP_RTOL else "no",
                        note=f"{steps} step(s); largest difference {gap:.3g} ({column or 'none'}), relative {rel:.3g} "
                             f"past atol {FSDP_ATOL:g}, rtol {FSDP_RTOL:g}"))
    return rows


def parse_stability(raw: Path, part: str) -> list[Row]:
    data = read_progress(raw, part)
    rows = []
    for label, run in data.get("runs", {}).items():
        step, evaluation = median(counted(run["step_s"])), median(run["eval_s"])
        run_s = CELL_STEPS * step + CELL_EVALS * evaluation
        rows += [Row(part, f"{label}: s per step", step, "s", f"median of {len(counted(run['step_s']))}"),
                 Row(part, f"{label}: s per evaluation", evaluation, "s", f"{len(run['eval_s'])} evaluations"),
                 Row(part, f"{label}: projected cell", CELL_SEEDS * run_s / 60, "min",
                     f"{CELL_SEEDS} seeds x ({CELL_STEPS} steps + {CELL_EVALS} evaluations), warm start not counted")]
    return rows


def parse_install(raw: Path, part: str) -> list[Row]:
    data = read_progress(raw, part)
    return [Row(part, "wheels installed", len(data.get("wheels", [])), note=", ".join(data.get("wheels", [])))]


PARSERS = {"install": parse_install, "env": parse_env, "tests": parse_tests, "mid": parse_mid,
           "granite": parse_shape, "olmoe": parse_shape, "fsdp": parse_fsdp, "stability": parse_stability}


# ---------------------------------------------------------------------------- writing the table
def cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


def write_csv(path: Path, items: list[Any]) -> None:
    kind = type(items[0]) if items else Row
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(kind)])
        writer.writeheader()
        writer.writerows({k: cell(v) for k, v in asdict(item).items()} for item in items)


def markdown(items: list[Any], kind: type) -> list[str]:
    names = [f.name for f in fields(kind)]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    return lines + ["| " + " | ".join(cell(getattr(item, n)).replace("|", "/") for n in names) + " |" for item in items]


def write_table(out: Path, statuses: list[Status], rows: list[Row], command: str) -> None:
    """OUT/status.csv, OUT/gpu-check.csv and OUT/gpu-check.md (both tables), rewritten whole."""
    write_csv(out / "status.csv", statuses)
    write_csv(out / "gpu-check.csv", rows)
    text = ["# make gpu-check", "", f"Command: `{command}`", "", "## Parts", "", *markdown(statuses, Status), "",
            "## Measures", "", *markdown(rows, Row), ""]
    (out / "gpu-check.md").write_text("\n".join(text))
