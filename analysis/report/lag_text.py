"""The report's words and table on the sampler against the learner under rollout lag (analysis.evidence.lag):
per arm and lag, how far apart they were, and the lag at which experts apart reach the GSPO paper's ~10%."""

from __future__ import annotations

import pandas as pd

from analysis.evidence.lag import PAPER_ROUTE_SHARE, route_crossing, route_curve
from analysis.report.escape import escape

TITLE = ("Sampler against learner under rollout lag (finished runs, steps at each run's full lag; medians over "
         "steps, then over seeds)")


def lag_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm and lag: runs, and the medians over seeds of experts apart, k3 per response and the ESS of pi_old / mu."""
    table = runs.groupby(["arm", "lag"], sort=True).agg(
        runs=("seed", "count"), experts_apart=("route_diff", "median"), k3_per_response=("k3_response", "median"),
        ess=("ess", "median")).reset_index()
    return table.rename(columns={"experts_apart": "experts apart (lag/route_diff)",
                                 "k3_per_response": "k3 per response", "ess": "ESS of pi_old / mu"})


def crossing_text(runs: pd.DataFrame) -> str:
    """One line per arm: the lag at which its experts apart (median over seeds) reach the paper's share, or the
    largest it reached and where."""
    curve = route_curve(runs)
    lines = [f"The GSPO paper's case for Routing Replay rests on ~{PAPER_ROUTE_SHARE:.0%} of activated experts "
             "changing per update on its MoE; under a lag of S updates the sampler's and the learner's routes differ "
             f"by S updates' changes. Where each arm's experts apart reach {PAPER_ROUTE_SHARE:.0%} (median over seeds, "
             "linear in log lag between the two lags around it; lag 0 is the synchronous control):", ""]
    for arm, rows in curve.groupby("arm", sort=False):
        shares = rows.set_index("lag")["route_diff"]
        at = route_crossing(shares)
        measured = shares[shares.index > 0].dropna()
        if at is not None:
            lines.append(f"- **{escape(str(arm))}**: at lag {at:.3g}")
        elif len(measured):
            lines.append(f"- **{escape(str(arm))}**: not reached; largest {measured.max():.3g} at lag {measured.idxmax():g}")
        else:
            lines.append(f"- **{escape(str(arm))}**: no lagged run measured its routes")
    return "\n".join(lines)
