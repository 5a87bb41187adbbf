"""Make the warm starts the package ships (gspo_bench/warmstarts/): each listed suite's entry for its seed,
trained afresh into an empty cache with no shipped entry to take, then copied under its key. A shipped entry
is what a fresh warm start of its key writes, bit for bit (tests/test_shipped_warm_starts.py checks one).

    python experiments/ship_warm_starts.py            # (make ship-warm-starts)
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from gspo_bench.config import load_suite
from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.suite.runner import starting_weights
from gspo_bench.train.warmstart import SHIPPED

ROOT = Path(__file__).resolve().parent.parent
# (suite file, seed): the quickstart's one starting model, and the two warm starts of the stability and lag maps
SHIPS = [("experiments/quickstart.yaml", 0), ("experiments/lag/lag_pilot.yaml", 0), ("experiments/lag/lag_pilot.yaml", 1)]


def main() -> None:
    pin_kernels()  # as `gspo-bench` does, before anything computes: the kernels (and cache keys) of its runs
    SHIPPED.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as cache:
        for path, seed in SHIPS:
            suite = load_suite(ROOT / path)
            suite = suite.model_copy(update={"warm_start": suite.warm_start.model_copy(update={"cache_dir": cache})})
            made = starting_weights(suite, seed, shipped=False)
            shutil.rmtree(SHIPPED / made.name, ignore_errors=True)
            shutil.copytree(made, SHIPPED / made.name)
            print(f"{path} seed {seed}: {SHIPPED / made.name}")


if __name__ == "__main__":
    main()
