"""A swept suite's answer per arm (analysis.evidence.placement, analysis.report.map_answer), on hand-made
outcome tables at four levels of known dose (no training): a fitted boundary with its interval per token
and per response; an arm that never failed, bounded at its top level by that level's runs only; a bracket
of cells; a crossing beyond the data never said as a boundary; arms whose intervals overlap named as not
told apart; an arm that meets no mismatch said to hold by construction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.evidence.placement import BOUNDARY, BRACKET, HELD, Placement, pairs_apart, placements
from analysis.evidence.stability import COLLAPSED, LEARNED, StabilityMap, boundaries
from analysis.report.html import sentence_html
from analysis.report.map_answer import (
    NO_AXIS_LEAD,
    apart_sentence,
    arm_item,
    map_items,
    map_lead,
    placement_rows,
)
from analysis.report.markdown import sentence_markdown
from analysis.report.plain_answer import plain_text, stability_rows
from analysis.report.verdict import Sentence
from analysis.stats.logistic import fit_logistic

DOSES = [0.1, 0.3, 1.0, 3.0]  # per token, one a level
RESPONSES = [0.5, 1.8, 7.0, 24.0]  # per response: the response length grows with the dose (5, 6, 7, 8 tokens)


def arm_rows(arm: str, failures: list[int], runs: list[int] | None = None, kl: float | None = None) -> pd.DataFrame:
    """One arm's runs at the four levels: `failures[i]` of `runs[i]` (6 each by default) collapsed, the rest
    learned; each run's own median KL is its level's dose unless `kl` is given."""
    rows = []
    for i, (dose, response, n, k) in enumerate(zip(DOSES, RESPONSES, runs or [6] * 4, failures, strict=True)):
        rows += [{"suite": "s", "cell": f"noise={i}", "arm": arm, "seed": seed, "outcome": COLLAPSED if seed < k else
                  LEARNED, "dose": dose, "dose_response": response, "kl": dose if kl is None else kl}
                 for seed in range(n)]
    return pd.DataFrame(rows)


def placed(*frames: pd.DataFrame) -> list[Placement]:
    classes = pd.concat(frames, ignore_index=True)
    return placements(StabilityMap(classes, boundaries(classes)))


def item(found: Placement) -> str:
    return plain_text(arm_item(found, ()).text)


def log_interp(dose: float) -> float:
    """The per-response dose of a per-token dose between two levels, by hand: a straight line in log-log
    between the two levels around it."""
    i = int(np.searchsorted(DOSES, dose)) - 1
    share = (math.log10(dose) - math.log10(DOSES[i])) / (math.log10(DOSES[i + 1]) - math.log10(DOSES[i]))
    return 10 ** (math.log10(RESPONSES[i]) + share * (math.log10(RESPONSES[i + 1]) - math.log10(RESPONSES[i])))


def test_a_fitted_boundary_is_given_with_its_interval_per_token_and_per_response():
    """0, 1, 4 and 6 of 6 failed at doses 0.1 to 3: the fit crosses 0.5 at 0.671 per token with Fieller's
    interval [0.274, 1.51], all inside the data; per response each is interpolated between its two levels."""
    (found,) = placed(arm_rows("grpo", [0, 1, 4, 6]))
    x = np.log10(np.repeat(DOSES, 6))
    y = np.concatenate([[True] * k + [False] * (6 - k) for k in (0, 1, 4, 6)])
    center, low, high = (10 ** v for v in fit_logistic(x, y).crossing())
    assert found.kind == BOUNDARY and found.boundary == pytest.approx((center, low, high))
    assert (round(center, 3), round(low, 3), round(high, 3)) == (0.671, 0.274, 1.51)
    response = [log_interp(v) for v in (center, low, high)]
    assert found.boundary_response == pytest.approx(response)
    assert item(found) == (f"grpo (11 of 24 runs failed): fails at dose {center:.3g} per token (95% interval "
                           f"{low:.3g} to {high:.3g}), {response[0]:.3g} per response ({response[1]:.3g} to "
                           f"{response[2]:.3g}).")


def test_an_arm_that_never_failed_is_bounded_at_its_top_level_by_that_levels_runs():
    """No failure in 22 runs, 4 of them at the top level (dose 3): the bound there is 1 - 0.05^(1/4) = 52.7%,
    not the 12.7% of the 22 runs pooled across levels (1 - 0.05^(1/22))."""
    (found,) = placed(arm_rows("gspo", [0, 0, 0, 0], runs=[6, 6, 6, 4]))
    assert found.kind == HELD and found.held is not None and found.held.dose == 3.0
    assert found.held.bound == pytest.approx(1 - 0.05 ** (1 / 4))
    assert item(found) == ("gspo (0 of 22 runs failed): never failed; held up to dose 3 per token (24 per response): "
                           "failure rate ≤ 52.7% at that level (Clopper-Pearson 95%, 0 of 4 runs).")
    (row,) = placement_rows(found)
    assert row["result"] == "failure rate ≤ 52.7% (1 - 0.05^(1/4))"
    (above,) = placed(arm_rows("gspo", [4, 0, 0, 0]))  # most failed at the lowest dose: held *at* 3, not up to
    assert "; held at dose 3 per token (24 per response): failure rate ≤ 39.3%" in item(above)
    (off,) = placed(arm_rows("gspo", [0] * 4).assign(dose=0.0))  # a noise-free engine: no level on the axis
    assert item(off) == "gspo (0 of 24 runs failed): never failed; no level has a dose above 1e-08."


def test_outcomes_separated_by_dose_give_the_bracket_of_cells():
    """None of 6 failed at 0.1 and 0.3, all 6 at 1 and 3: no fit (separated), and the boundary lies between
    0.3, the last level held (bound 1 - 0.05^(1/6) = 39.3%), and 1, the first where most failed."""
    (found,) = placed(arm_rows("grpo_tis", [0, 0, 6, 6]))
    assert found.kind == BRACKET and found.interval() == (0.3, 1.0)
    assert item(found) == ("grpo_tis (12 of 24 runs failed): no boundary fitted; it lies between dose 0.3 per token "
                           "(1.8 per response), the last level held (failure rate ≤ 39.3% there, Clopper-Pearson 95%, "
                           "0 of 6 runs), and dose 1 per token (7 per response), the first level where most runs "
                           "failed (6 of 6).")


def test_a_crossing_beyond_the_measured_doses_is_never_said_as_the_boundary():
    """0, 0, 1 and 2 of 6 failed: the fit crosses 0.5 at 4.41, past the largest dose measured (3). The item
    says the crossing lies beyond the data without its value, and places the arm by the last level held;
    the numbers table keeps the value, marked as no boundary."""
    (found,) = placed(arm_rows("grpo", [0, 0, 1, 2]))
    classes = arm_rows("grpo", [0, 0, 1, 2])
    (b,) = boundaries(classes)
    assert b.fit is not None and 10 ** b.fit.crossing()[0] == pytest.approx(4.41, abs=0.01)
    assert found.kind == HELD and found.boundary is None
    text = item(found)
    assert "4.41" not in text and "fails at" not in text
    assert text == ("grpo (3 of 24 runs failed): no boundary: its fit crosses 0.5 only beyond the data (an "
                    "extrapolation); held up to dose 0.3 per token (1.8 per response): failure rate ≤ 39.3% at that "
                    "level (Clopper-Pearson 95%, 0 of 6 runs); no level where most runs failed: 1 of 6 failed at "
                    "dose 1 and 2 of 6 at 3.")
    (row,) = stability_rows(StabilityMap(classes, [b]))
    assert row["result"].startswith("P(failure) = 0.5 at level dose 4.41 per token (outside the doses measured: "
                                    "not a boundary)")


def test_interval_ends_outside_the_data_are_said_as_such():
    """A boundary whose interval reaches past the doses measured: that end reads "beyond the data" per token
    and per response, never an extrapolated number."""
    frame = arm_rows("sapo", [0, 1, 2, 4])
    (found,) = placed(frame)
    assert found.kind == BOUNDARY and found.boundary is not None and found.boundary[2] > 3.0
    assert found.boundary_response is not None and math.isnan(found.boundary_response[2])
    text = item(found)
    assert text.count("to beyond the data)") == 2 and f"{found.boundary[2]:.3g}" not in text
    (row,) = [r for r in placement_rows(found) if "boundary" in r["what"]]  # the table keeps the fitted end
    assert row["value"].startswith(f"{found.boundary[0]:.4g} [{found.boundary[1]:.4g}, {found.boundary[2]:.4g}]; ")
    assert row["value"].endswith(", -]") and row["result"].startswith("high end outside the doses measured")


def test_arms_whose_intervals_overlap_are_named_as_not_told_apart():
    """grpo and grpo_mis have the same outcomes (interval [0.274, 1.51]); gspo held up to dose 3, above
    both intervals: only grpo and grpo_mis are not told apart."""
    found = placed(arm_rows("grpo", [0, 1, 4, 6]), arm_rows("grpo_mis", [0, 1, 4, 6]), arm_rows("gspo", [0] * 4))
    assert pairs_apart(found) == ([("grpo", "grpo_mis")], [("grpo", "gspo"), ("grpo_mis", "gspo")])
    sentence = apart_sentence(found, ())
    assert sentence is not None and plain_text(sentence.text) == (
        "The suite cannot tell apart grpo and grpo_mis (their intervals on the dose axis overlap); every other two "
        "arms' intervals are disjoint (exploratory: no declared comparison).")
    two = apart_sentence(found[:2], ())
    assert two is not None and two.text.startswith("The suite cannot tell these 2 arms apart")
    assert apart_sentence(found[:1], ()) is None


def test_an_arm_that_meets_no_mismatch_holds_by_construction():
    """grpo_r3's own measured KL is 5e-14 (float rounding) at every level whose dose the others meet: it holds
    by construction, said first; grpo, measuring its level's dose, does not."""
    r3, grpo = placed(arm_rows("grpo_r3", [0] * 4, kl=5e-14), arm_rows("grpo", [0, 1, 4, 6]))
    assert r3.by_construction and not grpo.by_construction
    assert item(r3).startswith("grpo_r3 (0 of 24 runs failed): holds by construction, not by robustness: its own "
                               "measured mismatch is float rounding (at most 1e-08)")
    assert "by construction" not in item(grpo)


def test_the_items_render_nested_under_their_sentence_in_markdown_and_html():
    lead = Sentence("Stability per arm:", (("numbers", "answer-numbers"),),
                    (Sentence("**grpo** fails", (("numbers", "answer-numbers"),)), Sentence("**gspo** held", ())))
    assert sentence_markdown(lead).splitlines() == ["- Stability per arm: ([numbers](#answer-numbers))",
                                                    "  - **grpo** fails ([numbers](#answer-numbers))",
                                                    "  - **gspo** held"]
    assert sentence_html(lead) == ("<li>Stability per arm: (<a href='#answer-numbers'>numbers</a>)<ul><li><strong>grpo"
                                   "</strong> fails (<a href='#answer-numbers'>numbers</a>)</li><li><strong>gspo"
                                   "</strong> held</li></ul></li>")


def test_an_arm_that_failed_where_no_level_has_a_dose_is_placed_nowhere_and_said_so():
    """A sweep that sets no mismatch (router lr x minibatches, say): every level's dose is float rounding,
    so a collapsed run there lies on no dose axis; the item says that, naming no level."""
    frame = arm_rows("grpo", [0, 1, 0, 0])
    frame[["dose", "dose_response", "kl"]] = 1e-14
    (found,) = placed(frame)
    text = item(found)
    assert "no level has a dose above" in text and "failed at dose" not in text and "(1 of 24 runs failed)" in text


def test_a_sweep_where_no_arm_meets_a_mismatch_says_so_once_and_tells_nothing_apart():
    """Every level of both arms at a dose of float rounding: the lead says the map places no arm, each arm's
    item gives its failed runs alone, and no item claims the arms cannot (or can) be told apart."""
    frames = [arm_rows(arm, failures) for arm, failures in (("grpo", [0, 1, 0, 0]), ("gspo", [0, 0, 0, 0]))]
    for frame in frames:
        frame[["dose", "dose_response", "kl"]] = 1e-14
    found = placed(*frames)
    assert map_lead(found) == NO_AXIS_LEAD
    texts = [plain_text(sentence.text) for sentence in map_items(found, ())]
    assert texts == ["grpo: 1 of 24 runs failed.", "gspo: 0 of 24 runs failed."]
