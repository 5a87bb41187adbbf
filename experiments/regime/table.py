"""One row per run of a regime-search suite: reward at start and end, drift, rerouting and the
token-ratio variance of rerouted and stable tokens (means over steps), clip fraction, step time.

    python experiments/regime/table.py results/regime/drift
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

COLUMNS = {  # metric -> column name in the table (means over steps)
    "moe/drift": "drift (token, layer)", "moe/drift_expert": "drift (activated experts)",
    "moe/rerouted_token_frac": "rerouted tokens", "ratio/token_var_rerouted": "ratio var rerouted",
    "ratio/token_var_stable": "ratio var stable", "clip/frac": "clip frac", "time/step_s": "step s",
}


def run_row(path: Path) -> dict:
    m = pd.read_parquet(path / "metrics.parquet")
    status = pd.read_json(path / "status.json", typ="series")
    return {"run": path.name, "status": status["status"], "steps": len(m),
            "reward, first 3 steps": m["reward/mean"].head(3).mean(), "reward, last 3 steps": m["reward/mean"].tail(3).mean(),
            **{name: m[metric].median() if metric == "time/step_s" else m[metric].mean() for metric, name in COLUMNS.items()}}


def main(root: str) -> None:
    rows = [run_row(p.parent) for p in sorted(Path(root).glob("*/metrics.parquet"))]
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main(sys.argv[1])
