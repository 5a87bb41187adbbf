"""The primary and exploratory tables (analysis.tables): a Monte Carlo sign-flip p is marked as such in
every table (the comparisons table and the answer marked it; these two did not), and the primary
table's "Holm p" is the family-adjusted p, not the unadjusted one."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_report_primary import SIX_ARMS, evidence_of, suite_folder  # noqa: E402

from analysis.report.tables import exploratory_table, primary_table  # noqa: E402
from analysis.stats.library import EXACT_PAIRS  # noqa: E402


def test_a_monte_carlo_p_is_marked_in_the_primary_and_exploratory_tables(tmp_path):
    """17 paired seeds (past EXACT_PAIRS = 16): the sign-flip p is a Monte Carlo estimate."""
    seeds = EXACT_PAIRS + 1
    folder = suite_folder(tmp_path, {"grpo": [0.0] * seeds, "gspo": [0.05 + 0.001 * (s % 3) for s in range(seeds)],
                                     "grpo_rr": [0.0] * seeds}, {"primary": {"pairs": [["gspo", "grpo"]]}})
    evidence, _ = evidence_of(folder)
    primary, exploratory = primary_table(evidence), exploratory_table(evidence)
    assert primary["p (sign-flip)"].tolist() and all(p.endswith(" (Monte Carlo)") for p in primary["p (sign-flip)"])
    assert all(p.endswith(" (Monte Carlo)") for p in exploratory["p (sign-flip, unadjusted)"] if p != "-")
    assert any(p != "-" for p in exploratory["p (sign-flip, unadjusted)"])


def test_an_exact_p_is_not_marked_and_the_holm_column_is_adjusted(tmp_path):
    """8 seeds, GRPO + R3 +0.05 on each, each_vs grpo: exact p 2/256 = 0.0078, Holm x5 = 0.039."""
    evidence, _ = evidence_of(suite_folder(tmp_path, SIX_ARMS, {"primary": {"each_vs": "grpo"}}))
    row = primary_table(evidence).set_index("first").loc["grpo_r3"]
    assert (row["p (sign-flip)"], row["Holm p"]) == ("0.0078", "0.039")


def test_the_primary_sentence_names_the_arm_that_ends_above_when_it_learned(tmp_path):
    """Declared [grpo, gspo]; GSPO ends 0.1 above on 8 of 8 seeds and learned, GRPO's reward is flat (it
    did not learn): the arm above is GSPO, which learned, so it is named (a review's break checked the
    first arm, GRPO, instead, and the sentence said "not named")."""
    import yaml
    from test_analysis import make_run

    from analysis.data.load import unfinished
    from analysis.report.verdict import answer

    for seed in range(8):
        make_run(tmp_path, "grpo", seed, slope=0.0, bonus=0.0)
        make_run(tmp_path, "gspo", seed, bonus=0.1)
    suite = {"name": "synth", "objectives": [{"name": "grpo"}, {"name": "gspo"}],
             "analysis": {"primary": {"pairs": [["grpo", "gspo"]]}}}
    (tmp_path / "synth" / "suite.yaml").write_text(yaml.safe_dump(suite))
    evidence, results = evidence_of(tmp_path / "synth")
    texts = [s.text for s in answer(evidence, unfinished(results), 0.0, False, set())]
    assert any(t.startswith("**gspo ends above grpo** (primary)") for t in texts), texts
