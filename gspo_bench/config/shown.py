"""User values in error messages: at most SHOWN_CHARS characters of each, so that a huge value (a 2 MB
string under an unknown key) gives a one-line error, not a 2 MB one. Every error of a suite that
repeats a value goes through `shown` (a value, as repr writes it) or `clip` (text)."""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 200  # a value's share of an error line


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` whole when at most `limit` characters, else its start and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)`, clipped (a long string's repr is cut before it is built whole)."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    return clip(repr(value), limit)
