"""What the stability map's outcome classes can see at a suite's evaluation settings.

A held-out score is the mean over `draws` = problems (eval.limit) x samples per problem (eval.samples)
of 0/1 answers, so its standard error is at least sqrt(p (1 - p) / draws) (samples of one problem are
correlated: more, never less). A point counts as a drop below a start at p only when it is below by
more than max(DROP_FLOOR, DROP_SE x hypot(SE_start, SE_point)) (analysis.evidence.stability); with both
standard errors at p's, the smallest drop the degraded class can see is
max(DROP_FLOOR, DROP_SE sqrt(2 p (1 - p) / draws)). A halving (p to p/2) is visible once that is below
p/2, i.e. draws > 8 DROP_SE^2 (1 - p) / p: from a start of 0.34, 140 draws (100 problems x 1 sample
see only a drop of 0.20, so 0.34 -> 0.18 was "flat").
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.evidence.learning import HELD_OUT
from analysis.evidence.stability import DROP_FLOOR, DROP_SE


def smallest_drop(start: float, draws: int) -> float:
    """The smallest drop below a start score `start` that the degraded class can see at `draws` 0/1
    answers an evaluation."""
    return max(DROP_FLOOR, DROP_SE * math.sqrt(2.0 * start * (1.0 - start) / draws))


def draws_for_halving(start: float) -> int:
    """The fewest draws an evaluation needs for a halving from `start` to be a drop (smallest_drop <
    start / 2); ValueError where the floor alone hides it (start / 2 <= DROP_FLOOR)."""
    if not 0.0 < start < 1.0 or start / 2.0 <= DROP_FLOOR:
        raise ValueError(f"a halving from {start:g} is within the drop floor {DROP_FLOOR:g}: no number of draws shows it")
    return math.floor(8.0 * DROP_SE**2 * (1.0 - start) / start) + 1


def resolution_sentence(start: float, problems: int, samples: int) -> str:
    """The report's statement of what a suite's evaluations resolve from a start score: the smallest drop
    the degraded and collapsed classes see (both read points below start - the same margin), and the draws
    a halving needs (none does where start / 2 is within the floor)."""
    draws = problems * samples
    drop = smallest_drop(start, draws)
    seen = (f"At {problems} problems x {samples} sample{'s' if samples != 1 else ''} an evaluation, a drop from {start:.2f} is seen only "
            f"beyond {drop:.2f}")
    if not 0.0 < start < 1.0 or start / 2.0 <= DROP_FLOOR:
        return f"{seen}; a halving from {start:.2f} is within the drop floor {DROP_FLOOR:g}: no number of draws shows it."
    return (f"{seen}; a halving needs {draws_for_halving(start)} draws"
            f"{' (met)' if drop < start / 2 else ' (not met: a halving reads as flat)'}.")


def suite_resolutions(classes: pd.DataFrame) -> pd.DataFrame:
    """Per suite whose runs are judged on held-out evaluations (rows of the map's run classes): `start`,
    the median of its runs' first held-out scores, its draws per evaluation (`eval_problems`,
    `eval_samples`) and the `sentence` resolution_sentence makes of them (a row per setting where an arm
    set its own). A suite judged on the training reward has no evaluation draws to state."""
    key = ["suite", "eval_problems", "eval_samples"]
    held_out = classes[(classes["source"] == HELD_OUT) & np.isfinite(classes["start"].to_numpy(dtype=float))]
    frame = held_out.groupby(key, sort=False)["start"].median().reset_index()[[*key[:1], "start", *key[1:]]]
    return frame.assign(sentence=[resolution_sentence(float(r.start), int(r.eval_problems), int(r.eval_samples))
                                  for r in frame.itertuples()])
