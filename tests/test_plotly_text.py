"""report.html's figures show a label as the characters it holds (analysis.plotly_text, wired in
analysis.html.figure_html, which every interactive figure goes through): plotly reads every string of
a figure as rich text, so a label `<a href=...>` was a live link and `<span style=...>` styled the
legend; a bidi control character in the "Drift by layer" caption reversed the text after it."""

from __future__ import annotations

import json
import re

import pandas as pd

from analysis.figures.curves_interactive import curves
from analysis.report.html import figure_html
from analysis.report.plotly_text import OUR_TAGS, plain_text

LINK = '<a href="https://example.com">grpo (click for the data)</a>'
STYLE = '<span style="font-size:60px">gspo</span>'


def metrics(labels: list[str]) -> pd.DataFrame:
    rows = [{"label": label, "seed": seed, "step": step, "reward/mean": 0.1 * step + seed, "compute/cum_flops": 1e9 * step}
            for label in labels for seed in (0, 1) for step in range(1, 6)]
    return pd.DataFrame(rows)


def figure_strings(page: str) -> list[str]:
    """Every string of the figures' JSON in a figure_html page (what plotly renders as rich text)."""
    found = []
    for data in re.findall(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*(\{.*?\}),\s*\{"displaylogo"', page, re.S):
        for part in data:
            found += strings(json.loads(part))
    return found


def strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def test_no_label_becomes_markup_in_a_figure():
    """A figure of two labels, one a link and one a styled span: every string plotly receives holds
    markup only of OUR_TAGS; the labels are there as entities (shown as their characters)."""
    page = figure_html("reward", "Training reward", [curves(metrics([LINK, STYLE]), "reward/mean", "t", "y")])
    texts = figure_strings(page)
    assert texts, "no figure JSON found"
    tags = {tag for text in texts for tag in re.findall(r"<[^<>]*>", text)}
    assert tags <= set(OUR_TAGS), tags
    names = [t for t in texts if "example.com" in t]
    assert names and all(t.startswith("&lt;a href=") or "&lt;a href=" in t for t in names)
    assert any("&lt;span style=&quot;font-size:60px&quot;&gt;gspo" in t or '&lt;span style="font-size:60px"&gt;gspo' in t
               for t in texts)


def test_bidi_controls_are_shown_not_obeyed_in_captions_and_figures():
    label = "g\u2066x\u2069\u200fy"
    page = figure_html("drift_layers_g", f"Drift by layer: {label}",
                       [curves(metrics([label]), "reward/mean", f"Drift by layer and step: {label}", "y")])
    assert not re.search("[\u2066\u2069\u200f]", page)
    assert "<figcaption>Drift by layer: g\\u2066x\\u2069\\u200fy</figcaption>" in page


def test_plain_text_keeps_our_markup_and_escapes_the_rest():
    assert plain_text("a & b <br>x %{y:.4g}<extra></extra>") == "a &amp; b <br>x %{y:.4g}<extra></extra>"
    assert plain_text("<b>bold</b>") == "&lt;b&gt;bold&lt;/b&gt;"
    assert plain_text("&lt;a&gt;") == "&amp;lt;a&amp;gt;"  # an entity in a label stays the text it is
