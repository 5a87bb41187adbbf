"""A swept suite's answer per arm (analysis.evidence.placement, analysis.report.map_answer), on hand-made
outcome tables at four levels of known dose (no training): a fitted boundary with its interval per token
and per response; an arm that never failed, bounded at its top level by that level's runs only; a bracket
of cells; a crossing beyond the data never said as a boundary; arms whose intervals overlap told apart by
the paired test, overlap no reason given; an arm that meets no mismatch said to hold by construction; each pair of arms compared on the cells both ran,
Holm over the declared family (or every pair), the rest exploratory."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from analysis.evidence.dose import DOSE_STEPS
from analysis.evidence.placement import (
    BEYOND,
    BOUNDARY,
    BRACKET,
    FALLING,
    HELD,
    UNBOUNDED,
    Placement,
    fit_boundary,
    pair_tests,
    pairs_told_apart,
    placements,
)
from analysis.evidence.stability import COLLAPSED, LEARNED, Boundary, StabilityMap, boundaries
from analysis.report.answer_differs import stability_rows
from analysis.report.answer_words import plain_text, words
from analysis.report.html import sentence_html
from analysis.report.map_answer import (
    LEAD,
    MAX_ITEM_WORDS,
    NO_AXIS_LEAD,
    arm_item,
    map_items,
    map_lead,
    pair_phrase,
    pair_rows,
    placement_rows,
)
from analysis.report.markdown import sentence_markdown
from analysis.report.page import Sentence
from analysis.report.stability_text import boundary_sentence
from analysis.stats.logistic import fit_logistic, no_fit_reason

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
    assert item(found) == ("gspo (0 of 22 runs failed): never failed; held up to dose 3 per token (24 per response; "
                           "0 of 4 failed, ≤ 52.7%).")
    (row,) = placement_rows(found)
    assert row["result"] == "failure rate ≤ 52.7% (1 - 0.05^(1/4))"
    (above,) = placed(arm_rows("gspo", [4, 0, 0, 0]))  # most failed at the lowest dose: held *at* 3, not up to
    assert item(above) == ("gspo (4 of 24 runs failed): no boundary fitted; held at dose 3 per token (24 per response; "
                           "0 of 6 failed, ≤ 39.3%); most failed at dose 0.1 per token (4 of 6).")
    (off,) = placed(arm_rows("gspo", [0] * 4).assign(dose=0.0))  # a noise-free engine: no level on the axis
    assert item(off) == "gspo (0 of 24 runs failed): never failed; no level has a dose above 1e-08."


def test_outcomes_separated_by_dose_give_the_bracket_of_cells():
    """None of 6 failed at 0.1 and 0.3, all 6 at 1 and 3: no fit (separated), and the boundary lies between
    0.3, the last level held (bound 1 - 0.05^(1/6) = 39.3%), and 1, the first where most failed."""
    (found,) = placed(arm_rows("grpo_tis", [0, 0, 6, 6]))
    assert found.kind == BRACKET and found.interval() == (0.3, 1.0)
    assert item(found) == ("grpo_tis (12 of 24 runs failed): no boundary fitted; between dose 0.3 per token (1.8 per "
                           "response; 0 of 6 failed, ≤ 39.3%) and 1 (7 per response; 6 of 6 failed).")


def test_a_crossing_beyond_the_measured_doses_is_never_said_as_the_boundary():
    """0, 0, 2 and 5 of 12 failed: the slope is told from 0 (Fieller's interval bounded) but the fit crosses
    0.5 at 3.45, past the largest dose measured (3). The item says the crossing lies beyond the data without
    its value, and places the arm by the last level held; the numbers table keeps the value, marked as no
    boundary."""
    classes = arm_rows("grpo", [0, 0, 2, 5], runs=[12] * 4)
    (found,) = placed(classes)
    (b,) = boundaries(classes)
    assert b.fit is not None and 10 ** b.fit.crossing()[0] == pytest.approx(3.45, abs=0.01)
    assert all(math.isfinite(end) for end in b.fit.crossing()[1:])
    assert found.kind == HELD and found.boundary is None and found.fit_note == BEYOND
    text = item(found)
    assert "3.45" not in text and "fails at" not in text
    assert text == ("grpo (7 of 48 runs failed): no boundary (crosses 0.5 beyond the data); held up to dose 0.3 per "
                    "token (1.8 per response; 0 of 12 failed, ≤ 22.1%); no level mostly failed.")
    (row,) = stability_rows(StabilityMap(classes, [b]))
    assert row["result"].startswith("P(failure) = 0.5 at level dose 3.45 per token (outside the doses measured: "
                                    "not a boundary), 95% Fieller interval [1.95, 59.7]")
    (levels,) = [r for r in placement_rows(found) if "failed run" in r["what"]]
    assert levels["value"] == "2 of 12 at dose 1; 5 of 12 at 3"


def test_a_fit_whose_slope_is_not_told_from_0_is_never_placed_as_a_boundary():
    """0, 2, 2 and 3 of 6 failed: the fit crosses 0.5 inside the doses measured, but its slope is not
    distinguishable from 0 at 5% (Fieller's interval unbounded): no boundary, in the item, the table and the
    map's sentence alike. 3 of 6 at the top level is half, not most: no level mostly failed."""
    classes = arm_rows("grpo", [0, 2, 2, 3])
    (b,) = boundaries(classes)
    center, low, high = b.fit.crossing()
    assert 0.1 < 10 ** center < 3.0 and (low, high) == (-math.inf, math.inf)
    (found,) = placed(classes)
    assert found.kind != BOUNDARY and found.boundary is None and found.fit_note == UNBOUNDED
    assert found.interval() == (0.1, math.inf)  # from the last level held up: no Fieller interval
    assert found.failed_at is None and math.isnan(b.smallest_majority)  # 3 of 6 is not most
    assert item(found) == ("grpo (7 of 24 runs failed): no boundary (slope not distinguishable from 0); held up to dose "
                           "0.1 per token (0.5 per response; 0 of 6 failed, ≤ 39.3%); no level mostly failed.")
    (row,) = stability_rows(StabilityMap(classes, [b]))
    assert row["result"].startswith("no boundary: the fit's slope") and "Fieller interval unbounded" in row["result"]
    assert "**grpo: no stability boundary placed**" in boundary_sentence(b, ()).text


@pytest.mark.parametrize("failures", [[1, 1, 1, 1], [0, 1, 1, 0]])
def test_the_same_failure_rate_at_every_level_is_no_boundary_in_words(failures):
    """1 of 6 failed at each of four doses (or at the middle two): the fitted slope is rounding (~1e-32), its
    crossing at a dose of ~10^(1e32), past a float's range, where `10 ** center` raised OverflowError in the
    placement and the numbers table. Every reading of the fit says no boundary, in words."""
    classes = arm_rows("grpo", failures)
    (b,) = boundaries(classes)
    assert b.fit is not None and abs(b.fit.slope) < 1e-12 and abs(b.fit.crossing()[0]) > 1e15
    (found,) = placed(classes)
    assert found.kind != BOUNDARY and found.fit_note == UNBOUNDED
    assert item(found).startswith(f"grpo ({sum(failures)} of 24 runs failed): no boundary (slope not distinguishable "
                                  "from 0);")
    (row,) = stability_rows(StabilityMap(classes, [b]))
    assert row["result"].startswith("no boundary: the fit's slope") and "not distinguishable from 0" in row["result"]
    text = boundary_sentence(b, ()).text
    assert "**grpo: no stability boundary placed**" in text and "slope is not distinguishable from 0" in text


def test_failures_that_fall_as_the_dose_grows_are_no_boundary_in_every_reading():
    """4, 0, 1 and 0 of 6 failed at doses 0.1 to 3: the fit's slope is -3.22 per log10 dose, told from 0
    (Fieller's interval bounded, [3.19e-11, 0.297]), its crossing at 0.119 inside the doses measured. A
    boundary is where a rising failure rate crosses 0.5: falling failures have none, said so in the item,
    the numbers table and the map's sentence (each read through placement.why_no_boundary)."""
    classes = arm_rows("grpo", [4, 0, 1, 0])
    (b,) = boundaries(classes)
    assert b.fit is not None and b.fit.slope == pytest.approx(-3.22, abs=0.01)
    center, low, high = (10 ** v for v in b.fit.crossing())
    assert (round(center, 3), round(high, 3)) == (0.119, 0.297) and 0 < low < center
    (found,) = placed(classes)
    assert found.kind != BOUNDARY and found.boundary is None and found.fit_note == FALLING
    assert fit_boundary(b) == (None, FALLING)
    text = item(found)
    assert "fails at" not in text
    assert text == ("grpo (5 of 24 runs failed): no boundary (failures do not rise with the dose); held at dose 3 per "
                    "token (24 per response; 0 of 6 failed, ≤ 39.3%); most failed at dose 0.1 per token (4 of 6).")
    (row,) = stability_rows(StabilityMap(classes, [b]))
    assert row["result"].startswith("no boundary: failures do not rise with the dose (the fit's slope, -3.22 per log10 "
                                    "level dose, is negative")
    sentence = boundary_sentence(b, ()).text
    assert sentence.startswith("**grpo: no stability boundary placed**: failures do not rise with the level dose")
    assert "P(degraded or collapsed) crosses" not in sentence


def test_no_fittable_pattern_of_failures_at_four_levels_raises():
    """Every pattern of k of 6 runs failed at each of four levels that has a logistic fit (2,353 of 7^4): the
    fit's readings (the placement's boundary, the numbers table's row, the map's sentence) give an answer,
    and a boundary only inside the doses measured with a bounded interval. 16 of them raised OverflowError."""
    x = np.log10(np.repeat(DOSES, 6))
    bounds = []
    for failures in itertools.product(range(7), repeat=4):
        y = np.concatenate([np.arange(6) < k for k in failures])
        if no_fit_reason(x, y) is None:
            bounds.append(Boundary("".join(map(str, failures)), 24, int(y.sum()), 0, 0, DOSES[0], DOSES[-1],
                                   fit_logistic(x, y), "", math.nan, math.nan, 4, 6))
    assert len(bounds) == 2353
    rows = stability_rows(StabilityMap(pd.DataFrame(), bounds))
    for b, row in zip(bounds, rows, strict=True):
        found, note = fit_boundary(b)
        assert boundary_sentence(b, ()).text
        if found is None:
            assert note in (BEYOND, UNBOUNDED, FALLING) and row["result"].startswith(("no boundary", "P(failure) = 0.5"))
        else:
            assert DOSES[0] <= found[0] <= DOSES[-1] and 0 <= found[1] <= found[0] <= found[2] < math.inf, b.arm
            assert b.fit is not None and b.fit.slope > 0, b.arm  # a boundary only where failures rise


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


def test_arms_whose_intervals_overlap_are_told_apart_by_the_paired_test_and_overlap_is_no_reason():
    """grpo_tis fails on 0, 3, 6 and 6 of 6 seeds at the four levels, grpo on 0, 0, 3 and 6 (seeds below k
    fail): their intervals on the dose axis overlap, yet cell by cell only grpo_tis failed in 3 cells at
    the second level and 3 at the third, grpo alone in none: 6 discordant cells one way, p = 2/2^6 =
    0.03125 (one pair: Holm leaves it), so the item says the two are told apart and never names overlap."""
    found = placed(arm_rows("grpo_tis", [0, 3, 6, 6]), arm_rows("grpo", [0, 0, 3, 6]))
    (a_low, a_high), (b_low, b_high) = found[0].interval(), found[1].interval()
    assert a_low <= b_high and b_low <= a_high  # the intervals overlap
    classes = pd.concat([arm_rows("grpo_tis", [0, 3, 6, 6]), arm_rows("grpo", [0, 0, 3, 6])], ignore_index=True)
    (test,) = pair_tests(classes)
    assert (test.first_only, test.second_only, test.cells) == (6, 0, 24)
    assert test.levels == (("noise=0", 0, 0), ("noise=1", 3, 0), ("noise=2", 3, 0), ("noise=3", 0, 0))
    assert test.p == pytest.approx(0.03125) and test.adjusted == pytest.approx(0.03125) and test.separates
    texts = [plain_text(s.text) for s in map_items(found, (), [test])]
    assert texts[-1] == ("Paired by cell (the same level and seed), McNemar's exact test of failure stratified by level "
                         "tells these 2 arms apart (exploratory: no declared family; Holm over the 1 pair): only "
                         "grpo_tis failed in 6 of its 24 cells shared with grpo, only grpo in 0 (p = 0.031, Holm 0.031).")
    assert not any("overlap" in text for text in texts)


def test_an_arm_that_meets_no_mismatch_holds_by_construction():
    """grpo_r3's own measured KL is 5e-14 (float rounding) at every level whose dose the others meet: it holds
    by construction, said first; grpo, measuring its level's dose, does not."""
    r3, grpo = placed(arm_rows("grpo_r3", [0] * 4, kl=5e-14), arm_rows("grpo", [0, 1, 4, 6]))
    assert r3.by_construction and not grpo.by_construction
    assert item(r3) == ("grpo_r3 (0 of 24 runs failed): faces no mismatch by construction; held up to dose 3 per token "
                        "(24 per response; 0 of 6 failed, ≤ 39.3%).")
    assert placement_rows(r3)[0]["what"] == "grpo_r3: faces no mismatch by construction"
    assert "by construction" not in item(grpo)


SHAPES = [[0, 1, 4, 6], [0, 0, 6, 6], [0, 2, 2, 3], [1, 1, 1, 1], [4, 0, 0, 0], [0, 0, 0, 0], [6, 6, 6, 5],
          [1, 2, 1, 2], [0, 3, 0, 3], [4, 0, 1, 0], [0, 6, 0, 6], [0, 1, 2, 4], [2, 0, 4, 0]]


def test_every_arm_item_keeps_the_word_limit():
    """Each item's words (plain text, the arm named in one word), on a shape of every kind (a boundary, a
    bracket, held up to or at a level, most failed below a level held, failures at no majority, nothing
    held), each as an arm that meets its dose and as one that faces no mismatch by construction: at most
    MAX_ITEM_WORDS (stage 3's items ran to ~60)."""
    frames = [arm_rows(f"a{i}", shape) for i, shape in enumerate(SHAPES)]
    frames += [arm_rows(f"r{i}", shape, kl=5e-14) for i, shape in enumerate(SHAPES)]
    found = placed(*frames)
    assert {p.kind for p in found} >= {BOUNDARY, BRACKET, HELD} and any(p.by_construction for p in found)
    counts = {p.arm: words(arm_item(p, ()).text) for p in found}
    assert max(counts.values()) <= MAX_ITEM_WORDS, counts
    assert max(counts.values()) >= MAX_ITEM_WORDS - 6  # the limit is near what the longest item needs


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


def test_a_sweep_where_no_arm_meets_a_mismatch_says_so_once_and_still_pairs_the_arms_cell_by_cell():
    """Every level of both arms at a dose of float rounding: the lead says the map places no arm, each arm's
    item gives its failed runs alone, and the paired test, which needs no dose, compares them: 1 cell where
    grpo alone failed, p = 1."""
    frames = [arm_rows(arm, failures) for arm, failures in (("grpo", [0, 1, 0, 0]), ("gspo", [0, 0, 0, 0]))]
    for frame in frames:
        frame[["dose", "dose_response", "kl"]] = 1e-14
    found = placed(*frames)
    assert map_lead(found) == NO_AXIS_LEAD
    texts = [plain_text(sentence.text) for sentence in map_items(found, (), pair_tests(pd.concat(frames)))]
    assert texts[:2] == ["grpo: 1 of 24 runs failed.", "gspo: 0 of 24 runs failed."]
    assert texts[2].endswith("does not tell these 2 arms apart (exploratory: no declared family; Holm over the 1 "
                             "pair): only grpo failed in 1 of its 24 cells shared with gspo, only gspo in 0 (p = 1, "
                             "Holm 1).")


def outcomes(arm: str, failed: dict[str, list[int]]) -> pd.DataFrame:
    """One arm's runs at levels `failed` (level -> its seeds' outcomes, 1 failed, 0 held), seeds 0, 1, ..."""
    return pd.DataFrame([{"suite": "s", "cell": level, "arm": arm, "label": f"{arm}@{level}", "seed": seed,
                          "outcome": COLLAPSED if f else LEARNED}
                         for level, seeds in failed.items() for seed, f in enumerate(seeds)])


def three_arms() -> pd.DataFrame:
    """a fails at low 2 of 4 (seeds 0, 1), at high 4 of 4; b at low none, at high seeds 0, 1 and 2; c has
    no run at high, and at low fails on seed 3 only."""
    return pd.concat([outcomes("a", {"low": [1, 1, 0, 0], "high": [1, 1, 1, 1]}),
                      outcomes("b", {"low": [0, 0, 0, 0], "high": [1, 1, 1, 0]}),
                      outcomes("c", {"low": [0, 0, 0, 1]})], ignore_index=True)


def test_each_pair_is_compared_on_the_cells_both_ran_with_its_discordant_cells_per_level():
    """a against b: low 2 cells only a failed, high 1 (seed 3): 3 to 0 over 8 cells, p = 2/8 = 0.25. a
    against c: only the 4 low cells are shared: a alone at seeds 0 and 1, c alone at seed 3: 2 to 1, p = 1.
    No declared family: Holm over the 3 pairs, every one exploratory."""
    ab, ac, bc = pair_tests(three_arms())
    assert (ab.first, ab.second, ab.cells, ab.levels) == ("a", "b", 8, (("low", 2, 0), ("high", 1, 0)))
    assert ab.p == 0.25 and ab.adjusted == pytest.approx(0.75)  # 0.25 the smallest of 3: x 3
    assert (ac.cells, ac.levels, ac.p) == (4, (("low", 2, 1),), 1.0)
    assert (bc.cells, bc.first_only, bc.second_only) == (4, 0, 1)
    assert not any(t.declared for t in (ab, ac, bc)) and pairs_told_apart([ab, ac, bc]) == ([], [ab, ac, bc])
    assert pair_phrase(ab) == "only a failed in 3 of its 8 cells shared with b, only b in 0 (p = 0.25, Holm 0.75)"
    (same,) = pair_tests(pd.concat([outcomes("d", {"low": [1, 0]}), outcomes("e", {"low": [1, 0]})]))
    assert pair_phrase(same) == "in none of the 2 cells d and e share did only one fail (p = 1, Holm 1)"
    (apart,) = pair_tests(three_arms(), [("a", "q")])[:1]
    assert pair_phrase(apart) == "a and q share no cell (nothing tested)"
    row = pair_rows([ab, ac, bc])[0]
    assert row["value"] == "3 / 0 of 8 shared cells (low 2/0, high 1/0)"
    assert "3 cells where exactly one failed, pooled over 2 levels; exploratory (no declared family), Holm over the " \
           "3 pairs" in row["test"] and row["result"] == "p = 0.25, Holm-adjusted 0.75: does not tell apart"


def separating_arms() -> pd.DataFrame:
    """x fails on all 6 seeds at two levels where y and z hold on all 6: 12 cells x alone; y and z alike."""
    return pd.concat([outcomes("x", {"l1": [1] * 6, "l2": [1] * 6}), outcomes("y", {"l1": [0] * 6, "l2": [0] * 6}),
                      outcomes("z", {"l1": [0] * 6, "l2": [0] * 6})], ignore_index=True)


def test_a_declared_family_is_holm_adjusted_alone_and_every_other_pair_is_exploratory():
    """Declared: (y, x) and (q, x), q an arm with no run on the map (it counts at p = 1: the family is the
    2 declared). y against x: 0 to 12, p = 2/4096; Holm over 2: 2 x 2/4096. x against z, as separate, is
    outside the family: unadjusted, never told apart. Without a declaration all 3 pairs are Holm's: the two
    of 2/4096 both at 3 x 2/4096 (the second's 2 x 2/4096 raised to the first's), y against z 1."""
    declared = pair_tests(separating_arms(), [("y", "x"), ("q", "x")])
    yx, qx, *rest = declared
    assert (yx.first, yx.second, yx.first_only, yx.second_only) == ("y", "x", 0, 12) and yx.declared
    assert yx.p == 2 / 4096 and yx.adjusted == pytest.approx(2 * 2 / 4096) and yx.separates
    assert (qx.cells, qx.p, qx.adjusted, qx.separates) == (0, 1.0, 1.0, False)
    assert [(t.first, t.second) for t in rest] == [("x", "z"), ("y", "z")]
    assert all(not t.declared and math.isnan(t.adjusted) and not t.separates for t in rest)
    assert pairs_told_apart(declared) == ([yx], [qx])
    xy, xz, yz = pair_tests(separating_arms())
    assert xy.adjusted == pytest.approx(3 * 2 / 4096) and xz.adjusted == pytest.approx(3 * 2 / 4096)  # step-down, monotone
    assert yz.adjusted == 1.0 and pairs_told_apart([xy, xz, yz]) == ([xy, xz], [yz])


def test_a_lag_maps_lead_says_its_dose_is_measured_at_each_levels_lag():
    """A map swept over rollout.lag measures a level's dose from the first step at its lag
    (analysis.evidence.dose.first_steps): the lead says so; a map of another sweep keeps the plain lead."""
    frame = arm_rows("grpo", [0, 1, 3, 6])
    assert map_lead(placed(frame), frame) == LEAD
    lagged = frame.assign(**{"sweep/lag": 4})
    assert map_lead(placed(lagged), lagged) == LEAD.replace(f"over the first {DOSE_STEPS} steps of its runs",
                                                            f"over the first {DOSE_STEPS} steps of its runs at the "
                                                            "level's lag")


def test_a_lag_maps_answer_says_which_lag_each_level_dose_is():
    """Every arm is placed on the level dose; on a lag map an item names each level's lag with its dose, by
    dose, and the levels that meet no mismatch (lag 0): so each arm's dose reads on the lag axis. Other maps
    have no such item."""
    from analysis.report.map_answer import lag_levels_sentence

    frame = pd.DataFrame({"cell": ["lag=0", "lag=8", "lag=2"], "dose": [0.0, 0.5, 0.08], "sweep/lag": [0, 8, 2]})
    said = lag_levels_sentence(frame, ())
    assert said is not None and said.text == ("The levels by lag: lag=2 at dose 0.08, lag=8 at 0.5 per token; lag=0 "
                                              "meets no mismatch.")
    assert lag_levels_sentence(frame.drop(columns="sweep/lag"), ()) is None
    classes = arm_rows("grpo", [0, 1, 3, 6]).assign(**{"sweep/lag": 4})
    texts = [plain_text(s.text) for s in map_items(placed(classes), (), [], StabilityMap(classes, boundaries(classes)))]
    assert any(text.startswith("The levels by lag: noise=0 at dose") for text in texts)  # the answer carries it
