"""report.md: the sections in order (the verdict first, each sentence linking to its table or
figure) and the static figures as PNG. Titles and table cells are plain text, escaped here; section
text and sentences are markdown whose user text was escaped where it was written (analysis.report.escape)."""

from __future__ import annotations

import pandas as pd

from analysis.report import anchors
from analysis.report.escape import escape
from analysis.report.figure_table import ReportFigure
from analysis.report.page import FiguresHere, Section, Sentence
from analysis.report.texts import fmt


def table_markdown(frame: pd.DataFrame) -> str:
    """A pipe table whose every cell and header is escaped text (no cell can hold a row break or a tag)."""
    cells = fmt(frame).map(escape)
    cells.columns = [escape(c) for c in frame.columns]
    return cells.to_markdown(index=False)


def sentence_markdown(sentence: Sentence, indent: str = "") -> str:
    """A bullet with its links, and its items as bullets nested under it."""
    links = ", ".join(f"[{escape(text)}](#{anchors.link(anchor)})" for text, anchor in sentence.links)
    nested = "".join("\n" + sentence_markdown(item, indent + "  ") for item in sentence.items)
    return f"{indent}- {sentence.text}" + (f" ({links})" if links else "") + nested


def figures_markdown(figures: list[ReportFigure]) -> str:
    """Each figure under its own anchored heading, its PNG linked by its URL-escaped name."""
    md = []
    for f in figures:
        md += [f'<a id="{anchors.figure(f.name)}"></a>', "", f"### {escape(f.title)}", "",
               f"![{escape(f.title)}](figures/{anchors.link(f.name)}.png)", ""]
    return "\n".join(md)


def body_markdown(body: pd.DataFrame | str | list[Sentence] | FiguresHere, figures: list[ReportFigure]) -> str:
    if isinstance(body, FiguresHere):
        return figures_markdown(figures)
    if isinstance(body, str):
        return body
    if isinstance(body, list):
        return "\n".join(sentence_markdown(s) for s in body)
    return table_markdown(body)


def render_markdown(sections: list[Section], figures: list[ReportFigure]) -> str:
    """Every heading carries an explicit anchor (`<a id>`), the target of the verdict's links; the
    figures (analysis.report.figure_table) go where a section's body is FiguresHere, files linked by their
    URL-escaped names (analysis.report.anchors.link)."""
    md = ["# gspo-bench report", ""]
    for section in sections:
        md += [f'<a id="{section.anchor}"></a>', "", f"## {escape(section.title)}", "",
               body_markdown(section.body, figures), ""]
    return "\n".join(md)
