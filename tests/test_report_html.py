"""The report's answer block (the verdict) on synthetic results with known answers, its declared
sections, the interactive report.html, and (marked `browser`, `make test-browser`) that report.html
renders in headless chromium with no console errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from analysis.data.load import finished, load_results, unfinished
from analysis.data.matching import UnmatchedComputeError, check_matched
from analysis.evidence.gather import gather
from analysis.figures import curves_interactive as plotly_figures
from analysis.figures.curves import curve_with_band
from analysis.report import anchors
from analysis.report.escape import escape
from analysis.report.paper_checks import paper_vs_run
from analysis.report.sections import SECTIONS, Context, build_sections
from analysis.report.verdict import answer
from analysis.report.writer import write_report
from tests.helpers.reports import JITTER, synth
from tests.helpers.results import make_run

REPLAY_ROW = "final reward, GRPO with Routing Replay minus without (Figure 3)"




def sentences(results_dir: Path, spread: float = 0.0, allow_unmatched: bool = False) -> list[str]:
    results = load_results(results_dir)
    return [s.text for s in answer(gather(finished(results)), unfinished(results), spread, allow_unmatched, set())]


def leader(found: list[str]) -> str:
    return next(s for s in found if "lead" in s or "ahead of every other" in s)




def test_six_paired_seeds_that_all_favour_one_learning_arm_name_it_with_its_p(tmp_path):
    """GRPO + RR gains 0.05 +- 0.01 on each of 6 seeds over GRPO; one comparison in the report (no GSPO,
    no paper checks): sign-flip p = 2/64, Holm's factor 1. Differences 0.05, 0.04, 0.06, 0.05, 0.04, 0.06:
    sd 0.008944, t(0.975, 5) = 2.570582 -> 0.05 -+ 0.009386. P(grpo_rr > grpo) over all 36 pairs of runs (seed
    offsets 0.03 s): 2 + 3 + 4.5 + 5 + 6 + 6 = 26.5 of 36 (seed 2's +0.06 ties GRPO's seed 4)."""
    root = synth(tmp_path, {"grpo": [0.0] * 6, "grpo_rr": [0.05 + j for j in JITTER[:6]]})
    assert leader(sentences(root)) == (
        "**grpo_rr leads at equal compute** (Holm-adjusted p = 0.031, the largest over its comparisons with every "
        "other objective; 1 comparison in the report): it rests on grpo_rr minus grpo, paired by seed: "
        "+0.05 [+0.0406, +0.0594] (s0 +0.05, s1 +0.04, s2 +0.06, s3 +0.05, s4 +0.04, s5 +0.06) over 6 paired seeds, "
        "p = 0.031 (Holm-adjusted over the report's 1 comparison: 0.031); P(grpo_rr > grpo) = 0.74.")


def test_the_leader_sentence_quotes_the_paired_difference_not_the_arms_means(tmp_path):
    """GSPO has a seed GRPO lacks (s6, far above): its mean over 7 seeds is not what the paired test saw.
    The sentence quotes the paired difference over the 6 shared seeds only."""
    from tests.helpers.results import make_run

    root = synth(tmp_path, {"grpo": [0.0] * 6, "grpo_rr": [0.05 + j for j in JITTER[:6]]})
    make_run(tmp_path, "grpo_rr", 6, bonus=2.0)
    found = leader(sentences(root))
    assert found.startswith("**grpo_rr leads at equal compute**") and "+0.05 [+0.0406, +0.0594]" in found
    assert "over 6 paired seeds" in found and "0.505" not in found and "0.455" not in found  # the arms' own means


def test_a_difference_below_the_rewards_resolution_names_no_leader(tmp_path):
    """GRPO + RR ahead by 1e-12 on each of 6 seeds (float rounding, not a reward): p = 2/64 all the same,
    and no leader: a difference must exceed RESOLUTION."""
    from analysis.evidence.leader import RESOLUTION

    found = leader(sentences(synth(tmp_path, {"grpo": [0.0] * 6, "grpo_rr": [1e-12] * 6})))
    assert found.startswith(f"**No leader named at equal compute**: the best two differ by less than {RESOLUTION:g}")
    assert "p = 0.031" in found


def test_an_arm_that_never_learned_is_not_named_leader_for_where_it_started(tmp_path):
    """GSPO starts 0.5 above GRPO and stays flat (learned on no seed); GRPO rises on every seed. GSPO is
    ahead on all 7 seeds at Holm p = 3 x 2/128 = 0.047, but what it leads by is its start: no leader."""
    from tests.helpers.results import make_run

    for seed in range(7):
        make_run(tmp_path, "grpo", seed)
        make_run(tmp_path, "gspo", seed, slope=0.0, bonus=0.5)
    found = sentences(tmp_path / "synth")
    assert "not on every seed: gspo" in found[1]
    assert leader(found).startswith("**No leader named at equal compute**: gspo, the best by its outcome, did "
                                    "not learn on every seed (its lead is where it started)")


def test_the_leader_flips_when_the_other_objective_is_ahead(tmp_path):
    root = synth(tmp_path, {"grpo": [0.05 + j for j in JITTER[:6]], "grpo_rr": [0.0] * 6})
    assert leader(sentences(root)).startswith("**grpo leads at equal compute** (Holm-adjusted p = 0.031")


def test_three_seeds_name_no_leader_and_say_how_many_seeds_a_leader_needs(tmp_path):
    """Differences 0.1, 0.12, 0.08 paired by seed (the seeds' own offsets 0, 0.03, 0.06 cancel): mean 0.1,
    sd 0.02, t(0.975, 2) = 4.302653 -> 0.1 -+ 0.0497. Family: the pair, clip, depth: 3 tests -> 7 seeds."""
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 3, "gspo": [0.1, 0.12, 0.08]}))
    assert leader(found) == (
        "**No leader named at equal compute**: gspo minus grpo (the best two), paired by seed: +0.1 [+0.0503, "
        "+0.15] (s0 +0.1, s1 +0.12, s2 +0.08) over 3 paired seeds, p = 0.25 (Holm-adjusted over the report's 3 "
        "comparisons: 0.75). 3 paired seeds cannot give a p below 0.25; with 3 comparisons a leader needs at least "
        "7 paired seeds.")
    gspo_above = next(s for s in found if s.startswith("GSPO ends above GRPO"))
    assert "**too few seeds** (3 paired; with the report's 3 comparisons 7 are needed)" in gspo_above


@pytest.mark.parametrize(("seeds", "named"), [(6, False), (7, True)])
def test_holm_over_the_reports_comparisons_decides_the_leader(tmp_path, seeds, named):
    """GSPO ahead on every seed; the report also tests clipping and depth: 3 tests. 6 seeds: 3 x 2/64 =
    0.094, no leader; 7 seeds: 3 x 2/128 = 0.047, GSPO leads."""
    found = leader(sentences(synth(tmp_path, {"grpo": [0.0] * seeds, "gspo": [0.1 + j for j in JITTER[:seeds]]})))
    if named:
        assert found.startswith("**gspo leads at equal compute** (Holm-adjusted p = 0.047,")
    else:
        assert found.startswith("**No leader named at equal compute**") and "p = 0.031 (Holm-adjusted over the " \
            "report's 3 comparisons: 0.094)" in found and "a leader needs at least 7 paired seeds" in found


def test_enough_seeds_and_no_difference_is_no_leader(tmp_path):
    """6 seeds, differences +-0.01 in turn: p = 1 with one comparison (6 seeds are enough to tell)."""
    found = leader(sentences(synth(tmp_path, {"grpo": [0.0] * 6, "grpo_rr": [0.01, -0.01] * 3})))
    assert found.startswith("**No objective is ahead of every other at equal compute** at a Holm-adjusted p below 0.05:")
    assert "over 6 paired seeds, p = 1 (Holm-adjusted over the report's 1 comparison: 1)" in found


def test_an_arm_ahead_of_only_some_of_the_others_is_not_named_the_leader(tmp_path):
    """Three arms on 8 seeds: grpo_rr (bonus 0.13, 0.09 in turn) and grpo_x (0.1) are each ahead of grpo on
    every seed (sign-flip p = 2/256 each); grpo_rr - grpo_x is +0.03, -0.01 in turn: |sum| >= 0.08 for 72 of
    the 256 sign patterns (all 16 with the four 0.03 positive, 4 x 5 with three of them and two or more 0.01,
    and their mirror images), p = 0.28. Holm over the 3 tests: 3 x 2/256 = 0.023, 2 x 2/256 -> 0.023, 0.28.
    The top arm beats grpo but not grpo_x: no arm is ahead of every other, so none is named (8 seeds are
    enough: 3 tests need 7)."""
    root = synth(tmp_path, {"grpo": [0.0] * 8, "grpo_rr": [0.13, 0.09] * 4})
    for seed in range(8):
        make_run(tmp_path, "grpo_x", seed, bonus=0.1, kind=("grpo", False))
    found = leader(sentences(root))
    assert found.startswith("**No objective is ahead of every other at equal compute** at a Holm-adjusted p below "
                            "0.05: grpo_rr minus grpo_x (the best two), paired by seed: +0.01"), found
    assert "over 8 paired seeds, p = 0.28 (Holm-adjusted over the report's 3 comparisons: 0.28)" in found


def test_nothing_is_compared_where_no_objective_learned(tmp_path):
    """Flat rewards (slope 0): no run rose from its start; GSPO ahead by 0.1 on 7 seeds names no leader, and
    no reward comparison enters the report's family (only the clip and depth checks are tested)."""
    root = synth(tmp_path, {"grpo": [0.0] * 7, "gspo": [0.1] * 7}, slope=0.0)
    found = sentences(root)
    tests = gather(finished(load_results(root))).family.tests
    assert [t.quantity for t in tests] == ["clipped-token fraction", "drift, last MoE layer minus the first"]
    assert found[1].startswith("**No objective learned** (start -> final, one-sided 5% test per seed: grpo 0.29 -> "
                               "0.29 (0 of 7 seeds rose); gspo 0.39 -> 0.39 (0 of 7 seeds rose)): which objective leads "
                               "is not asked, and rewards are not compared.")
    assert not any("lead" in s.split(":")[0] for s in found)
    assert next(s for s in found if s.startswith("GSPO ends above GRPO")).endswith("**withheld**: no objective learned.")
    assert any(s.startswith("GSPO clips more tokens than GRPO (Figure 2): **shown**") for s in found)  # not a reward


def test_the_answer_says_what_it_compares_and_the_chance_level(tmp_path):
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 3, "gspo": [0.1] * 3}))
    assert found[0] == ("Objectives are compared on the **training reward**: reward/mean, the mean of the last 25% of "
                        "steps; the task declares no chance baseline.")
    assert found[1].startswith("RL learned (grpo 0.285 -> 0.41 (3 of 3 seeds rose); gspo 0.385 -> 0.51 (3 of 3 seeds "
                               "rose)): on every seed for grpo, gspo.")


def test_without_gspo_runs_the_verdict_says_the_paper_is_not_checked(tmp_path):
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 3, "grpo_rr": [0.05] * 3}))
    assert found[-1] == "The paper's phenomena are not checked: that needs GRPO and GSPO runs."


def test_unmatched_compute_is_said_in_the_verdict(tmp_path):
    root = synth(tmp_path, {"grpo": [0.0] * 3, "gspo": [0.1] * 3})
    assert leader(sentences(root, spread=0.1, allow_unmatched=True)).startswith(
        "**No leader named at unmatched compute (spread 10.0%, allowed by flag)**")


@pytest.mark.parametrize(("replay_bonus", "agrees", "shown"), [
    (0.05, "yes", "**shown** (+0.05 [+0.0423, +0.0577] (s0 +0.05, s1 +0.04, s2 +0.06, s3 +0.05, s4 +0.04, s5 +0.06, "
                  "s6 +0.04, s7 +0.06) over 8 seeds; p = 0.0078, Holm-adjusted 0.039)"),
    (-0.05, "no", "**not shown**: these runs show the opposite (-0.05 [-0.0577, -0.0423] (s0 -0.05, s1 -0.06, s2 -0.04, "
                  "s3 -0.05, s4 -0.06, s5 -0.04, s6 -0.06, s7 -0.04) over 8 seeds; p = 0.0078, Holm-adjusted 0.039)"),
])
def test_figure_3_verdict_follows_the_sign_of_replays_effect(tmp_path, replay_bonus, agrees, shown):
    """8 seeds; the family: 3 reward pairs, clip, depth = 5 tests, every p 2/256: Holm 5 x 2/256 = 0.039.
    Differences +-0.05 + (0, -0.01, 0.01, 0, -0.01, 0.01, -0.01, 0.01): sd 0.009258, t(0.975, 7) = 2.364624
    -> -+0.00774."""
    gains = [replay_bonus + j for j in JITTER]
    results_dir = synth(tmp_path, {"grpo": [0.0] * 8, "grpo_rr": gains, "gspo": [0.1] * 8})
    evidence = gather(finished(load_results(results_dir)))
    (group,) = evidence.groups
    table = paper_vs_run(evidence.subset(group), evidence.learnings[group], evidence.family).set_index("quantity")
    assert table.loc[REPLAY_ROW, "agrees"] == agrees
    replay = next(s for s in sentences(results_dir) if s.startswith("Routing Replay raises GRPO's final reward"))
    assert replay.endswith(f": {shown}.")


def test_compute_is_matched_within_each_sweep_point_not_across_points(tmp_path):
    """Point k=2 spends 1.5x the FLOPs of point k=1; within each point the runs match."""
    for k, flops in ((1, 1e9), (2, 1.5e9)):
        for label in ("grpo", "gspo"):
            make_run(tmp_path, label, 0, flops_per_step=flops, sweep={"k": k})
    results = load_results(tmp_path / "synth")
    assert set(results.runs["facet"]) == {"k=1", "k=2"}
    assert check_matched(results) == 0.0
    make_run(tmp_path, "grpo_rr", 0, flops_per_step=1.1e9, sweep={"k": 1})
    with pytest.raises(UnmatchedComputeError, match=r"differs by 10.0% between runs \(sweep point k=1\)"):
        check_matched(load_results(tmp_path / "synth"))


EXPECTED_SECTIONS = ["answer", "answer-numbers", "figures", "figures-left-out", "answer-detail", "suite-summary", "compute-matching", "unfinished", "learnability", "summary",
                     "primary-comparisons", "paired-vs-grpo", "comparisons", "paper-vs-run", "by-sweep-point", "stability-map",
                     "sampler-vs-learner", "early-warnings", "adaptive",
                     "tuning", "held-out-evaluation", "clip-by-length", "heavy-tailed", "extreme-ratios", "ratio-variance-by-routing",
                     "router-margins", "gpu-figures", "late-divergence", "compute-matching-runs", "learnability-runs",
                     "provenance", "unreadable", "infinite-values"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report")
    bonuses = {"grpo": [0.0] * 3, "grpo_rr": [0.0, 0.01, -0.01], "gspo": [0.1, 0.12, 0.08]}
    return write_report(load_results(synth(root, bonuses)), root / "out")


def test_every_declared_section_is_in_both_reports_in_order(report):
    """The report's sections are a declared list: removing one fails here, and every section that applies
    to these results is in report.md and report.html: the answer, then the figures, then the tables, the
    per-run ones folded to one row per arm near the top and in full near the end (closed in report.html)."""
    assert [spec.key for spec in SECTIONS] == EXPECTED_SECTIONS
    results = load_results(report["md"].parent.parent / "synth")
    built = build_sections(Context(results, 0.0, False, frozenset()))
    assert [s.anchor for s in built] == ["answer", "answer-numbers", "figures", "answer-detail", "suite-summary",
                                         "compute-matching", "learnability",
                                         anchors.SUMMARY, "paired-vs-grpo", "comparisons", "paper-vs-run",
                                         "tuning", "held-out-evaluation", "clip-by-length", "heavy-tailed", "extreme-ratios",
                                         "ratio-variance-by-routing", "router-margins", "router-margins-reading",
                                         "drift-forecast", "gpu-figures", "late-divergence", "late-divergence-thresholds",
                                         "compute-matching-runs", "learnability-runs", "provenance"]
    md, html = report["md"].read_text(), report["html"].read_text()
    positions = [md.index(f'<a id="{s.anchor}"></a>\n\n## {escape(s.title)}\n') for s in built]
    assert positions == sorted(positions) and md.index("## The answer") < md.index("## Figures") < md.index(
        "### Figure 1") < md.index("## Suite summary")
    assert all(f"<h2 id='{s.anchor}'>" in html for s in built)
    folded = [s.anchor for s in built if s.folded]
    assert folded == ["answer-numbers", "compute-matching-runs", "learnability-runs", "provenance"]
    assert all(f"<details><summary><h2 id='{anchor}'>" in html for anchor in folded)


def test_per_run_tables_are_folded_to_one_row_per_arm_near_the_top(report):
    """3 objectives x 3 seeds: compute matching and the learnability gate show 3 rows at the top and the 9
    runs further down; the folded rows count the runs and their statuses."""
    results = load_results(report["md"].parent.parent / "synth")
    built = {s.anchor: s.body for s in build_sections(Context(results, 0.0, False, frozenset()))}
    by_arm, every_run = built["compute-matching"], built["compute-matching-runs"]
    assert len(by_arm) == 3 and len(every_run) == 9
    assert by_arm.set_index("label").loc["gspo", ["runs", "status", "steps", "spent / budget"]].tolist() == [
        3, "3 done", "20", "1.0000"]
    learned = built["learnability"].set_index("objective")
    assert len(learned) == 3 and len(built["learnability-runs"]) == 9 and learned.loc["grpo", "learned"] == "3 of 3"


def test_every_verdict_link_has_its_target_in_both_reports(report):
    md, html = report["md"].read_text(), report["html"].read_text()
    detail_md = md.split("## Every claim, with its numbers")[1].split("<a id=")[0]
    targets = re.findall(r"\]\(#([\w-]+)\)", detail_md)
    # basis, learning (1 link each), leader (2), 5 phenomena (2 each)
    assert len(detail_md.strip().splitlines()) == 8 and len(targets) == 14
    assert anchors.figure("fig3_routing_replay") in targets and anchors.paper(("synth", "")) in targets
    plain_md = md.split("## The answer\n")[1].split("<a id=")[0]  # the plain sentences above them: 5, each linked
    plain = re.findall(r"\]\(#([\w-]+)\)", plain_md)
    assert len(plain_md.strip().splitlines()) == 5 and {"answer-numbers", "learnability", "paper-vs-run"} <= set(plain)
    for target in targets + plain:
        assert f'<a id="{target}"></a>' in md and f"id='{target}'" in html


def test_the_html_embeds_plotlys_javascript_once_and_loads_nothing(report):
    html = report["html"].read_text()
    assert len(re.findall(r"\* plotly\.js v\d", html)) == 1  # the library's banner: one copy per report
    start = html.index("<script type='text/javascript'>/**")
    page = html[:start] + html[html.index("</script>", start):]  # all but the library
    assert "<script src" not in page and "http" not in page and "data:image/png" not in page
    divs = re.findall(r'<div id="plot-([\w-]+)-(\d+)" class="plotly-graph-div"', html)
    assert {name for name, _ in divs} >= {"fig1_reward_vs_compute", "fig2_clip_fraction", "fig3_routing_replay",
                                          "ratio_variance", "drift", "clip_by_length", "kl_entropy",
                                          "drift_layers_gspo"}
    assert ("kl_entropy", "1") in divs  # KL and entropy: two plots under one figure
    assert html.index("<h2 id='answer'>") < html.index("<h2 id='figures'>") < html.index(
        "id='figure-fig1_reward_vs_compute'") < html.index("<h2 id='suite-summary'>")


def test_interactive_figures_toggle_objectives_and_seeds_and_switch_to_log(report):
    results = load_results(report["md"].parent.parent / "synth")
    (variance,) = plotly_figures.ratio_variance(results)
    names = {t.name for t in variance.data if t.showlegend is not False}
    assert {"gspo token median", "gspo token s0", "gspo token s2", "grpo seq median", "grpo seq s1"} <= names
    seed = next(t for t in variance.data if t.name == "grpo_rr seq s1")
    assert seed.legendgroup == "grpo_rr seq" and "seed 1" in seed.hovertemplate and seed.visible == "legendonly"
    assert variance.layout.legend.groupclick == "toggleitem"  # a seed alone; its group title: the objective
    assert variance.layout.yaxis.type == "log"
    (switch,) = variance.layout.updatemenus
    assert [b.args[0]["yaxis.type"] for b in switch.buttons] == ["linear", "log"] and switch.active == 1
    (reward,) = plotly_figures.reward_vs_compute(results)
    assert reward.layout.yaxis.type == "linear"
    mean, *seeds = (next(t for t in reward.data if t.name == name) for name in ("gspo mean", "gspo s0", "gspo s1",
                                                                               "gspo s2"))
    static = curve_with_band(results.metrics, "reward/mean").query("label == 'gspo'")
    assert list(mean.y) == pytest.approx(static["mean"].tolist())  # the numbers of the PNG, with hover values
    assert mean.y[-1] == pytest.approx(sum(seed.y[-1] for seed in seeds) / 3)  # seeds differ: the line is their mean


# ---- the browser check -------------------------------------------------------------------------------

CAPTURE = ("<script>window.__errors=[];addEventListener('error',e=>__errors.push(String(e.message)));"
           "addEventListener('unhandledrejection',e=>__errors.push('unhandled rejection: '+e.reason));"
           "(function(){const f=console.error;console.error=function(...a){__errors.push(a.join(' '));"
           "f.apply(console,a)}})();addEventListener('load',()=>setTimeout(()=>document.documentElement"
           ".setAttribute('data-errors',JSON.stringify(__errors)),500));</script>")


def chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def load_in_chromium(page: Path) -> tuple[str, list[str]]:
    """The DOM of `page` after its scripts ran in headless chromium, and the errors it raised or logged
    with console.error (a script put first in the head records them)."""
    probe = page.with_name("probe-" + page.name)
    probe.write_text(page.read_text().replace("<head>", "<head>" + CAPTURE, 1))
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tempfile.mkdtemp()}", "--virtual-time-budget=20000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=180, check=True)
    found = re.search(r'data-errors="([^"]*)"', done.stdout)
    assert found, "the error capture did not run: " + done.stderr[-2000:]
    return done.stdout, json.loads(found[1].replace("&quot;", '"').replace("&amp;", "&"))


browser = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (make test-browser installs it)")


@pytest.mark.browser
@browser
def test_report_html_renders_every_figure_in_chromium_without_errors(report):
    html = report["html"].read_text()
    plots = re.findall(r'<div id="(plot-[\w-]+)" class="plotly-graph-div"', html)
    dom, errors = load_in_chromium(report["html"])
    assert errors == []
    rendered = re.findall(r'<div id="(plot-[\w-]+)" class="plotly-graph-div js-plotly-plot"', dom)
    assert len(plots) >= 9 and rendered == plots
    assert dom.count('class="main-svg"') >= 2 * len(plots)  # plotly draws two svg layers per plot


@pytest.mark.browser
@browser
def test_the_browser_check_sees_a_page_that_fails(report, tmp_path):
    """The same report without plotly's JavaScript: errors and no figure, so the check above can fail."""
    html = report["html"].read_text()
    start = html.index("<script type='text/javascript'>")
    broken = tmp_path / "broken.html"
    broken.write_text(html[:start] + html[html.index("</script>", start) + len("</script>"):])
    dom, errors = load_in_chromium(broken)
    assert any("Plotly is not defined" in e for e in errors) and 'class="main-svg"' not in dom
