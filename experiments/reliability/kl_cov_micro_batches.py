"""KL-Cov with and without micro-batches on the CI-sized MoE (experiments/ci.yaml's model, task, warm start,
rollout and train settings; kl_cov at its defaults), 3 steps per seed: each micro-batched suite against the
plain one, per seed, the largest relative difference of loss, grad norm, token ratio variance and drift
over the steps. Run once with KL-Cov's `noise_floor` at its default and once at 0 (the released code's
plain |log r|), so the table holds the floor's effect from one command.

    python experiments/reliability/kl_cov_micro_batches.py --out /tmp/kl-cov-micro
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import typer
import yaml

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["loss", "grad/norm", "ratio/token_var", "moe/drift"]


def suite(floor: float | None, seeds: list[int], steps: int) -> dict:
    data = yaml.safe_load((ROOT / "experiments" / "ci.yaml").read_text())
    params = {} if floor is None else {"noise_floor": floor}
    return {**data, "name": "kl_cov_micro", "budget": {"kind": "steps", "value": steps},
            "objectives": [{"name": "kl_cov", "params": params}], "seeds": seeds}


def run(data: dict, out: Path, budget: int | None, cache: Path) -> Path:
    path = out / "suite.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    extra = [] if budget is None else ["--set", f"train.micro_batch_tokens={budget}"]
    subprocess.run([sys.executable, "-m", "gspo_bench.cli", "run", str(path), "--out", str(out), "--parallel", "2",
                    "--resume", *extra], check=True, env={**os.environ, "GSPO_BENCH_CACHE": str(cache)},
                   stdout=subprocess.DEVNULL)
    return out / data["name"]


def main(out: Path = typer.Option(...), seeds: str = "0,1,2,3", steps: int = 3, budgets: str = "64,8") -> None:
    chosen = [int(s) for s in seeds.split(",")]
    rows = []
    for floor in (None, 0.0):
        data = suite(floor, chosen, steps)
        name = "default" if floor is None else "0"
        plain = run(data, out / f"floor_{name}" / "plain", None, out / "cache")
        for budget in [int(b) for b in budgets.split(",")]:
            micro = run(data, out / f"floor_{name}" / f"micro{budget}", budget, out / "cache")
            for seed in chosen:
                a = pd.read_parquet(plain / f"kl_cov-s{seed}" / "metrics.parquet")[COLUMNS]
                b = pd.read_parquet(micro / f"kl_cov-s{seed}" / "metrics.parquet")[COLUMNS]
                worst = ((a - b).abs() / a.abs().clip(lower=1e-12)).max()
                rows.append({"noise_floor": "1e-4 (default)" if floor is None else "0", "micro_batch_tokens": budget,
                             "seed": seed, **{f"max rel diff {c}": float(worst[c]) for c in COLUMNS},
                             "plain grad/norm": ", ".join(f"{v:.6g}" for v in a["grad/norm"]),
                             "micro grad/norm": ", ".join(f"{v:.6g}" for v in b["grad/norm"])})
    table = pd.DataFrame(rows)
    table.to_csv(out / "kl_cov_micro_batches.csv", index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    typer.run(main)
