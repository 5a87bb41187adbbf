"""The plain answer (analysis.report.plain_answer) where suites meet: runs whose budgets differ in kind
(an imported suite beside this harness's, allowed by flag), and arms that finished on different seeds.
Each sentence must be true of the runs it speaks of."""

from __future__ import annotations

from analysis.data.load import finished, load_results, unfinished
from analysis.evidence.gather import gather
from analysis.evidence.stability import stability_map
from analysis.report.plain_answer import plain_answer, plain_text
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
