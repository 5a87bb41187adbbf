"""A declared comparison that holds by construction (analysis.evidence.construction) says so: where one arm's
run-median engine/trainer mismatch KL is float rounding on every run (1e-14, as R3 measures under router noise
alone) and the other's is a real one (0.6), the answer's sentence says "which holds by construction" right
after the decided comparison with the reason under it, the numbers table's row gives the KLs, and the
verdict's line for the comparison says it; where both arms meet the mismatch, or neither does, no such words
appear anywhere. A leader named without a declared family (the comparison its claim rests on) reads alike.
Hand-made runs, no training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.data.load import unfinished
from analysis.evidence.construction import arm_run_kls, by_construction, float_rounding, mismatched
from analysis.evidence.gather import Evidence
from analysis.report.answer_differs import leader_items, leader_text
from analysis.report.answer_words import PlainAnswer
from analysis.report.sections import plain_answer
from analysis.report.verdict import answer
from tests.helpers.primary import GAIN, KINDS, evidence_of
from tests.helpers.results import make_run

ROUNDING, REAL = 1e-14, 0.6
KL = "mismatch/k3_kl"


def two_arms(root: Path, kls: dict[str, float], bonuses: dict[str, list[float]]) -> tuple[Evidence, PlainAnswer]:
    """grpo and grpo_r3 on 8 seeds with the given `mismatch/k3_kl` per step and reward bonus per seed,
    grpo_r3 against grpo declared; the evidence and the plain answer the report builds from them."""
    for label, per_seed in bonuses.items():
        for seed, bonus in enumerate(per_seed):
            make_run(root, label, seed, bonus=bonus, kind=KINDS[label], columns={KL: kls[label]})
    data = {"name": "synth", "objectives": [{"name": label} for label in bonuses],
            "analysis": {"primary": {"pairs": [["grpo_r3", "grpo"]]}}}
    (root / "synth" / "suite.yaml").write_text(yaml.safe_dump(data))
    evidence, results = evidence_of(root / "synth")
    return evidence, plain_answer(evidence, unfinished(results), None)


def every_text(evidence: Evidence, found: PlainAnswer) -> str:
    """The answer's sentences with their items, its numbers table, and the verdict's lines, as one text."""
    sentences = [t for s in found.sentences for t in (s.text, *(i.text for i in s.items))]
    verdict = [s.text for s in answer(evidence, unfinished(evidence.results), 0.0, False, set())]
    return "\n".join([*sentences, found.numbers.to_string(), *verdict])


# ------------------------------------------------------------------------------ the test on run-median KLs


def test_float_rounding_needs_every_run_at_the_floor():
    assert float_rounding([1e-14, 5e-14]) and not float_rounding([1e-14, 2e-8])
    assert not float_rounding([]) and not float_rounding([1e-14, np.nan])  # no run, or a run with no KL: unknown
    assert mismatched([0.6, 2e-8]) and not mismatched([0.6, 1e-14]) and not mismatched([])


def test_by_construction_names_the_arm_that_faces_none():
    kls = {"grpo": np.array([0.5, 0.6, 0.9]), "grpo_r3": np.array([4e-14, 6e-14, 5e-14])}
    found = by_construction(kls, "grpo", "grpo_r3")  # the order asked in does not matter
    assert found is not None and (found.free, found.other) == ("grpo_r3", "grpo")
    assert (found.free_kl, found.other_kl, found.runs) == (6e-14, 0.6, (3, 3))
    assert by_construction({**kls, "grpo_r3": np.array([0.4, 0.5, 0.6])}, "grpo_r3", "grpo") is None
    assert by_construction({**kls, "grpo": np.array([4e-14, 1e-13, 5e-14])}, "grpo_r3", "grpo") is None
    assert by_construction({"grpo": kls["grpo"]}, "grpo_r3", "grpo") is None  # one arm without a KL


def test_run_median_per_arm_from_the_runs(tmp_path):
    for seed in range(2):
        make_run(tmp_path, "grpo", seed, columns={KL: [0.1 * (seed + 1)] * 15 + [50.0] * 5})  # the median, not the mean
        make_run(tmp_path, "grpo_rr", seed, columns={KL: ROUNDING})
    evidence, _ = evidence_of(tmp_path / "synth")
    kls = arm_run_kls(evidence.results)
    np.testing.assert_allclose(kls["grpo"], [0.1, 0.2])
    np.testing.assert_allclose(kls["grpo_rr"], [ROUNDING, ROUNDING])


# ------------------------------------------------------------------------------ what the report says


def test_a_decided_comparison_that_holds_by_construction_says_so(tmp_path):
    evidence, found = two_arms(tmp_path, {"grpo": REAL, "grpo_r3": ROUNDING}, {"grpo": [0.0] * 8, "grpo_r3": GAIN})
    differs = found.sentences[2]
    assert "1 is decided (grpo_r3 ends above grpo, which holds by construction)" in differs.text, differs.text
    assert [item.text for item in differs.items] == [
        "grpo_r3 ends above grpo by construction: grpo_r3's measured engine/trainer mismatch is float rounding "
        "(at most 1e-08) where grpo's is 0.6 per token, so it faces none of the mismatch and is the noise-free "
        "control here, not a robust objective."]
    row = found.numbers[found.numbers["what"].str.startswith("grpo_r3 minus grpo")]["result"].item()
    assert row.endswith("; by construction: grpo_r3's run-median mismatch KL is float rounding (at most 1e-08, "
                        "largest 1e-14) on each of its 8 runs, grpo's 0.6 per token (median of its 8 runs)"), row
    verdict = [s.text for s in answer(evidence, unfinished(evidence.results), 0.0, False, set())]
    line = next(t for t in verdict if "(primary)" in t)
    assert line.startswith("**grpo_r3 ends above grpo** (primary), which holds by construction: grpo_r3's "
                           "measured engine/trainer mismatch is float rounding"), line
    assert "not a robust objective; grpo_r3 minus grpo +0.05" in line, line


def test_undecided_comparison_names_the_control_but_claims_nothing(tmp_path):
    evidence, found = two_arms(tmp_path, {"grpo": REAL, "grpo_r3": ROUNDING}, {"grpo": [0.0] * 8, "grpo_r3": [0.0] * 8})
    assert "by construction" not in found.sentences[2].text and not found.sentences[2].items
    row = found.numbers[found.numbers["what"].str.startswith("grpo_r3 minus grpo")]["result"].item()
    assert "; by construction: grpo_r3's run-median mismatch KL is float rounding" in row, row
    line = next(t for t in (s.text for s in answer(evidence, unfinished(evidence.results), 0.0, False, set()))
                if "(primary)" in t)
    assert "which holds" not in line and line.endswith(
        "By construction, grpo_r3's measured engine/trainer mismatch is float rounding (at most 1e-08) where grpo's "
        "is 0.6 per token, so it faces none of the mismatch and is the noise-free control here, not a robust objective."), line


def test_the_arm_with_the_mismatch_ending_above_holds_nothing_by_construction(tmp_path):
    evidence, found = two_arms(tmp_path, {"grpo": ROUNDING, "grpo_r3": REAL}, {"grpo": [0.0] * 8, "grpo_r3": GAIN})
    assert "grpo_r3 ends above grpo)" in found.sentences[2].text and not found.sentences[2].items
    assert "which holds by construction" not in every_text(evidence, found)
    assert "By construction, grpo's measured engine/trainer mismatch" in every_text(evidence, found)


def test_both_arms_meet_the_mismatch_no_such_words(tmp_path):
    evidence, found = two_arms(tmp_path, {"grpo": REAL, "grpo_r3": 0.5}, {"grpo": [0.0] * 8, "grpo_r3": GAIN})
    assert "grpo_r3 ends above grpo)" in found.sentences[2].text  # decided, as above
    assert "construction" not in every_text(evidence, found).lower()


def test_no_mismatch_in_the_suite_no_such_words(tmp_path):
    evidence, found = two_arms(tmp_path, {"grpo": ROUNDING, "grpo_r3": ROUNDING}, {"grpo": [0.0] * 8, "grpo_r3": GAIN})
    assert "grpo_r3 ends above grpo)" in found.sentences[2].text
    assert "construction" not in every_text(evidence, found).lower()


# ------------------------------------------------------------------------------ a leader, where no family is declared


def leader_answer(root: Path, kls: dict[str, float]) -> tuple[Evidence, PlainAnswer]:
    """grpo_r3 ends above grpo on every one of 8 seeds (+0.05), no family declared: grpo_r3 is the leader."""
    for label, per_seed in {"grpo": [0.0] * 8, "grpo_r3": GAIN}.items():
        for seed, bonus in enumerate(per_seed):
            make_run(root, label, seed, bonus=bonus, kind=KINDS[label], columns={KL: kls[label]})
    evidence, results = evidence_of(root / "synth")
    return evidence, plain_answer(evidence, unfinished(results), None)


def test_a_leader_that_holds_by_construction_says_so(tmp_path):
    evidence, found = leader_answer(tmp_path, {"grpo": REAL, "grpo_r3": ROUNDING})
    differs = found.sentences[2]
    assert differs.text.startswith("**grpo_r3 ends above every other objective**, which holds by construction, decided "
                                   "by the exact sign-flip test"), differs.text
    assert [item.text for item in differs.items] == [
        "grpo_r3 ends above grpo by construction: grpo_r3's measured engine/trainer mismatch is float rounding "
        "(at most 1e-08) where grpo's is 0.6 per token, so it faces none of the mismatch and is the noise-free "
        "control here, not a robust objective."]
    row = found.numbers[found.numbers["what"].str.startswith("grpo_r3 minus grpo")]["result"].item()
    assert "; by construction: grpo_r3's run-median mismatch KL is float rounding" in row, row
    line = next(t for t in (s.text for s in answer(evidence, unfinished(evidence.results), 0.0, False, set()))
                if " leads " in t)
    assert line.endswith(" The lead holds by construction: grpo_r3's measured engine/trainer mismatch is float "
                         "rounding (at most 1e-08) where grpo's is 0.6 per token, so it faces none of the mismatch "
                         "and is the noise-free control here, not a robust objective."), line


@pytest.mark.parametrize("grpo_kl", [REAL, ROUNDING])  # both meet a mismatch; the one below faces none
def test_a_leader_that_meets_the_mismatch_holds_nothing_by_construction(tmp_path, grpo_kl):
    evidence, found = leader_answer(tmp_path, {"grpo": grpo_kl, "grpo_r3": 0.5})
    assert found.sentences[2].text.startswith("**grpo_r3 ends above every other objective**, decided")
    assert "construction" not in every_text(evidence, found).lower()


def test_a_leader_per_sweep_point_says_where_it_holds_by_construction(tmp_path):
    """Two sweep points: at the one with router noise grpo_r3 faces none of it while grpo meets it; at the
    other neither meets any. The leader is named at both, by construction at the first only."""
    for noise, grpo_kl in ((3, REAL), (0, ROUNDING)):
        for label, per_seed in {"grpo": [0.0] * 8, "grpo_r3": GAIN}.items():
            for seed, bonus in enumerate(per_seed):
                make_run(tmp_path, label, seed, bonus=bonus, kind=KINDS[label], sweep={"noise": noise},
                         columns={KL: grpo_kl if label == "grpo" else ROUNDING})
    evidence, _ = evidence_of(tmp_path / "synth")
    text, _ = leader_text(evidence)
    assert "(grpo_r3 at noise=0; grpo_r3 at noise=3, which holds by construction)" in text, text
    assert [item.text.split(":")[0] for item in leader_items(evidence)] == ["At noise=3"]


# ------------------------------------------------------------------------------ two arms that are one objective

RECORDED = {"lr": 2e-4, "clip_low": 3e-4, "clip_high": 4e-4, "params": {}, "correction": None, "set": {}}
TWINS = {"grpo": ("grpo", False), "gspo": ("gspo", False), "gspo_token": ("gspo_token", False)}
ONE = "gspo and gspo_token are one objective by construction"


def gspo_twins(root: Path, token_run: dict | None = None, token_entry: dict | None = None, plugin: bool = False,
               declared: bool = False, seeds: int = 8) -> tuple[Evidence, PlainAnswer]:
    """grpo, gspo and gspo_token on `seeds` seeds, gspo and gspo_token alike reward for reward (+0.1 over grpo),
    each run's config.yaml recording RECORDED (gspo_token's updated by `token_run`) and the suite's `objectives:`
    entries (gspo_token's updated by `token_entry`; per-response credit written out for gspo only, as an older
    record of gspo_token's leaves it out); `plugin`: gspo_token's runs record a plugin that registered it;
    `declared`: gspo against gspo_token the suite's one declared comparison."""
    entries = [{"name": "grpo", "credit": "response"}, {"name": "gspo", "credit": "response"},
               {"name": "gspo_token", **(token_entry or {})}]
    for label, (objective, replay) in TWINS.items():
        for seed in range(seeds):
            run = make_run(root, label, seed, bonus=0.0 if label == "grpo" else 0.1, kind=(objective, replay))
            config = yaml.safe_load((run.path / "config.yaml").read_text())
            config["run"].update({**RECORDED, **(token_run or {} if label == "gspo_token" else {})})
            config["suite"]["objectives"] = entries
            (run.path / "config.yaml").write_text(yaml.safe_dump(config))
            if plugin and label == "gspo_token":
                prov = json.loads((run.path / "provenance.json").read_text())
                prov["plugins"] = [{"name": "mine", "path": "mine.py", "sha256": "0" * 64,
                                    "registered": ["objective:gspo_token"]}]
                (run.path / "provenance.json").write_text(json.dumps(prov))
    data = {"name": "synth", "objectives": entries,
            **({"analysis": {"primary": {"pairs": [["gspo", "gspo_token"]]}}} if declared else {})}
    (root / "synth" / "suite.yaml").write_text(yaml.safe_dump(data))
    evidence, results = evidence_of(root / "synth")
    return evidence, plain_answer(evidence, unfinished(results), None)


def test_gspo_and_gspo_token_at_the_same_settings_are_one_objective(tmp_path):
    """With per-response credit at the same settings the two are one gradient: the answer says so under its
    third sentence, with the recorded settings in the numbers table, and the verdict alike; the comparison
    stays in Holm's family (every pair is); and gspo leads, its twin not counted as an objective to beat."""
    evidence, found = gspo_twins(tmp_path)
    same = evidence.same_gradient(evidence.groups[0], "gspo_token", "gspo")
    assert same is not None and (same.gspo, same.token) == ("gspo", "gspo_token")
    differs = found.sentences[2]
    assert differs.text.startswith("**gspo ends above every other objective**, decided"), differs.text
    assert [item.text for item in differs.items] == [
        f"{ONE}: with per-response advantages and the same settings, GSPO-token's ratio `sg[s_i]·π/sg[π]` takes "
        "s_i's value and its gradient is GSPO's, so their comparison tests nothing (it stays counted in Holm's family)."]
    row = found.numbers[found.numbers["what"] == "gspo and gspo_token: one objective by construction"]
    assert row["value"].item() == ("built-in objectives, credit response, lr 0.0002, clip 0.0003 / 0.0004, no replay, "
                                   "no correction, params {}, set {}, on every run"), row["value"].item()
    assert row["result"].item().startswith("final difference +0 [+0, +0]"), row["result"].item()
    assert evidence.family.find(evidence.groups[0], "final reward", "gspo", "gspo_token") is not None  # still counted
    verdict = [s.text for s in answer(evidence, unfinished(evidence.results), 0.0, False, set())]
    assert any(t.startswith("**gspo leads at equal compute**") for t in verdict), verdict
    assert sum(t.startswith(ONE) and t.endswith("(it stays counted in Holm's family).") for t in verdict) == 1, verdict


def test_declared_gspo_against_gspo_token_stays_declared_and_says_it_tests_nothing(tmp_path):
    evidence, found = gspo_twins(tmp_path, declared=True)
    assert evidence.family.size == 1 and [(t.first, t.second) for t in evidence.primary] == [("gspo", "gspo_token")]
    line = next(s.text for s in answer(evidence, unfinished(evidence.results), 0.0, False, set()) if "(primary)" in s.text)
    assert line.endswith(" By construction, gspo and gspo_token are one objective: with per-response advantages and the "
                         "same settings, GSPO-token's ratio `sg[s_i]·π/sg[π]` takes s_i's value and its gradient is "
                         "GSPO's, so their comparison tests nothing."), line
    assert found.sentences[2].items[-1].text.startswith(ONE)


@pytest.mark.parametrize("change", [
    {"token_entry": {"credit": "step"}},  # per-token advantages: another gradient
    {"token_run": {"clip_high": 1e-3}},
    {"token_run": {"lr": 1e-4}},
    {"token_run": {"params": {"x": 1}}},
    {"token_run": {"set": {"train.kl_coef": 0.1}}},
    {"token_run": {"correction": {"kind": "tis", "params": {}}}},
    {"token_run": {"replay": True}},
    {"token_entry": {"name": "gspo_token", "label": "other"}},  # no entry names the arm: its credit is unknown
    {"plugin": True},  # a plugin registered gspo_token: not the built-in one
])
def test_gspo_and_gspo_token_that_may_differ_are_compared_as_two(tmp_path, change):
    evidence, found = gspo_twins(tmp_path, **change)
    assert evidence.same_gradient(evidence.groups[0], "gspo", "gspo_token") is None
    assert "one objective" not in every_text(evidence, found)
    assert found.sentences[2].text.startswith("**No objective is ahead of every other**") or \
        found.sentences[2].text.startswith("No objective is ahead of every other"), found.sentences[2].text


def test_runs_of_one_arm_that_recorded_different_settings_are_not_one_objective(tmp_path):
    evidence, _ = gspo_twins(tmp_path)
    run = tmp_path / "synth" / "gspo_token-s3" / "config.yaml"
    config = yaml.safe_load(run.read_text())
    config["run"]["clip_high"] = 1e-3
    run.write_text(yaml.safe_dump(config))
    evidence, _ = evidence_of(tmp_path / "synth")
    assert evidence.same_gradient(evidence.groups[0], "gspo", "gspo_token") is None


def test_the_leader_rule_is_decided_in_the_evidence_as_plain_data(tmp_path):
    """analysis.evidence.leader.lead, which the verdict and the answer only word: grpo_r3 +0.05 on 8 seeds
    leads, by construction where it faces no mismatch and grpo meets one; on 3 seeds no leader (too few
    seeds); 1e-9 above on 8 seeds no leader (rounding); grpo_r3 flat 0.25 above, no leader (its start)."""
    from analysis.evidence.leader import FEW_SEEDS, ITS_START, LEADS, lead
    from analysis.evidence.leader import ROUNDING as BY_ROUNDING

    def first_lead(root: Path, bonus: list[float], slope: float = 0.01):
        for seed, b in enumerate(bonus):
            make_run(root, "grpo", seed, bonus=0.0, kind=KINDS["grpo"], columns={KL: REAL})
            make_run(root, "grpo_r3", seed, bonus=b, kind=KINDS["grpo_r3"], columns={KL: ROUNDING}, slope=slope)
        evidence, _ = evidence_of(root / "synth")
        return lead(next(iter(evidence.learnings.values())), evidence)

    found = first_lead(tmp_path / "leads", GAIN)
    assert (found.why, found.best, found.second, found.leader) == (LEADS, "grpo_r3", "grpo", "grpo_r3")
    assert found.held is not None and (found.held.free, found.held.other) == ("grpo_r3", "grpo")
    assert [first_lead(tmp_path / name, bonus, slope).why for name, bonus, slope in (
        ("few", GAIN[:3], 0.01), ("rounding", [1e-9] * 8, 0.01), ("start", [0.25 + g for g in GAIN], 0.0))] == [
        FEW_SEEDS, BY_ROUNDING, ITS_START]
