"""The report's answer block (the verdict) on synthetic results with known answers, its declared
sections, the interactive report.html, and (marked `browser`, `make test-browser`) that report.html
renders in headless chromium with no console errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from analysis import anchors
from analysis import interactive as plotly_figures
from analysis.figures import curve_with_band
from analysis.load import load_results
from analysis.matching import UnmatchedComputeError, check_matched
from analysis.paper import paper_vs_run
from analysis.report import write_report
from analysis.sections import SECTIONS, Context, build_sections
from analysis.verdict import answer

sys.path.insert(0, str(Path(__file__).parent))
from test_analysis import make_run  # noqa: E402

REPLAY_ROW = "final reward, GRPO with Routing Replay minus without (Figure 3)"


def synth(root: Path, bonuses: dict[str, list[float]], **kwargs) -> Path:
    """One run per (label, seed) with the given reward bonus per seed; returns the suite folder."""
    for label, per_seed in bonuses.items():
        for seed, bonus in enumerate(per_seed):
            make_run(root, label, seed, bonus=bonus, **kwargs)
    return root / "synth"


def sentences(results_dir: Path, spread: float = 0.0, allow_unmatched: bool = False) -> list[str]:
    return [s.text for s in answer(load_results(results_dir), spread, allow_unmatched, set())]


def test_the_leader_at_equal_compute_and_its_ci(tmp_path):
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 3, "gspo": [0.1] * 3}))
    assert found[0] == ("**gspo leads at equal compute**: final reward 0.48 against grpo's 0.38 (the next best), "
                        "ahead by +0.1 [+0.1, +0.1] over 3 seeds.")


def test_the_leader_is_compared_with_the_next_best_of_three(tmp_path):
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 3, "grpo_rr": [0.05] * 3, "gspo": [0.1] * 3}))
    assert found[0] == ("**gspo leads at equal compute**: final reward 0.48 against grpo_rr's 0.43 (the next best), "
                        "ahead by +0.05 [+0.05, +0.05] over 3 seeds.")


def test_the_leader_sentence_flips_when_the_other_objective_is_ahead(tmp_path):
    found = sentences(synth(tmp_path, {"grpo": [0.1] * 3, "gspo": [0.0] * 3}))
    assert found[0].startswith("**grpo leads at equal compute**: final reward 0.48 against gspo's 0.38")
    gspo_above = next(s for s in found if s.startswith("GSPO ends above GRPO"))
    assert "**not shown**: these runs show the opposite" in gspo_above


def test_a_tie_is_no_difference_within_the_ci(tmp_path):
    """Per-seed differences +0.05, -0.05, +0.01: a CI across 0."""
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 3, "gspo": [0.05, -0.05, 0.01]}))
    assert found[0].startswith("**No difference within the CI at equal compute**: gspo 0.383 and grpo 0.38")
    assert "differ by +0.00333 [" in found[0]
    gspo_above = next(s for s in found if s.startswith("GSPO ends above GRPO"))
    assert "**not shown**: no difference within the CI" in gspo_above


def test_too_few_seeds_name_no_leader_and_no_phenomenon(tmp_path):
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 2, "gspo": [0.1] * 2}))
    assert found[0] == ("**Too few seeds to name a leader** at equal compute: gspo 0.48 and grpo 0.38 over 2 common "
                        "seed(s) (3 needed for a CI).")
    assert all("**too few seeds** (2; 3 needed for a CI)" in s for s in found[1:] if "not measured" not in s)
    assert any(s.startswith("Routing Replay raises GRPO's final reward (Figure 3): **not measured**") for s in found)


def test_without_gspo_runs_the_verdict_says_the_paper_is_not_checked(tmp_path):
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 3, "grpo_rr": [0.05] * 3}))
    assert found[0].startswith("**grpo_rr leads at equal compute**")
    assert found[1:] == ["The paper's phenomena are not checked: that needs GRPO and GSPO runs."]


def test_unmatched_compute_is_said_in_the_verdict(tmp_path):
    found = sentences(synth(tmp_path, {"grpo": [0.0] * 3, "gspo": [0.1] * 3}), spread=0.1, allow_unmatched=True)
    assert found[0].startswith("**gspo leads at unmatched compute (spread 10.0%, allowed by flag)**")


@pytest.mark.parametrize(("replay_bonus", "agrees", "shown"), [
    (0.05, "yes", "**shown** (0.05 [0.05, 0.05] over 3 seeds)"),
    (-0.05, "no", "**not shown**: these runs show the opposite (-0.05 [-0.05, -0.05] over 3 seeds)"),
])
def test_figure_3_verdict_follows_the_sign_of_replays_effect(tmp_path, replay_bonus, agrees, shown):
    """GRPO with Routing Replay ahead of GRPO without (the paper's side) or behind it."""
    results_dir = synth(tmp_path, {"grpo": [0.0] * 3, "grpo_rr": [replay_bonus] * 3, "gspo": [0.1] * 3})
    table = paper_vs_run(load_results(results_dir)).set_index("quantity")
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


EXPECTED_SECTIONS = ["answer", "suite-summary", "compute-matching", "summary", "paired-vs-grpo", "paper-vs-run", "by-sweep-point",
                     "held-out-evaluation", "clip-by-length", "ratio-variance-by-routing", "router-margins", "gpu-figures",
                     "late-divergence", "provenance", "unreadable"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report")
    return write_report(load_results(synth(root, {"grpo": [0.0] * 3, "grpo_rr": [0.0] * 3, "gspo": [0.1] * 3})),
                        root / "out")


def test_every_declared_section_is_in_both_reports_in_order(report):
    """The report's sections are a declared list: removing one fails here, and every section that applies
    to these results is in report.md and report.html, the answer first."""
    assert [spec.key for spec in SECTIONS] == EXPECTED_SECTIONS
    results = load_results(report["md"].parent.parent / "synth")
    built = build_sections(Context(results, 0.0, False, frozenset()))
    assert [s.anchor for s in built] == ["answer", "suite-summary", "compute-matching", anchors.SUMMARY,
                                         "paired-vs-grpo", "paper-vs-run", "held-out-evaluation", "clip-by-length",
                                         "ratio-variance-by-routing", "router-margins", "router-margins-reading",
                                         "gpu-figures", "late-divergence",
                                         "late-divergence-thresholds",
                                         "provenance"]
    md, html = report["md"].read_text(), report["html"].read_text()
    positions = [md.index(f'<a id="{s.anchor}"></a>\n\n## {s.title}\n') for s in built]
    assert positions == sorted(positions) and md.index("## The answer") < md.index("## Suite summary")
    assert all(f"<h2 id='{s.anchor}'>" in html for s in built)


def test_every_verdict_link_has_its_target_in_both_reports(report):
    md, html = report["md"].read_text(), report["html"].read_text()
    answer_md = md.split("## The answer")[1].split("<a id=")[0]
    targets = re.findall(r"\]\(#([\w-]+)\)", answer_md)
    assert len(answer_md.strip().splitlines()) == 6 and len(targets) == 12  # leader + 5 phenomena, 2 links each
    assert anchors.figure("fig3_routing_replay") in targets and anchors.paper("") in targets
    for target in targets:
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
    assert html.index("<h2 id='answer'>") < html.index("<h2 id='suite-summary'>") < html.index("id='figures'")


def test_interactive_figures_toggle_objectives_and_seeds_and_switch_to_log(report):
    results = load_results(report["md"].parent.parent / "synth")
    (variance,) = plotly_figures.ratio_variance(results)
    names = {t.name for t in variance.data if t.showlegend is not False}
    assert {"gspo token mean", "gspo token s0", "gspo token s2", "grpo seq mean", "grpo seq s1"} <= names
    seed = next(t for t in variance.data if t.name == "grpo_rr seq s1")
    assert seed.legendgroup == "grpo_rr seq" and "seed 1" in seed.hovertemplate and seed.visible == "legendonly"
    assert variance.layout.legend.groupclick == "toggleitem"  # a seed alone; its group title: the objective
    assert variance.layout.yaxis.type == "log"
    (switch,) = variance.layout.updatemenus
    assert [b.args[0]["yaxis.type"] for b in switch.buttons] == ["linear", "log"] and switch.active == 1
    (reward,) = plotly_figures.reward_vs_compute(results)
    assert reward.layout.yaxis.type == "linear"
    mean, seed = (next(t for t in reward.data if t.name == name) for name in ("gspo mean", "gspo s1"))
    static = curve_with_band(results.metrics, "reward/mean").query("label == 'gspo'")
    assert list(mean.y) == pytest.approx(static["mean"].tolist())  # the numbers of the PNG, with hover values
    assert mean.y[-1] == pytest.approx(seed.y[-1])  # the seeds' rewards are equal here: each seed is the mean


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
