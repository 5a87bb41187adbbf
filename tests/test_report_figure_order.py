"""The report's figures (analysis.report.figure_table): declared in one table that report.md, report.html
and `gspo-bench figures` all read, nowhere else; in order, the forest plot of a declared family first,
then the stability map's figures, then the rest (a review moved the forest plot after the map and no test
saw it)."""

from __future__ import annotations

import ast
from pathlib import Path

import matplotlib.pyplot as plt
import plotly.graph_objects as go
import yaml

from analysis.data.load import load_results
from analysis.report import anchors
from analysis.report.anchors import FOREST
from analysis.report.sections import Context
from tests.helpers.results import make_run
from tests.helpers.stability import swept_run

ROOT = Path(__file__).resolve().parent.parent


def test_the_forest_plot_comes_before_the_stability_map(tmp_path):
    for noise in (0.1, 1.0):
        for label in ("grpo", "gspo"):
            for seed in range(2):
                swept_run(tmp_path, label, seed, {"router_noise": noise}, {"mismatch/k3_kl": noise})
    suite = {"name": "synth", "objectives": [{"name": "grpo"}, {"name": "gspo"}],
             "analysis": {"primary": {"pairs": [["gspo", "grpo"]]}}}
    (tmp_path / "synth" / "suite.yaml").write_text(yaml.safe_dump(suite))
    names = [figure.name for figure in Context(load_results(tmp_path / "synth"), float("nan"), False).figures_shown]
    assert names[0] == FOREST
    assert names[1:4] == [anchors.CHANGE_VS_KL, anchors.CELLS, anchors.COLLAPSE_PROBABILITY]


# ------------------------------------------------------------------------------ one table of declarations

TABLE = "analysis/report/figure_table.py"  # FIGURES, the one table every figure is declared in


def declared_outside(root: Path) -> list[str]:
    """`path:line name` for each FigureSpec built anywhere in analysis/ but in FIGURES of TABLE, and each
    ReportFigure built anywhere but in its `bound` (the one place a declaration becomes the report's figure)."""
    bad = []
    for path in sorted((root / "analysis").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside: dict[str, set[int]] = {"FigureSpec": set(), "ReportFigure": set()}
        if path.relative_to(root).as_posix() == TABLE:
            for node in tree.body:
                if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "FIGURES":
                    inside["FigureSpec"] |= {id(n) for n in ast.walk(node)}
                if isinstance(node, ast.FunctionDef) and node.name == "bound":
                    inside["ReportFigure"] |= {id(n) for n in ast.walk(node)}
        bad += [f"{path.relative_to(root)}:{node.lineno} {node.func.id}" for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in inside
                and id(node) not in inside[node.func.id]]
    return bad


def test_every_figure_is_declared_in_the_one_table():
    assert declared_outside(ROOT) == []


def test_the_table_check_sees_a_figure_declared_elsewhere(tmp_path):
    (tmp_path / "analysis" / "report").mkdir(parents=True)
    (tmp_path / TABLE).write_text("FIGURES: tuple = (FigureSpec('a', 'A', f, g),)\nEXTRA = [FigureSpec('b', 'B', f, g)]\n"
                                  "def bound(spec, s):\n    return [ReportFigure(spec.name, spec.title, spec, s)]\n")
    (tmp_path / "analysis" / "report" / "sections.py").write_text("def more(s):\n    return ReportFigure('c', 'C', x, s)\n")
    assert declared_outside(tmp_path) == ["analysis/report/figure_table.py:2 FigureSpec",
                                          "analysis/report/sections.py:2 ReportFigure"]


def test_report_md_report_html_and_the_figures_command_all_read_the_table(tmp_path, monkeypatch):
    """The table replaced by two declarations, one drawn and one that needs a column no run logged: report.md,
    report.html and `write_figures` (`gspo-bench figures`) show the first and nothing else, and the report
    names the second as left out."""
    from analysis.report import figure_table
    from analysis.report.figure_table import FigureSpec
    from analysis.report.writer import write_figures, write_report

    def line(sources) -> plt.Figure:
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, 1])
        return fig

    monkeypatch.setattr(figure_table, "FIGURES", (
        FigureSpec("only_line", "The only line", line, lambda s: [go.Figure(go.Scatter(x=[0, 1], y=[0, 1]))]),
        FigureSpec("unlogged", "The unlogged figure", line, lambda s: [], needs=("no/such_column",))))
    for label in ("grpo", "gspo"):
        make_run(tmp_path, label, 0)
    results = load_results(tmp_path / "synth")
    paths = write_report(results, tmp_path / "report")
    md, html = paths["md"].read_text(), paths["html"].read_text()
    assert sorted(p.name for p in paths["figures"].iterdir()) == ["only_line.pdf", "only_line.png"]
    assert md.count("![") == 1 and "![The only line](figures/only_line.png)" in md
    assert html.count("<figure ") == 1 and "<figure id='figure-only_line'>" in html
    assert "- The unlogged figure: no run logged no/such_column" in md
    assert [p.name for p in write_figures(results, tmp_path / "figures")] == ["only_line.png", "only_line.pdf"]
