"""What a report is made of, as the renderers (analysis.report.markdown, analysis.report.html) read it:
sections in order, each with a body that is a table, a paragraph, sentences with their links, or the
place of the figures. Nothing here builds a section or words a judgement."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Sentence:
    """Markdown text (bold allowed) and the (link text, anchor) pairs it points to; `items`: sentences
    listed under it (a swept suite's answer per arm), each with its own links."""

    text: str
    links: tuple[tuple[str, str], ...]
    items: tuple[Sentence, ...] = ()


@dataclass(frozen=True)
class FiguresHere:
    """The body of the section where the renderers put the report's figures."""


@dataclass(frozen=True)
class Section:
    """`title` is plain text (the renderers escape it); a str `body` is markdown (user text in it
    escaped with analysis.report.escape.escape); a table's cells are plain text. `folded`: shown closed in
    report.html (per-run detail under a summary shown above)."""

    anchor: str
    title: str
    body: pd.DataFrame | str | list[Sentence] | FiguresHere
    folded: bool = False
