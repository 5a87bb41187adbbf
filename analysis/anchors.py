"""Anchor names of the report's sections and figures: the verdict links to them, the renderers put
them on the headings. One place, so a link and its target cannot drift apart."""

from __future__ import annotations

from analysis.paper import safe_name

ANSWER = "answer"
SUMMARY = "summary-per-objective"
BY_POINT = "final-reward-by-sweep-point"


def paper(facet: str) -> str:
    """The "Paper vs this run" table of one sweep point ("" without a sweep)."""
    return "paper-vs-run" + (f"-{safe_name(facet)}" if facet else "")


def figure(name: str) -> str:
    return f"figure-{name}"
