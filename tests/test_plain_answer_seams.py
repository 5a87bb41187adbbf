"""The plain answer (analysis.report.sections.plain_answer) where suites meet: runs whose budgets differ in kind
(an imported suite beside this harness's, allowed by flag), and arms that finished on different seeds.
Each sentence must be true of the runs it speaks of."""

from __future__ import annotations

from analysis.data.load import finished, load_results, unfinished
from analysis.evidence.gather import gather
from analysis.evidence.stability import stability_map
from analysis.report.answer_words import MAX_WORDS, plain_text, words
from analysis.report.sections import plain_answer
from analysis.report.tables import suite_summary
from tests.helpers.results import make_run


def test_budgets_of_different_kinds_are_not_called_equal_compute(tmp_path):
    """check_matched gives NaN where budgets differ in kind (steps against FLOPs: an imported suite beside
    this harness's) and --allow-unmatched lets the report go on: neither the answer nor the summary may then
    say the compute was equal."""
    for seed in range(2):
        make_run(tmp_path, "grpo", seed)
        make_run(tmp_path, "gspo", seed)
    results = load_results(tmp_path / "synth")
    evidence = gather(finished(results))
    found = plain_answer(evidence, unfinished(results), stability_map(results), float("nan"), allow_unmatched=True)
    first = plain_text(found.sentences[0].text)
    assert "at unmatched compute (allowed by flag)" in first and "equal compute" not in first, first
    assert "unmatched, allowed by flag" in suite_summary(results, float("nan"), True, evidence)
    matched = plain_answer(evidence, unfinished(results), stability_map(results), 0.0, allow_unmatched=True)
    assert "at equal compute" in plain_text(matched.sentences[0].text)


def test_an_arm_that_finished_on_fewer_seeds_is_not_said_to_run_on_all(tmp_path):
    """grpo finished on seeds 0-2, gspo on seed 0 only (its other two failed): "grpo and gspo on 3 seeds" would
    be false of gspo. The sentence gives the range, the table names the arm short of the most, and one
    unfinished run "is" left out."""
    for seed in range(3):
        make_run(tmp_path, "grpo", seed)
        make_run(tmp_path, "gspo", seed, status="done" if seed == 0 else "failed", message="stopped" if seed else "")
    results = load_results(tmp_path / "synth")
    found = plain_answer(gather(finished(results)), unfinished(results), stability_map(results))
    first = plain_text(found.sentences[0].text)
    assert first.startswith("4 runs finished: grpo and gspo on 1 to 3 seeds, at equal compute"), first
    assert first.endswith("2 more runs did not finish and are left out."), first
    rows = found.numbers[found.numbers["sentence"] == 1].set_index("what")["value"]
    assert rows["arms finished on fewer than 3 seeds"] == "gspo: 1"
    make_run(tmp_path, "gspo", 1)  # now gspo finished on 2 of grpo's 3 seeds and one run is left out
    results = load_results(tmp_path / "synth")
    first = plain_text(plain_answer(gather(finished(results)), unfinished(results), None).sentences[0].text)
    assert "grpo and gspo on 2 to 3 seeds" in first and first.endswith("1 more run did not finish and is left out."), first


def test_a_swept_answer_stays_under_40_words_with_one_item_per_arm(tmp_path):
    """Three arms at two sweep points, none failing and each learning at both (results/regime/discriminate's
    shape, whose sentences ran to 46 and 49 words, one clause per arm): arms alike share a clause of the
    learnability sentence, the stability answer lists one item per arm under a short sentence, and every
    sentence keeps the 40-word limit."""
    from tests.helpers.stability import swept_run

    for noise, kl in ((0.0, 0.002), (1.0, 0.2)):
        for seed in range(2):
            for label in ("grpo", "grpo_rr", "gspo"):
                swept_run(tmp_path, label, seed, {"router_noise": noise}, {"mismatch/k3_kl": kl * (1 + 0.2 * seed)})
    results = load_results(tmp_path / "synth")
    found = plain_answer(gather(finished(results)), unfinished(results), stability_map(results))
    texts = [plain_text(s.text) for s in found.sentences]
    assert all(words(s.text) <= MAX_WORDS for s in found.sentences), [(words(t), t) for t in texts]
    assert texts[1].endswith("grpo, grpo_rr and gspo learned on every seed at 2 of 2 sweep points."), texts[1]
    items = [plain_text(i.text) for i in found.sentences[2].items]
    assert [i.split(":")[0] for i in items[:3]] == [f"{arm} (0 of 4 runs failed)" for arm in ("grpo", "grpo_rr", "gspo")]
    assert all(": never failed; held up to dose 0.22 per token" in i for i in items[:3]), items
    assert items[3].startswith("Paired by cell (the same level and seed), McNemar's exact test of failure stratified "
                               "by level tells no two of these 3 arms apart"), items
