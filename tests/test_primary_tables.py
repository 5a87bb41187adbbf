"""The primary and exploratory tables (analysis.tables): a Monte Carlo sign-flip p is marked as such in
every table (the comparisons table and the answer marked it; these two did not), and the primary
table's "Holm p" is the family-adjusted p, not the unadjusted one."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

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


def test_a_withheld_primary_test_counts_at_p_one_in_the_other_tests_holm(tmp_path):
    """each_vs grpo over a sweep of two points: at k=1 R3 ends above GRPO on 7 of 8 seeds (exact p 4/256 =
    0.016); at k=2 no objective learned, though R3 ends above on all 8 (its p would be 2/256). The k=2 test
    is withheld and counts at p = 1, so k=1's Holm p is 2 x 0.016 = 0.031; a withheld test given its real
    p ranks first and halves it (0.016)."""
    from test_report_primary import GAIN

    suite_folder(tmp_path, {"grpo": [0.0] * 8, "grpo_r3": [-0.01, *GAIN[1:]]}, {"primary": {"each_vs": "grpo"}},
                 suite="alpha", sweep={"k": 1})
    suite_folder(tmp_path, {"grpo": [0.0] * 8, "grpo_r3": GAIN}, {"primary": {"each_vs": "grpo"}},
                 suite="alpha", sweep={"k": 2}, slope=0.0)
    evidence, _ = evidence_of(tmp_path / "alpha")
    table = primary_table(evidence).set_index("group")
    assert (table.loc["k=1", "p (sign-flip)"], table.loc["k=1", "Holm p"]) == ("0.016", "0.031")
    assert (table.loc["k=2", "p (sign-flip)"], table.loc["k=2", "Holm p"]) == ("-", "1")
    assert table.loc["k=2", "outcome"] == "withheld: no objective learned"


def test_a_folders_declared_family_is_checked_against_its_own_runs_only(tmp_path):
    """Two results folders of one suite, both suite files declaring each_vs grpo; the runs of the second
    recorded another family (pairs) when they started. The refusal names the second folder's suite file,
    whose runs they are: the first folder's file is checked against its own runs only."""
    import yaml

    from analysis.data.load import load_results
    from analysis.evidence.primary import DeclarationError, declarations

    declared = {"primary": {"each_vs": "grpo"}}
    first = suite_folder(tmp_path / "a", {"grpo": [0.0] * 2, "grpo_r3": [0.05] * 2}, declared)
    second = suite_folder(tmp_path / "b", {"grpo": [0.0] * 4, "grpo_r3": [0.05] * 4}, declared)
    for run in [*second.glob("*-s0"), *second.glob("*-s1")]:  # seeds 2-3 here, 0-1 in the first folder
        shutil.rmtree(run)
    other = {"primary": {"each_vs": None, "pairs": [["grpo_r3", "grpo"]], "paper_checks": False}}
    for run in second.glob("*-s*"):
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["suite"]["analysis"] = other
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(DeclarationError) as refused:
        declarations(load_results(first, second))
    assert str(refused.value).startswith(f"{second / 'suite.yaml'}: analysis: the suite file declares")
