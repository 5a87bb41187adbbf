"""The comparison report: `report.md` (static PNG figures), a self-contained interactive
`report.html`, and the figures as PNG and PDF. What it shows is declared in `analysis.sections`;
it refuses runs whose spent compute differs by more than 2% unless allowed (`analysis.matching`).
Figures and comparisons use the finished runs only; the others are listed apart, by name."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from analysis.html import render_html
from analysis.load import NotResultsError, Results, finished
from analysis.markdown import render_markdown
from analysis.matching import UnmatchedComputeError, check_matched
from analysis.sections import Context, FigureSpec, build_sections, figure_specs

__all__ = ["UnmatchedComputeError", "write_figures", "write_report"]


def save_figures(results: Results, specs: list[FigureSpec], out: Path, dpi: int = 110) -> list[Path]:
    """Each figure's static version as PNG and PDF under `out`; closes every figure it made."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in specs:
        fig = spec.static(results)
        try:
            for ext in ("png", "pdf"):
                path = out / f"{spec.name}.{ext}"  # spec.name: at most ~140 characters (analysis.anchors)
                fig.savefig(path, dpi=dpi)
                paths.append(path)
        finally:
            plt.close(fig)
    return paths


def write_report(results: Results, out: Path, allow_unmatched: bool = False) -> dict[str, Path]:
    """Write report.md, report.html and figures/ under `out`; returns the paths written."""
    spread = check_matched(results, allow_unmatched)
    out = Path(out)
    shown = finished(results)
    specs = figure_specs(shown)
    save_figures(shown, specs, out / "figures")
    sections = build_sections(Context(results, spread, allow_unmatched, frozenset(s.name for s in specs)))
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(render_markdown(sections, specs))
    interactive = [(s.name, s.title, s.interactive(shown)) for s in specs]
    (out / "report.html").write_text(render_html(sections, interactive, ", ".join(sorted(results.runs["suite"].unique()))))
    return {"md": out / "report.md", "html": out / "report.html", "figures": out / "figures"}


def write_figures(results: Results, out: Path) -> list[Path]:
    """The figures of the finished runs; NotResultsError when no run finished."""
    shown = finished(results)
    if shown.runs.empty:
        raise NotResultsError("no finished run among the results: no figure to draw (the report lists unfinished runs)")
    return save_figures(shown, figure_specs(shown), Path(out))
