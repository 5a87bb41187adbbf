"""A suite's errors show a user's value clipped (gspo_bench.config.shown), and YAML aliases are
bounded by the text they expand to (gspo_bench.config.yamlread.MAX_TEXT), not only by their count."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gspo_bench.config.load import SuiteError, parse_suite
from gspo_bench.config.shown import SHOWN_CHARS, clip, shown
from gspo_bench.config.yamlread import MAX_TEXT, MAX_VALUES, read_yaml

CI = Path(__file__).resolve().parent.parent / "experiments" / "ci.yaml"


def ci_suite() -> dict:
    return yaml.safe_load(CI.read_text())


def test_an_unknown_keys_huge_value_is_clipped_in_the_error():
    """A 2 MB string under an unknown key: a one-line error of a few hundred characters that says how
    long the value was (the whole value was repeated before)."""
    with pytest.raises(SuiteError) as err:
        parse_suite(ci_suite() | {"notes": "y" * 2_000_000}, "suite.yaml")
    message = str(err.value)
    assert len(message) < 2 * SHOWN_CHARS + 200 and "notes: unknown key" in message
    assert "... (2,000,000 characters)" in message


def test_a_long_value_in_a_sweep_points_error_is_clipped():
    """A 100 KB description swept at two equal points gives two points of the same run label: the error
    names both points with the value clipped."""
    data = ci_suite()
    long = "x" * 100_000
    with pytest.raises(SuiteError) as err:
        parse_suite(data | {"description": long, "sweep": {"description": [long, long]}}, "suite.yaml")
    message = str(err.value)
    assert len(message) < 4 * SHOWN_CHARS + 400 and message.count("(100,000 characters)") == 2


def test_aliases_of_a_long_string_are_refused_by_the_text_they_expand_to():
    """20 aliases of a 100 KB string: 21 values (far under MAX_VALUES) but 2.1 MB of text (21 strings and
    the keys "base" and "many"), past MAX_TEXT;
    the 99,000 aliases of the report ended in a MemoryError at 6.5 GB."""
    text = f"base: &s {'z' * 100_000}\nmany: [{', '.join(['*s'] * 20)}]\n"
    assert 21 < MAX_VALUES
    with pytest.raises(ValueError, match=rf"more than {MAX_TEXT:,} characters of text \(2,100,008\)"):
        read_yaml(text)
    assert read_yaml(f"base: &s {'z' * 100_000}\nmany: [*s, *s]\n")["many"][1] == "z" * 100_000  # 300 KB: fine


def test_shown_and_clip_keep_short_values_whole():
    assert shown("grpo") == "'grpo'" and shown(3e-3) == "0.003" and clip("x" * SHOWN_CHARS) == "x" * SHOWN_CHARS
    assert shown("a" * 1000) == repr("a" * SHOWN_CHARS) + "... (1,000 characters)"
    assert clip("b" * 1000, 10) == "bbbbbbbbbb... (1,000 characters)"
