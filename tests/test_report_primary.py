"""A primary family declared in the suite file (`analysis: {primary: ...}`, analysis.primary): Holm runs
over the declared comparisons only, the rest is exploratory and claims nothing, the answer says where the
family came from, and its first figure is a forest plot of the declared comparisons. Synthetic results
with hand-computed answers; without the key the report is the one of test_report_html."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.data.load import finished, load_results, unfinished
from analysis.evidence.gather import gather
from analysis.evidence.primary import DeclarationError, declarations
from analysis.figures import curves_interactive as plotly_figures
from analysis.figures.curves import forest
from analysis.report.figure_table import forest_rows
from analysis.report.sections import Context, build_sections
from analysis.report.verdict import answer
from analysis.report.writer import write_report
from tests.helpers.primary import GAIN, KINDS, SIX_ARMS, evidence_of, suite_folder
from tests.helpers.results import make_run


def sentences(folder: Path) -> list[str]:
    evidence, results = evidence_of(folder)
    return [s.text for s in answer(evidence, unfinished(results), 0.0, False, set())]


def test_eight_seeds_that_favour_one_arm_name_it_in_a_family_of_five_and_not_among_all_pairs(tmp_path):
    """Six arms, 8 seeds, GRPO + R3 gains 0.05 +- 0.01 on every seed, the others tie with GRPO exactly.
    Declared `each_vs: grpo`: 5 tests, R3's exact sign-flip p 2/256 = 0.0078, Holm x5 = 0.039 < 0.05:
    named. Differences 0.05 + (0, -0.01, 0.01, 0, -0.01, 0.01, -0.01, 0.01): sd 0.009258, t(0.975, 7) =
    2.364624 -> 0.05 -+ 0.00774. The same runs without the key: all 15 pairs plus 2 paper checks (clip,
    depth), 7 of them at p 2/256: Holm x17 = 0.13, no leader, 10 seeds needed."""
    declared = suite_folder(tmp_path / "a", SIX_ARMS, {"primary": {"each_vs": "grpo"}})
    found = sentences(declared)
    assert ("**grpo_r3 ends above grpo** (primary): grpo_r3 minus grpo +0.05 [+0.0423, +0.0577] (s0 +0.05, s1 +0.04, "
            "s2 +0.06, s3 +0.05, s4 +0.04, s5 +0.06, s6 +0.04, s7 +0.06) over 8 paired seeds, p = 0.0078, "
            "Holm-adjusted 0.039 over the primary family's 5 tests.") in found
    evidence, _ = evidence_of(declared)
    assert [(t.first, t.second) for t in evidence.primary] == [(a, "grpo") for a in KINDS if a != "grpo"]
    assert evidence.family.size == 5 and len(evidence.family.exploratory) == 10 + 2  # the other pairs, clip, depth
    assert evidence.family.adjusted == pytest.approx([1.0, 5 * 2 / 256, 1.0, 1.0, 1.0])
    ties = [s for s in found if "(primary): **not distinguishable**" in s]
    assert len(ties) == 4 and all("(8 paired seeds are enough for a claim in this family)" in s for s in ties)
    assert not any(" leads " in s for s in found)

    default = sentences(suite_folder(tmp_path / "b", SIX_ARMS, None))
    assert not any("**grpo_r3" in s or "(primary)" in s or " leads " in s for s in default)
    (leader,) = [s for s in default if s.startswith("**No leader named at equal compute**")]
    assert "p = 0.0078 (Holm-adjusted over the report's 17 comparisons: 0.13)" in leader
    assert leader.endswith("with 17 comparisons a leader needs at least 10 paired seeds.")


def test_the_exploratory_comparisons_name_no_leader_and_claim_nothing(tmp_path):
    """Declared: GRPO + RR against GRPO only (a tie: p = 1). GSPO is 0.1 above both on all 8 seeds, with an
    unadjusted p of 2/256, and clips more on every seed: all exploratory. No sentence names GSPO or
    claims the paper's phenomena; the exploratory table has no Holm p and no outcome."""
    folder = suite_folder(tmp_path, {"grpo": [0.0] * 8, "grpo_rr": [0.01, -0.01] * 4, "gspo": [0.1] * 8},
                          {"primary": {"pairs": [["grpo_rr", "grpo"]]}})
    found = sentences(folder)
    assert not any("gspo" in s.split("(")[0] or " leads " in s or "**shown**" in s for s in found), found
    assert found[-1] == ("The paper's checks are exploratory here (the suite file's primary family leaves them out): "
                         "their table gives unadjusted p-values, and no claim is made from them.")
    assert found[-2].startswith("grpo_rr against grpo (primary): **not distinguishable**")
    evidence, results = evidence_of(folder)
    assert evidence.family.size == 1
    built = {s.anchor: s.body for s in build_sections(Context(results, 0.0, False, frozenset()))}
    table = built["exploratory-comparisons"]
    assert list(table.columns) == ["quantity", "first", "second", "seeds", "first minus second (per seed)",
                                   "p (sign-flip, unadjusted)", "P(first > second)", "status"]
    assert set(table["status"]) == {"exploratory: no claim"}
    gspo = table[(table["first"] == "grpo_rr") & (table["second"] == "gspo")]
    assert gspo["p (sign-flip, unadjusted)"].tolist() == ["0.0078"]  # below 5%, and still no claim
    paper = built["paper-vs-run"].set_index("quantity")
    assert paper.loc["clipped-token fraction, GRPO (Figure 2)", "agrees"] == (
        "exploratory (outside the primary family: unadjusted p, no claim)")
    assert paper.loc["clipped-token fraction, GRPO (Figure 2)", "Holm p"] == "-"
    against = built["paired-vs-grpo"].set_index("objective")
    assert against.loc["gspo", "Holm p"] == "exploratory" and against.loc["grpo_rr", "Holm p"] == "1"


def test_paper_checks_true_puts_the_paper_checks_in_the_family(tmp_path):
    """Declared: GRPO + RR against GRPO (a tie, p = 1) with paper_checks; GSPO +0.1 on 8 seeds. The family:
    the declared pair (also the Figure 3 check: one test), clip, depth and GSPO against GRPO (the Figure 1
    check): 4 tests, three at p 2/256: Holm 4 x 2/256 = 0.031. Only GRPO + RR against GSPO is exploratory."""
    folder = suite_folder(tmp_path, {"grpo": [0.0] * 8, "grpo_rr": [0.01, -0.01] * 4, "gspo": [0.1] * 8},
                          {"primary": {"pairs": [["grpo_rr", "grpo"]], "paper_checks": True}})
    evidence, _ = evidence_of(folder)
    assert [(t.quantity, t.first, t.second) for t in evidence.family.tests] == [
        ("final reward", "grpo_rr", "grpo"), ("clipped-token fraction", "gspo", "grpo"),
        ("drift, last MoE layer minus the first", "grpo", "0"), ("final reward", "grpo", "gspo")]
    assert [(t.first, t.second) for t in evidence.family.exploratory] == [("grpo_rr", "gspo")]
    found = sentences(folder)
    for claim in ("GSPO clips more tokens than GRPO (Figure 2): **shown**",
                  "GSPO ends above GRPO at equal compute (Figure 1): **shown**"):
        assert any(s.startswith(claim) and s.endswith("p = 0.0078, Holm-adjusted 0.031).") for s in found), claim
    assert any(s.startswith("Routing Replay raises GRPO's final reward (Figure 3): **not shown**: no difference")
               for s in found)


def test_a_decided_comparison_names_the_arm_that_ends_above_whichever_comes_first(tmp_path):
    """pairs: [[grpo, grpo_r3]]: GRPO minus R3 is -0.05 +- 0.01 on 8 seeds; one test: Holm p = 2/256."""
    folder = suite_folder(tmp_path, {"grpo": [0.0] * 8, "grpo_r3": GAIN}, {"primary": {"pairs": [["grpo", "grpo_r3"]]}})
    assert ("**grpo_r3 ends above grpo** (primary): grpo minus grpo_r3 -0.05 [-0.0577, -0.0423] (s0 -0.05, s1 -0.04, "
            "s2 -0.06, s3 -0.05, s4 -0.04, s5 -0.06, s6 -0.04, s7 -0.06) over 8 paired seeds, p = 0.0078, Holm-adjusted "
            "0.0078 over the primary family's 1 test.") in sentences(folder)


def test_a_primary_comparison_names_no_arm_that_did_not_learn_or_leads_by_rounding(tmp_path):
    """The leader sentence's rules hold for a declared pair too. R3 flat (slope 0: no rise, did not
    learn) but 0.2 + 0.05 +- 0.01 above GRPO's start on every seed: p = 2/256, and still not named. R3
    1e-9 above GRPO on every seed (p = 2/256 again): below RESOLUTION, no difference."""
    declared = {"primary": {"pairs": [["grpo_r3", "grpo"]]}}
    flat = suite_folder(tmp_path / "flat", {"grpo": [0.0] * 8, "grpo_r3": GAIN}, declared)
    for seed, bonus in enumerate(GAIN):
        make_run(tmp_path / "flat", "grpo_r3", seed, bonus=0.2 + bonus, kind=KINDS["grpo_r3"], slope=0.0)
    (sentence,) = [s for s in sentences(flat) if "(primary)" in s]
    assert sentence.startswith("grpo_r3 against grpo (primary): **not named**: grpo_r3 did not learn on every seed")
    assert "p = 0.0078" in sentence
    rounding = sentences(suite_folder(tmp_path / "rounding", {"grpo": [0.0] * 8, "grpo_r3": [1e-9] * 8}, declared))
    (sentence,) = [s for s in rounding if "(primary)" in s]
    assert sentence.startswith("grpo_r3 against grpo (primary): **no difference**: the two differ by less than 1e-06")


def test_a_declared_comparison_that_cannot_be_made_still_counts_at_p_one(tmp_path):
    """pairs: R3 against GRPO and TIS against GRPO, but no TIS run finished: 2 tests, R3's 2/256 times 2
    = 0.016; where no objective learned (flat rewards) both are withheld and nothing is named."""
    folder = suite_folder(tmp_path / "a", {"grpo": [0.0] * 8, "grpo_r3": GAIN},
                          {"primary": {"pairs": [["grpo_r3", "grpo"], ["grpo_tis", "grpo"]]}},
                          arms=["grpo", "grpo_r3", "grpo_tis"])
    found = sentences(folder)
    assert any(s.startswith("**grpo_r3 ends above grpo** (primary)") and "Holm-adjusted 0.016 over the primary "
               "family's 2 tests." in s for s in found)
    assert ("grpo_tis against grpo (primary): **not tested**: no finished runs of grpo_tis (counted in Holm's family "
            "at p = 1).") in found
    flat = suite_folder(tmp_path / "b", {"grpo": [0.0] * 8, "grpo_r3": GAIN},
                        {"primary": {"pairs": [["grpo_r3", "grpo"]]}}, slope=0.0)
    assert ("grpo_r3 against grpo (primary): **withheld**: no objective learned (counted in Holm's family at p = 1)."
            in sentences(flat))


def test_each_declared_verdict_is_decided_in_the_evidence_as_plain_data(tmp_path):
    """analysis.evidence.declared.judge: the states the verdict's words read, each from its own runs: R3
    ends above (decided; R3 first or second alike), R3 flat but above (not named), 1e-9 above (rounding), no
    TIS run (not tested), nothing learned (withheld), 3 seeds (too few for a claim)."""
    from analysis.evidence import declared as J
    from analysis.evidence.family import FEW

    def verdicts(folder: Path) -> list[tuple]:
        evidence, _ = evidence_of(folder)
        return [(j.state, j.above, j.below, j.held) for j in J.judged(evidence)]

    pairs = {"primary": {"pairs": [["grpo", "grpo_r3"], ["grpo_tis", "grpo"]]}}
    decided = suite_folder(tmp_path / "a", {"grpo": [0.0] * 8, "grpo_r3": GAIN}, pairs, arms=["grpo", "grpo_r3", "grpo_tis"])
    assert verdicts(decided) == [(J.DECIDED, "grpo_r3", "grpo", False), (J.UNTESTED, "", "", False)]
    declared = {"primary": {"pairs": [["grpo_r3", "grpo"]]}}
    flat = suite_folder(tmp_path / "flat", {"grpo": [0.0] * 8, "grpo_r3": GAIN}, declared)
    for seed, bonus in enumerate(GAIN):
        make_run(tmp_path / "flat", "grpo_r3", seed, bonus=0.2 + bonus, kind=KINDS["grpo_r3"], slope=0.0)
    assert verdicts(flat) == [(J.NOT_NAMED, "grpo_r3", "grpo", False)]
    rounding = suite_folder(tmp_path / "rounding", {"grpo": [0.0] * 8, "grpo_r3": [1e-9] * 8}, declared)
    assert verdicts(rounding) == [(J.ROUNDING, "grpo_r3", "grpo", False)]
    nothing = suite_folder(tmp_path / "nothing", {"grpo": [0.0] * 8, "grpo_r3": GAIN}, declared, slope=0.0)
    assert verdicts(nothing) == [(J.WITHHELD, "", "", False)]
    few = suite_folder(tmp_path / "few", {"grpo": [0.0] * 3, "grpo_r3": GAIN[:3]}, declared)
    assert verdicts(few) == [(FEW, "", "", False)]
    one = suite_folder(tmp_path / "one", {"grpo": [0.0] * 8, "grpo_r3": GAIN}, declared)
    assert [J.undecided(evidence_of(folder)[0]) for folder in (one, decided, few)] == [False, True, True]


def test_each_group_of_a_sweep_and_of_several_suites_gets_the_declared_comparisons(tmp_path):
    """each_vs: grpo, 2 arms, a sweep of 2 points: 2 tests; with a second suite loaded beside it (labels
    `alpha/...`), that suite declares nothing: its comparison is exploratory."""
    for k in (1, 2):
        suite_folder(tmp_path, {"grpo": [0.0] * 3, "grpo_r3": GAIN[:3]}, {"primary": {"each_vs": "grpo"}},
                     suite="alpha", sweep={"k": k})
    evidence, _ = evidence_of(tmp_path / "alpha")
    assert [(t.group, t.first) for t in evidence.primary] == [(("alpha", "k=1"), "grpo_r3"), (("alpha", "k=2"), "grpo_r3")]
    suite_folder(tmp_path, {"grpo": [0.0] * 3, "grpo_r3": GAIN[:3]}, None, suite="beta")
    results = load_results(tmp_path / "alpha", tmp_path / "beta")
    evidence = gather(finished(results), declarations(results))
    assert [(t.group, t.first, t.second) for t in evidence.primary] == [
        (("alpha", "k=1"), "alpha/grpo_r3", "alpha/grpo"), (("alpha", "k=2"), "alpha/grpo_r3", "alpha/grpo")]
    assert [t.group for t in evidence.family.exploratory] == [("beta", "")]
    found = [s.text for s in answer(evidence, unfinished(results), 0.0, False, set())]
    assert "At suite beta: The suite file declares no primary comparison here: this group's comparisons are " \
           "exploratory (unadjusted p, no claim)." in found


def record(folder: Path, sha: str | None = None, analysis: dict | None = None) -> None:
    """Write into every run of `folder` what `run` records: the suite file's sha256 in provenance.json and
    the suite's `analysis:` in config.yaml (as resolved: every field)."""
    for run in folder.glob("*-s*"):
        prov = json.loads((run / "provenance.json").read_text())
        (run / "provenance.json").write_text(json.dumps({**prov, "suite_sha256": sha}))
        if analysis is not None:
            config = yaml.safe_load((run / "config.yaml").read_text())
            config["suite"]["analysis"] = analysis
            (run / "config.yaml").write_text(yaml.safe_dump(config))


RESOLVED = {"primary": {"each_vs": "grpo", "pairs": None, "paper_checks": False}}


def test_the_answer_states_the_family_its_suite_file_and_the_hash_the_runs_recorded(tmp_path):
    folder = suite_folder(tmp_path, {"grpo": [0.0] * 3, "grpo_r3": GAIN[:3]}, {"primary": {"each_vs": "grpo"}})
    sha = hashlib.sha256((folder / "suite.yaml").read_bytes()).hexdigest()
    family = "synth/suite.yaml (sha256 {}): every other arm against grpo, in each group. Holm's adjustment runs " \
             "over these tests only; the report's 0 other comparisons are exploratory"
    assert sentences(folder)[0].startswith("**Primary family of 1 test, declared in the suite file** " + family.format(
        f"{sha}; no run recorded a suite hash in its provenance (written before runs kept one)"))
    record(folder, sha, RESOLVED)
    assert family.format(f"{sha}, as every run recorded it in its provenance at its start") in sentences(folder)[0]
    record(folder, "0" * 64, RESOLVED)
    assert (f"{sha}; 0 of 6 runs recorded it in their provenance at their start, **6 started with another suite "
            f"file** (sha256 {'0' * 64}): it was rewritten since, with the same `analysis:`") in sentences(folder)[0]


def test_a_family_chosen_after_the_runs_or_naming_no_arm_is_refused(tmp_path, cli):
    folder = suite_folder(tmp_path, {"grpo": [0.0] * 3, "grpo_r3": GAIN[:3]}, {"primary": {"each_vs": "grpo"}})
    record(folder, None, {"primary": {"each_vs": "grpo_r3", "pairs": None, "paper_checks": False}})
    with pytest.raises(DeclarationError, match=r"suite.yaml: analysis: the suite file declares analysis.primary.each_vs="
                       r"grpo, .* but run .*grpo-s0 started with analysis.primary.each_vs=grpo_r3"):
        declarations(load_results(folder))
    record(folder, None, RESOLVED)
    (folder / "suite.yaml").write_text(yaml.safe_dump({"name": "synth", "objectives": [{"name": "grpo"}]}))
    with pytest.raises(DeclarationError, match=r"the suite file declares no primary family, but run .*grpo-s0 started "
                       r"with analysis.primary.each_vs=grpo"):
        declarations(load_results(folder))
    (folder / "suite.yaml").unlink()
    with pytest.raises(DeclarationError, match=r"grpo-s0: the run declares a primary family \(config.yaml "
                       r"suite.analysis\) but its results folder has no suite.yaml to read it from"):
        declarations(load_results(folder))
    record(folder, None, {"primary": {"each_vs": "gspo", "pairs": None, "paper_checks": False}})
    (folder / "suite.yaml").write_text(yaml.safe_dump({"name": "synth", "objectives": [{"name": "grpo"}, {
        "name": "grpo_r3"}], "analysis": {"primary": {"each_vs": "gspo"}}}))
    result = cli("report", folder, "--out", tmp_path / "r")
    assert result.exit_code == 2 and "suite.yaml: analysis.primary.each_vs: 'gspo' not an arm of this suite" in result.output


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("primary")
    bonuses = {"grpo": [0.0] * 8, "grpo_r3": GAIN, "gspo": [0.0] * 8}
    out = {}
    for name, analysis in (("declared", {"primary": {"each_vs": "grpo"}}), ("default", None)):
        folder = suite_folder(root / name, bonuses, analysis)
        out[name] = write_report(load_results(folder), root / name / "report")["md"].parent
    return out


def test_the_forest_plot_is_the_answers_first_figure_with_a_declared_family_only(reports):
    md, html = (reports["declared"] / "report.md").read_text(), (reports["declared"] / "report.html").read_text()
    figures = md.split("## Figures")[1]
    assert figures.index("### Primary comparisons") < figures.index("### Figure 1")
    assert (reports["declared"] / "figures" / "forest_primary.png").is_file()
    assert (reports["declared"] / "figures" / "forest_primary.pdf").is_file()
    assert html.index('id="plot-forest_primary-0"') < html.index('id="plot-fig1_reward_vs_compute-0"')
    answer_md = md.split("## Every claim, with its numbers")[1].split("<a id=")[0]
    assert "[figure](#figure-forest_primary)" in answer_md and '<a id="figure-forest_primary"></a>' in md
    assert "[primary comparisons](#primary-comparisons)" in answer_md and '<a id="primary-comparisons"></a>' in md
    plain_md = md.split("## The answer\n")[1].split("<a id=")[0]  # the plain answer links the forest plot too
    assert "[figure](#figure-forest_primary)" in plain_md and "[table](#primary-comparisons)" in plain_md
    default = (reports["default"] / "report.md").read_text()
    assert "forest" not in default and default.split("## Figures")[1].lstrip().startswith(
        '<a id="figure-fig1_reward_vs_compute"></a>')


def test_the_forest_plot_draws_each_declared_comparison_its_seeds_and_holm_p(tmp_path):
    """R3 and GSPO against GRPO over 8 seeds: 2 rows; R3's differences 0.05 +- 0.01 (Holm 2 x 2/256 =
    0.016, interval 0.05 -+ 0.00774), GSPO's all 0 (p = 1)."""
    folder = suite_folder(tmp_path, {"grpo": [0.0] * 8, "grpo_r3": GAIN, "gspo": [0.0] * 8},
                          {"primary": {"each_vs": "grpo"}})
    results = load_results(folder)
    context = Context(results, 0.0, False)
    assert [figure.name for figure in context.figures_shown][:2] == ["forest_primary", "fig1_reward_vs_compute"]
    rows = forest_rows(context.evidence)
    assert rows["comparison"].tolist() == ["grpo_r3 - grpo", "gspo - grpo"] and rows["holm"].tolist() == ["0.016", "1"]
    r3 = rows.iloc[0]
    assert r3["seeds"] == tuple(range(8)) and r3["differences"] == pytest.approx(GAIN)
    assert (r3["mean"], r3["low"], r3["high"]) == pytest.approx((0.05, 0.05 - 0.0077398, 0.05 + 0.0077398), abs=1e-6)
    ax = forest(rows)
    points = np.vstack([c.get_offsets() for c in ax.collections if len(c.get_offsets()) == 8])  # the seeds' dots
    assert sorted(points[:, 0]) == pytest.approx(sorted(GAIN + [0.0] * 8))
    assert np.all(np.abs(points[:8, 1]) <= 0.18) and np.all(np.abs(points[8:, 1] + 1) <= 0.18)  # rows 0 and -1
    assert [t.get_text() for t in ax.texts] == ["Holm p = 0.016", "Holm p = 1"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["grpo_r3 - grpo", "gspo - grpo"]
    (figure,) = plotly_figures.forest(rows)
    seeds = next(t for t in figure.data if t.name == "per-seed difference" and t.y[0] == "grpo_r3 - grpo")
    assert list(seeds.x) == pytest.approx(GAIN) and list(seeds.customdata) == list(range(8))
    mean = next(t for t in figure.data if t.name == "mean, 95% t-interval" and t.y[0] == "grpo_r3 - grpo")
    assert mean.error_x.array[0] == pytest.approx(0.0077398, abs=1e-6)
    assert [a.text for a in figure.layout.annotations] == ["Holm p = 0.016", "Holm p = 1"]


def test_what_run_records_is_what_the_report_checks_the_suite_file_against(tmp_path):
    """The suite file `run` writes and a planned run's config.yaml carry the same `analysis:` once read back
    (so a report of real runs passes the check), and the sha256 a run records is the file's."""
    from gspo_bench.config import parse_suite
    from gspo_bench.config.run import resolved_config
    from gspo_bench.suite.runner import plan_runs, suite_file_sha256, write_suite_file

    suite = parse_suite({"name": "t", "task": {"name": "sort", "params": {"max_len": 3}},
                         "budget": {"kind": "steps", "value": 2}, "objectives": [{"name": "grpo"}, {"name": "gspo"}],
                         "analysis": {"primary": {"pairs": [["gspo", "grpo"]], "paper_checks": True}}})
    write_suite_file(suite, tmp_path)
    written = tmp_path / "t" / "suite.yaml"
    assert suite_file_sha256(suite) == hashlib.sha256(written.read_bytes()).hexdigest()
    for planned in plan_runs(suite, tmp_path):  # a synthetic run whose config.yaml has the suite's analysis as run writes it
        run = make_run(tmp_path, planned.entry.run_label, planned.seed, suite="t", kind=KINDS[planned.entry.run_label])
        config = yaml.safe_load((run.path / "config.yaml").read_text())
        config["suite"]["analysis"] = yaml.safe_load(resolved_config(planned))["suite"]["analysis"]
        (run.path / "config.yaml").write_text(yaml.safe_dump(config))
    (declared,) = declarations(load_results(tmp_path / "t")).values()
    assert declared.comparisons() == [("gspo", "grpo")] and declared.primary.paper_checks
    assert declared.files == ((str(written), suite_file_sha256(suite)),)


def test_the_recorded_suite_hash_is_the_one_of_the_runs_last_start_or_resume():
    """A resumed run was last given the suite file its newest `resumed` entry records; a run never resumed,
    the one at its start; a run that recorded none (an older release), None."""
    from analysis.data.load import recorded_suite_sha256

    assert recorded_suite_sha256({"suite_sha256": "a"}) == "a"
    assert recorded_suite_sha256({"suite_sha256": "a", "resumed": [{"suite_sha256": "b"}, {"suite_sha256": "c"}]}) == "c"
    assert recorded_suite_sha256({"suite_sha256": "a", "resumed": [{"at_step": 3}]}) is None  # resumed by an older release
    assert recorded_suite_sha256({}) is None
