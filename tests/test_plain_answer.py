"""The answer in plain sentences (analysis.report.answer_*, put in order by analysis.report.sections), built
from hand-made results: at most five sentences of at most 40 words, counts that mean what the words beside
them say (no "0 of 2 seeds rose" beside a mean that went up), the test and the paired seeds a decision
needs, the numbers in a table below them, a swept suite's answer per arm; and where it shows: first in
report.md and report.html, and at the end of `gspo-bench run` on the console."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.data.load import finished, load_results, unfinished
from analysis.evidence.gather import gather
from analysis.evidence.stability import stability_map
from analysis.report.anchors import NUMBERS
from analysis.report.answer_words import MAX_SENTENCES, MAX_WORDS, PlainAnswer, plain_text, words
from analysis.report.map_answer import LEAD
from analysis.report.sections import console_answer, plain_answer
from analysis.stats.library import seeds_needed
from tests.helpers.primary import GAIN, SIX_ARMS, evidence_of, suite_folder
from tests.helpers.results import make_run
from tests.helpers.stability import FALLING, swept_run

# 20 steps: the gate's start window is steps 1-10 (mean 0.3), its end window steps 16-20 (mean 0.32): the mean
# goes up, and Welch's one-sided test of it does not pass (the steps swing by 0.4)
UP_BUT_NOT_PASSED = [0.1, 0.5] * 5 + [0.1, 0.5, 0.1, 0.5, 0.1] + [0.1, 0.6, 0.1, 0.6, 0.2]


def answer_of(root: Path) -> PlainAnswer:
    results = load_results(root)
    return plain_answer(gather(finished(results)), unfinished(results), stability_map(results))


def quickstart_like(root: Path, seeds: int = 2) -> Path:
    """grpo and grpo_rr learn on every seed; gspo's mean goes up on every seed but its test never passes."""
    for seed in range(seeds):
        make_run(root, "grpo", seed)
        make_run(root, "grpo_rr", seed, bonus=-0.01)
        make_run(root, "gspo", seed, columns={"reward/mean": [r + 0.01 * seed for r in UP_BUT_NOT_PASSED]})
    return root / "synth"


def check_form(found: PlainAnswer) -> list[str]:
    """The rules every answer keeps; returns the sentences as plain text."""
    texts = [plain_text(s.text) for s in found.sentences]
    assert 1 <= len(texts) <= MAX_SENTENCES, texts
    assert all(words(s.text) <= MAX_WORDS for s in found.sentences), [(words(s.text), t) for s, t in
                                                                      zip(found.sentences, texts, strict=True)]
    # numbers, intervals and per-seed values live in the table: the sentences hold counts and the 5% level only
    assert all(set(re.findall(r"\d+\.\d+", t)) <= {"0.05"} for t in texts), texts
    assert all(("numbers", NUMBERS) in s.links for s in found.sentences if s.links), found.sentences
    return texts


def test_a_mean_that_went_up_without_passing_the_test_is_not_called_a_rise(tmp_path):
    """The "gspo 0.127 -> 0.182 (0 of 2 seeds rose)" case: gspo's end is above its start on both seeds, and the
    learnability test passes on neither. The sentence says it did not pass the test; the table beside it shows
    the start and end and "passed on 0 of 2 seeds": the words and the count mean the same thing."""
    found = answer_of(quickstart_like(tmp_path))
    texts = check_form(found)
    assert "RL learned on every seed for grpo and grpo_rr; gspo did not pass it on any seed" in texts[1]
    assert not any(re.search(r"\brose\b|\b0 of \d+ seeds? (learned|passed|rose)", t) for t in texts), texts
    gspo = found.numbers[found.numbers["what"].str.startswith("gspo:")].iloc[0]
    start, end = (float(x) for x in gspo["value"].split(" (")[0].split(" -> "))
    assert end > start and gspo["result"] == "passed on 0 of 2 seeds"
    for arm in ("grpo", "grpo_rr"):
        assert found.numbers[found.numbers["what"].str.startswith(f"{arm}:")].iloc[0]["result"] == "passed on 2 of 2 seeds"


def test_the_test_and_the_seeds_a_decision_needs_are_named_at_this_n(tmp_path):
    """Two seeds: the exact sign-flip test cannot go below 2/4 = 0.5 with 2 pairs, and with Holm over the
    report's m comparisons (the reward pairs and the paper checks, as the table says) a decision needs
    seeds_needed(m) pairs, named with the flag that runs them."""
    found = answer_of(quickstart_like(tmp_path))
    texts = check_form(found)
    size = int(found.numbers.iloc[-1]["test"].split("Holm over ")[1].split()[0])
    needed = seeds_needed(size)
    assert texts[2].startswith("No objective is ahead of every other yet: grpo and grpo_rr end highest, and 2 "
                               "paired seeds cannot separate them")
    assert texts[4] == (f"For a decision, run {needed} paired seeds (--seeds {','.join(map(str, range(needed)))}): "
                        f"with 2, the exact sign-flip test, Holm-adjusted over {size} comparisons, cannot reach p "
                        "below 0.05.")
    assert found.numbers.iloc[-1][["value", "result"]].tolist() == [f"2 / {needed}",
                                                                     "smallest p 2 paired seeds can give: 0.5"]


def test_the_paper_sentence_counts_decisions_and_names_what_every_seed_shows(tmp_path):
    """make_run's GSPO clips 0.15 of tokens and GRPO 0.0013 on every seed, and its layers drift 0.01 more per
    layer: every seed points the paper's way on both, and 2 seeds decide nothing."""
    texts = check_form(answer_of(quickstart_like(tmp_path)))
    assert texts[3].startswith("Of the paper's ") and "this run has too few seeds to decide any" in texts[3]
    assert texts[3].endswith("on every seed, GSPO clips more tokens than GRPO and deeper layers drift more, as the "
                             "paper reports.")


def test_a_finding_the_seeds_disagree_on_is_not_said_on_every_seed(tmp_path):
    """As above, but GSPO's seed 1 clips fewer tokens than GRPO's (0.0005 against 0.0013): the clip finding is
    no longer named among what every seed shows; the layers' drift still is."""
    for seed in range(2):
        make_run(tmp_path, "grpo", seed)
        make_run(tmp_path, "gspo", seed, columns={"reward/mean": [r + 0.01 * seed for r in UP_BUT_NOT_PASSED],
                                                  **({"clip/frac": 0.0005} if seed == 1 else {})})
    texts = check_form(answer_of(tmp_path / "synth"))
    assert "GSPO clips more tokens than GRPO" not in texts[3], texts[3]
    assert texts[3].endswith("on every seed, deeper layers drift more, as the paper reports."), texts[3]


def test_a_declared_comparison_an_arm_wins_without_learning_on_every_seed_names_no_winner(tmp_path):
    """gspo ends above grpo on all 8 seeds (decided: sign-flip p = 2/256), but gspo's seed 0 is flat (it
    starts where it ends, above grpo's end): an arm that did not learn on every seed is never said to "end
    above", its lead is where it started."""
    folder = suite_folder(tmp_path, {"grpo": [0.0] * 8, "gspo": GAIN}, {"primary": {"each_vs": "grpo"}})
    make_run(tmp_path, "gspo", 0, slope=0.0, bonus=0.25)
    evidence, results = evidence_of(folder)
    assert "gspo" not in next(iter(evidence.learnings.values())).learned
    texts = check_form(plain_answer(evidence, unfinished(results), stability_map(results)))
    assert "ends above" not in texts[2], texts[2]
    assert texts[2] == ("Of the 1 comparison declared in the suite file, 0 are decided, 1 is not named (the arm above "
                        "did not learn on every seed)."), texts[2]


def test_a_decided_leader_is_named_and_the_decision_says_it_stands(tmp_path):
    """grpo_rr gains 0.05 on each of 6 seeds over grpo, one comparison: p = 2/64 < 0.05, Holm's factor 1."""
    for seed in range(6):
        make_run(tmp_path, "grpo", seed)
        make_run(tmp_path, "grpo_rr", seed, bonus=0.05)
    texts = check_form(answer_of(tmp_path / "synth"))
    assert texts[2] == ("grpo_rr ends above every other objective, decided by the exact sign-flip test, "
                        "Holm-adjusted over 1 comparison.")
    assert texts[3] == "The paper's findings are not checked here: that needs GRPO and GSPO runs."
    assert texts[4] == ("Decided at 6 paired seeds by the exact sign-flip test, Holm-adjusted over 1 comparison; "
                        "the table gives every interval.")


def test_a_declared_family_is_answered_by_its_comparisons(tmp_path):
    """Six arms, 8 seeds, declared `each_vs: grpo` (5 tests): grpo_r3 gains 0.05 +- 0.01 on every seed (Holm
    5 x 2/256 = 0.039: decided), the other four tie with grpo exactly; the paper checks stay exploratory."""
    evidence, results = evidence_of(suite_folder(tmp_path, SIX_ARMS, {"primary": {"each_vs": "grpo"}}))
    texts = check_form(plain_answer(evidence, unfinished(results), stability_map(results)))
    assert texts[2] == ("Of the 5 comparisons declared in the suite file, 1 is decided (grpo_r3 ends above grpo), 4 are "
                        "not distinguishable at 8 paired seeds.")
    assert texts[3].startswith("The paper's findings are exploratory here")
    assert texts[4].startswith("At 8 paired seeds the exact sign-flip test, Holm-adjusted over 5 comparisons, can decide")


@pytest.fixture()
def swept(tmp_path) -> Path:
    """grpo and gspo, 2 seeds, at router_noise 0 and 1: grpo falls on both seeds at noise 1, gspo never."""
    for noise, kl in ((0.0, 0.002), (1.0, 0.2)):
        for seed in range(2):
            for label in ("grpo", "gspo"):
                falls = label == "grpo" and noise == 1.0
                swept_run(tmp_path, label, seed, {"router_noise": noise},
                          {"mismatch/k3_kl": kl * (1 + 0.2 * seed), **({"reward/mean": FALLING} if falls else {})})
    return tmp_path / "synth"


def test_a_swept_suite_answers_per_arm_before_any_sweep_point(swept):
    """The stability map's answer: each arm in one sentence, where it learned and where it failed, and what to
    run to place a boundary; no sentence speaks of one sweep point's comparison."""
    found = answer_of(swept)
    texts = check_form(found)
    assert texts[0].startswith("8 runs finished: grpo and gspo on 2 seeds at each of 2 sweep points")
    assert "grpo learned on every seed at 1 of 2 sweep points; gspo learned on every seed at 2 of 2" in texts[1]
    assert texts[2] == LEAD.replace("**", "")
    items = [plain_text(i.text) for i in found.sentences[2].items]
    assert items[0].startswith("grpo (2 of 4 runs failed): no boundary fitted; between dose 0.0022 per token")
    assert items[1].startswith("gspo (0 of 4 runs failed): never failed; held up to dose 0.22 per token")
    assert items[2] == ("Paired by cell (the same level and seed), McNemar's exact test of failure stratified by level "
                        "does not tell these 2 arms apart (exploratory: no declared family; Holm over the 1 pair): only "
                        "grpo failed in 2 of its 4 cells shared with gspo, only gspo in 0 (p = 0.5, Holm 0.5).")
    assert all(i.links == (("numbers", NUMBERS),) for i in found.sentences[2].items)
    printed = console_answer(load_results(swept))[2].splitlines()  # the console: the items indented under it
    assert printed[0] == texts[2] and printed[1:] == [f"    - {i}" for i in items]
    assert texts[4].startswith("For a decision on where a boundary lies, sweep gspo past the largest level dose")
    assert found.numbers[found.numbers["sentence"] == 3]["what"].str.split(":").str[0].tolist() == [
        "grpo", "grpo", "grpo", "gspo", "gspo", "grpo against gspo"]  # per arm: its runs and fit, its last level
    # held, its first most failed; then the pair, cell by cell


def test_runs_the_harness_stopped_as_collapsed_are_said_to_be_judged_by_the_map(swept):
    """A swept suite with a run the harness stopped as collapsed and one that failed: the map judges the
    collapsed run (stage 3's 25 such runs read "did not finish and are left out" though the map placed them);
    the failed one is left out. Without a map, a collapsed run is left out like any other."""
    root = swept.parent
    swept_run(root, "gspo", 2, {"router_noise": 1.0}, {"mismatch/k3_kl": 0.2}, steps=8, status="collapsed",
              message="reward fell to the floor")
    swept_run(root, "grpo", 2, {"router_noise": 1.0}, {"mismatch/k3_kl": 0.2}, steps=5, status="failed")
    found = answer_of(swept)
    assert "gspo@router_noise=1.0" in set(stability_map(load_results(swept)).classes["label"])
    first = check_form(found)[0]
    assert first.endswith("compared on the training reward; the map also judges 1 run stopped as collapsed; 1 unfinished "
                          "run is left out."), first
    rows = found.numbers.set_index("what")["value"]
    assert rows["runs finished / not finished"] == "8 / 2"
    assert rows["runs stopped as collapsed, judged by the stability map only"] == "1"
    results = load_results(swept)
    unmapped = plain_answer(gather(finished(results)), unfinished(results), None)
    assert plain_text(unmapped.sentences[0].text).endswith("; 2 more runs did not finish and are left out.")


def test_the_report_opens_with_the_sentences_and_the_console_prints_them(tmp_path):
    """report.md's first section is the answer, linked to its evidence, then the numbers; the verdict's detailed
    sentences follow the figures; `console_answer` is the same sentences in plain text (no markdown)."""
    from analysis.report.writer import write_report

    root = quickstart_like(tmp_path)
    paths = write_report(load_results(root), tmp_path / "report")
    md = paths["md"].read_text()
    first = md.split("## The answer\n")[1].split("<a id=")[0].strip().splitlines()
    lines = console_answer(load_results(root))
    assert len(first) == len(lines) <= MAX_SENTENCES
    assert all(line.startswith("- ") and "(#answer-numbers)" in line for line in first)
    assert [plain_text(re.sub(r" \(\[.*$", "", line[2:])) for line in first] == lines
    assert not any("**" in line or "\\" in line or "`" in line for line in lines)
    assert md.index("## The answer\n") < md.index(f'<a id="{NUMBERS}"></a>') < md.index("## Figures") < md.index(
        "## Every claim, with its numbers")
    html = paths["html"].read_text()
    assert html.index("<h2 id='answer'>") < html.index(f"<details><summary><h2 id='{NUMBERS}'>") < html.index(
        "<h2 id='figures'>")


def test_two_unswept_suites_side_by_side_are_worded_as_suites_not_sweep_points(tmp_path):
    """`gspo-bench report A B` of two suites without a sweep: their groups are suites ("in each of 2 suites"),
    each arm (alpha/grpo) is in one of them, so it learned on every seed or did not ("at 1 of 1 sweep
    points" once); a suite swept as well as another is told by both."""
    from analysis.report.answer_differs import leader_text
    from analysis.report.answer_words import group_count

    for seed in range(3):
        for suite in ("alpha", "beta"):
            make_run(tmp_path, "grpo", seed, suite=suite)
            make_run(tmp_path, "gspo", seed, suite=suite, slope=0.0 if suite == "beta" else 0.01)
    results = load_results(tmp_path / "alpha", tmp_path / "beta")
    evidence = gather(finished(results))
    texts = check_form(plain_answer(evidence, unfinished(results), None))
    assert texts[0].startswith("12 runs finished: alpha/grpo, alpha/gspo, beta/grpo and beta/gspo on 3 seeds in each "
                               "of 2 suites, at equal compute"), texts[0]
    assert texts[1].endswith("alpha/grpo, alpha/gspo and beta/grpo learned on every seed; beta/gspo did not learn on "
                             "every seed."), texts[1]
    assert leader_text(evidence)[0].startswith("no objective is ahead of every other in any of the 2 suites by ")
    assert not any("sweep point" in t for t in texts), texts
    assert group_count([("a", ""), ("b", "")]) == "2 suites"
    assert group_count([("a", "lr=1"), ("a", "lr=2")]) == "2 sweep points"
    assert group_count([("a", "lr=1"), ("a", "lr=2"), ("b", "")], 2) == "2 pairs of suite and sweep point"


@pytest.mark.parametrize("learns", [True, False])
def test_a_suite_of_one_objective_gets_no_seeds_advice(tmp_path, learns):
    """One arm: Holm's family is empty, so no number of paired seeds decides anything ("then run 6 paired
    seeds, as many as the exact sign-flip test, Holm-adjusted over 0 comparisons, needs" once); the advice
    to get RL learning stays where it did not learn."""
    for seed in range(2):
        make_run(tmp_path, "grpo", seed, slope=0.01 if learns else 0.0)
    found = answer_of(tmp_path / "synth")
    texts = check_form(found)
    assert texts[4] == (("" if learns else "For a decision, first get RL to pass the learnability test on every seed "
                         "(a larger budget); n") + ("N" if learns else "") + "othing is compared here (one objective), "
                        "so no number of paired seeds is advised: add an objective to compare it with.")
    assert not any("0 comparisons" in t or "paired seeds (" in t for t in texts), texts
    assert 5 not in set(found.numbers["sentence"])


def test_a_reward_never_finite_is_not_data(tmp_path):
    """Every training reward NaN (or inf, read as missing): the answer said "compared on the training
    reward" and that the arms "ran too few steps to be tested". The first sentence says for which arms
    the reward was never finite, the second that they cannot be tested, and nothing is compared."""
    for label in ("grpo", "gspo"):
        for seed in (0, 1):
            rewards = [float("nan")] * 20 if label == "grpo" else None
            make_run(tmp_path, label, seed, **({"columns": {"reward/mean": rewards}} if rewards else {}))
    ran, gate, *_ = answer_of(tmp_path / "synth").sentences
    assert "compared on the **training reward** (never finite for grpo)" in ran.text
    assert "grpo never logged a finite training reward" in gate.text and "too few steps" not in gate.text
    assert "RL learned on every seed for gspo" in gate.text and "gspo never" not in gate.text


def test_the_learnability_test_reads_the_finite_rewards_alone():
    """A reward missing at some steps (NaN, as a step whose rewards were not measured) leaves those steps
    out of the test's windows: the same start, end and p as the finite steps alone."""
    from analysis.evidence.learning import training_rise

    finite = np.array(UP_BUT_NOT_PASSED) + np.linspace(0.0, 0.5, 20)
    holes = np.insert(finite, [3, 11, 19], float("nan"))
    assert training_rise(holes) == training_rise(finite) and np.isfinite(training_rise(finite)[2])
    assert all(np.isnan(training_rise(np.full(12, float("nan")))))


def test_a_swept_suite_with_a_declared_family_tells_its_declared_pairs_apart_cell_by_cell(tmp_path):
    """grpo, grpo_rr and gspo on 8 seeds at router_noise 0 and 1, the suite file declaring each arm against
    grpo: grpo's reward falls at noise 1 on every seed, the others' never. Each declared pair has 8 cells of
    16 where grpo alone failed: p = 2/2^8 = 0.0078, Holm over the 2 declared 0.016, told apart; grpo_rr
    against gspo is the one exploratory pair."""
    for noise, kl in ((0.0, 0.002), (1.0, 0.2)):
        for seed in range(8):
            for label in ("grpo", "grpo_rr", "gspo"):
                falls = label == "grpo" and noise == 1.0
                swept_run(tmp_path, label, seed, {"router_noise": noise},
                          {"mismatch/k3_kl": kl, **({"reward/mean": FALLING} if falls else {})})
    (tmp_path / "synth" / "suite.yaml").write_text(yaml.safe_dump(
        {"name": "synth", "objectives": [{"name": "grpo"}, {"name": "grpo_rr"}, {"name": "gspo"}],
         "analysis": {"primary": {"each_vs": "grpo"}}}))
    evidence, results = evidence_of(tmp_path / "synth")
    found = plain_answer(evidence, unfinished(results), stability_map(results))
    items = [plain_text(i.text) for i in found.sentences[2].items]
    assert items[-1] == (
        "Paired by cell (the same level and seed), McNemar's exact test of failure stratified by level, over the 2 "
        "declared pairs (Holm over them): tells apart grpo_rr and grpo (only grpo failed in 8 of its 16 cells shared "
        "with grpo_rr, only grpo_rr in 0 (p = 0.0078, Holm 0.016)); gspo and grpo (only grpo failed in 8 of its 16 "
        "cells shared with gspo, only gspo in 0 (p = 0.0078, Holm 0.016)); the other 1 pair is exploratory (no "
        "claim).")
    rows = found.numbers[found.numbers["what"].str.contains(" against ")]
    assert rows["test"].str.endswith(("declared, Holm over the 2 declared pairs", "exploratory, unadjusted")).all()
    assert rows["result"].tolist()[-1] == "p = 1: exploratory: no claim"
