"""The comparison report: `report.md` (static PNG figures), a self-contained interactive
`report.html`, and the figures as PNG and PDF. What it shows is declared in `analysis.report.sections`, its
figures in the one table of `analysis.report.figure_table`;
it refuses runs whose spent compute differs by more than 2% unless allowed (`analysis.data.matching`).
Figures and comparisons use the finished runs only; the others are listed apart, by name.

Every file is written atomically (a temporary file beside it, renamed over it: a link at that name is
replaced, never written through), and only once the whole report is rendered: the old report.md and
report.html are removed first, then the figures, report.md and report.html written, so a report killed
on the way leaves no report.md of one run beside a report.html of another."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.category import StrCategoryFormatter
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, FuncFormatter

from analysis.data.load import NotResultsError, Results
from analysis.data.matching import UnmatchedComputeError, check_matched
from analysis.evidence.primary import DeclarationError
from analysis.report.escape import shown_lines
from analysis.report.figure_table import ReportFigure
from analysis.report.html import render_html
from analysis.report.markdown import render_markdown
from analysis.report.sections import Context, build_sections
from gspo_bench.rundir.folder import atomic_write_bytes, atomic_write_text, remove_entry

__all__ = ["DeclarationError", "UnmatchedComputeError", "write_figures", "write_report"]


def plain_static(fig: Figure) -> None:
    """Every text of a static figure by the report's one rule for user text (analysis.report.escape:
    shown_lines): titles, legends and annotations now, and the tick labels that carry labels (categorical
    axes, fixed tick labels) as they are drawn; numeric tick labels are left to their formatters.
    matplotlib's PDF writer fails on U+FEFF in a label."""
    for text in fig.findobj(Text):
        text.set_text(shown_lines(text.get_text()))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for formatter, put in ((axis.get_major_formatter(), axis.set_major_formatter),
                                   (axis.get_minor_formatter(), axis.set_minor_formatter)):
                if isinstance(formatter, StrCategoryFormatter | FixedFormatter):
                    put(FuncFormatter(lambda x, pos, inner=formatter: shown_lines(inner(x, pos))))


def save_figures(figures: list[ReportFigure], out: Path, dpi: int = 110) -> list[Path]:
    """Each figure's static version as PNG and PDF under `out`, each file written atomically; closes
    every figure it made."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for figure in figures:
        fig = figure.static()
        try:
            plain_static(fig)
            for ext in ("png", "pdf"):
                path = out / f"{figure.name}.{ext}"  # at most ~140 characters (analysis.report.anchors)
                data = io.BytesIO()
                fig.savefig(data, dpi=dpi, format=ext)
                atomic_write_bytes(path, data.getvalue())
                paths.append(path)
        finally:
            plt.close(fig)
    return paths


def write_report(results: Results, out: Path, allow_unmatched: bool = False) -> dict[str, Path]:
    """Write report.md, report.html and figures/ under `out`; returns the paths written. A suite file
    whose declared family cannot be read or differs from the runs' raises DeclarationError."""
    spread = check_matched(results, allow_unmatched)
    out = Path(out)
    context = Context(results, spread, allow_unmatched)
    figures = context.figures_shown
    sections = build_sections(context)
    markdown = render_markdown(sections, figures)
    interactive = [(f.name, f.title, f.interactive()) for f in figures]
    page = render_html(sections, interactive, ", ".join(sorted(results.runs["suite"].unique())))
    paths = {"md": out / "report.md", "html": out / "report.html", "figures": out / "figures"}
    for old in (paths["md"], paths["html"]):  # a link is unlinked, not followed
        remove_entry(old)
    save_figures(figures, paths["figures"])
    atomic_write_text(paths["md"], markdown)
    atomic_write_text(paths["html"], page)
    return paths


def write_figures(results: Results, out: Path) -> list[Path]:
    """The report's figures of the finished runs; NotResultsError when no run finished."""
    context = Context(results, float("nan"), False)
    if context.shown.runs.empty:
        raise NotResultsError("no finished run among the results: no figure to draw (the report lists unfinished runs)")
    return save_figures(context.figures_shown, Path(out))
