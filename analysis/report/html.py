"""report.html: one self-contained page that works offline. plotly's JavaScript is embedded once in
the head; every figure is an interactive plotly div (hover values, legend toggles, a linear / log
switch); the verdict comes first, each sentence linking to its table or figure."""

from __future__ import annotations

import html

import pandas as pd
from plotly.offline import get_plotlyjs

from analysis.report import anchors
from analysis.report.escape import shown, to_html
from analysis.report.page import FiguresHere, Section, Sentence
from analysis.report.plotly_text import plain_figure
from analysis.report.texts import fmt

CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
       "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}"
       "figure{margin:1.5em 0}figcaption{font-weight:600}"
       "#answer + ul{background:#f6f8fa;border-left:4px solid #4a7;padding:.8em 1em .8em 2em}"
       "#answer + ul li{margin:.3em 0}summary h2{display:inline;cursor:pointer}details{margin:1em 0}")
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


def sentence_html(sentence: Sentence) -> str:
    links = ", ".join(f"<a href='#{html.escape(anchors.link(anchor))}'>{html.escape(text)}</a>"
                      for text, anchor in sentence.links)
    nested = "<ul>" + "".join(sentence_html(item) for item in sentence.items) + "</ul>" if sentence.items else ""
    return f"<li>{to_html(sentence.text)}" + (f" ({links})" if links else "") + nested + "</li>"


def body_html(body: pd.DataFrame | str | list[Sentence] | FiguresHere, figures: list[tuple[str, str, list]]) -> str:
    if isinstance(body, FiguresHere):
        return "".join(figure_html(*f) for f in figures)
    if isinstance(body, str):
        return "".join(f"<p>{to_html(line)}</p>" for line in body.splitlines())
    if isinstance(body, list):
        return "<ul>" + "".join(sentence_html(s) for s in body) + "</ul>"
    cells = fmt(body).map(shown)  # the one rule for user text (analysis.report.escape.shown), then HTML-escaped
    cells.columns = [shown(c) for c in body.columns]
    return cells.to_html(index=False, border=0, escape=True)


def section_html(section: Section, figures: list[tuple[str, str, list]] | None = None) -> str:
    """A section: its heading (the anchor the verdict links to) and body; a folded one in a closed
    <details> whose summary is the heading."""
    heading = f"<h2 id='{html.escape(section.anchor)}'>{html.escape(shown(section.title))}</h2>"
    body = body_html(section.body, figures or [])
    if section.folded:
        return f"<details><summary>{heading}</summary>{body}</details>"
    return heading + body


def figure_html(name: str, title: str, plots: list) -> str:
    """One figure: its caption and its plotly divs (the JavaScript is in the head, not here). Every
    figure's text goes through plain_figure and the caption through `shown`: a label shows as what
    it holds, never as a link, styling or reversed text."""
    divs = "".join(plain_figure(plot).to_html(full_html=False, include_plotlyjs=False, div_id=f"plot-{name}-{i}",
                                              config=PLOTLY_CONFIG) for i, plot in enumerate(plots))
    return (f"<figure id='{html.escape(anchors.figure(name))}'><figcaption>{html.escape(shown(title))}</figcaption>"
            f"{divs}</figure>")


def render_html(sections: list[Section], figures: list[tuple[str, str, list]], title: str) -> str:
    """`figures`: (name, title, plotly figures) in order, put where a section's body is FiguresHere."""
    head = (f"<!doctype html><html><head><meta charset='utf-8'><title>gspo-bench report: {html.escape(shown(title))}</title>"
            f"<style>{CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>")
    parts = [head, "<body><h1>gspo-bench report</h1>", *(section_html(s, figures) for s in sections), "</body></html>"]
    return "\n".join(parts)
