"""Plotly reads every string of a figure (titles, trace names, legend groups, hover text, axis titles,
annotations) as its own rich text: `<a href=...>` becomes a live link, `<span style=...>` styles the
legend, `&lt;` reads back as `<`. report.html hands every figure through `plain_figure`, so that a
label or a sweep value is shown as the characters it holds and the figures keep only plotly's markup
that our figure code writes: a line break `<br>` and the hover box's `<extra></extra>`."""

from __future__ import annotations

import html
import re
from typing import Any

import numpy as np
import plotly.graph_objects as go

from analysis.report.escape import shown

OUR_TAGS = ("<br>", "<extra>", "</extra>")  # the only markup the figure code writes into a string
_OURS = re.compile("(" + "|".join(re.escape(tag) for tag in OUR_TAGS) + ")")


def plain_text(text: str) -> str:
    """`text` as plotly shows it: every `<`, `>` and `&` an entity (plotly's rich text turns them back
    into the characters, never into markup), on one line with hidden characters (bidi controls) as
    escapes (analysis.report.escape.shown); OUR_TAGS kept."""
    return "".join(part if part in OUR_TAGS else html.escape(shown(part), quote=False)
                   for part in _OURS.split(text))


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return plain_text(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        return np.array([_plain(item) for item in value.tolist()], dtype=object).reshape(value.shape)
    return value


def plain_figure(fig: go.Figure) -> go.Figure:
    """A copy of `fig` whose every string is plain_text: nothing a label holds can become a link,
    styling or a line of its own."""
    return go.Figure(_plain(fig.to_plotly_json()))
