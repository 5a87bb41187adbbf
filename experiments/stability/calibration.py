"""Stage 0 of the stability map: per sweep point, the medians over each run's steps of the routing
volatility (moe/drift_1, moe/drift_expert_1) and of the engine mismatch (mismatch/k3_kl,
mismatch/frac_gt_ln2), one column per seed, then the decision rules of README.md applied to them.

    python experiments/stability/calibration.py runs/stability/stability_stage0_volatility \
        runs/stability/stability_stage0_mismatch [--csv results/stability_cpu/stage0/calibration.csv]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from analysis.data.load import load_results

READ = ("moe/drift_1", "moe/drift_expert_1", "mismatch/k3_kl", "mismatch/frac_gt_ln2")
DRIFT_GOAL = 0.05  # share of (token, layer) decisions changed by one update
KL_TARGETS = (1e-4, 1e-3, 1e-2, 1e-1)


def per_run(paths: list[str]) -> pd.DataFrame:
    """One row per run: suite, sweep values, seed and the median over steps of each of READ."""
    results = load_results(*paths)
    metrics = results.metrics
    sweep = [c for c in metrics.columns if c.startswith("sweep/")]
    keys = ["suite", "label", "seed"]
    medians = metrics.groupby(keys, sort=False)[list(READ)].median().reset_index()
    points = metrics.groupby(keys, sort=False)[sweep].first().reset_index()
    return points.merge(medians, on=keys)


def high_volatility(frame: pd.DataFrame, lr: float = 3e-4) -> tuple[float, str]:
    """Rule 1: the smallest router_lr_scale at `lr` whose median drift_1 is >= 5% on every seed."""
    at_lr = frame[np.isclose(frame["sweep/lr"], lr)]
    by_scale = at_lr.groupby("sweep/router_lr_scale")["moe/drift_1"].min().sort_index()
    reached = by_scale[by_scale >= DRIFT_GOAL]
    if len(reached):
        return float(reached.index[0]), f"smallest scale with drift_1 >= {DRIFT_GOAL:g} on every seed"
    return float(by_scale.index[-1]), f"no scale reached drift_1 {DRIFT_GOAL:g}: the largest tried"


def noise_levels(curve: pd.Series) -> list[float]:
    """Rule 2: the noise values whose KL is nearest each target (log-linear interpolation on the measured
    curve, noise -> median KL over seeds, increasing, from the smallest non-zero noise: the noise-free
    point's KL is float noise, and interpolating from it put three levels within 0.24-0.29, README.md),
    plus the largest noise measured; 2 significant digits."""
    curve = curve[curve.index > 0].sort_index()  # the noise-free engine sits at float noise (~1e-14): no ladder
    logs, noise = np.log10(curve.to_numpy()), curve.index.to_numpy(dtype=float)
    levels = []
    for target in KL_TARGETS:
        t = np.log10(target)
        if t < logs[0] or t > logs[-1]:
            continue
        levels.append(float(f"{np.interp(t, logs, noise):.2g}"))
    return [*levels, float(noise[-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()
    frame = per_run(args.paths)
    pd.set_option("display.width", 200, "display.max_rows", 200)
    for suite, part in frame.groupby("suite", sort=False):
        part = part.dropna(axis=1, how="all")
        sweep = [c for c in part.columns if c.startswith("sweep/")]
        wide = part.pivot_table(index=sweep, columns="seed", values=list(READ))
        print(f"## {suite} (medians over steps; one column per seed)\n{wide.to_string(float_format='{:.3g}'.format)}\n")
    if args.csv:
        frame.to_csv(args.csv, index=False)
    if "sweep/router_lr_scale" in frame:
        scale, why = high_volatility(frame.dropna(subset=["sweep/router_lr_scale"]))
        print(f"rule 1: high volatility router_lr_scale = {scale:g} ({why})")
    if "sweep/router_noise" in frame:
        mismatch = frame.dropna(subset=["sweep/router_noise"])
        logit = mismatch["sweep/logit_noise"] if "sweep/logit_noise" in mismatch else pd.Series(np.nan, mismatch.index)
        no_logit = logit.isna() | (logit == 0)  # stage 0d sweeps router noise alone
        router = mismatch[no_logit].groupby("sweep/router_noise")["mismatch/k3_kl"].median()
        print(f"router-noise curve (logit noise off; median KL over seeds): {router.to_dict()}")
        reaches = bool((router >= 0.1).any())
        print(f"rule 2: router noise alone reaches KL 0.1: {reaches} (largest median KL {router.max():.3g})")
        if reaches:
            print(f"  router_noise levels: {noise_levels(router)}")
        else:
            logit = mismatch[np.isclose(mismatch["sweep/router_noise"], 0.3)].groupby("sweep/logit_noise")[
                "mismatch/k3_kl"].median()
            print(f"  logit_noise levels (router noise 0.3): {noise_levels(logit)}")


if __name__ == "__main__":
    main()
