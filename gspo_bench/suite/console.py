"""The console `gspo-bench` prints to: user text (labels, swept values, messages that quote them) is
shown with its control characters escaped, so that a label never clears the screen, moves the
cursor, rewrites the window title or reverses the text that follows it."""

from __future__ import annotations

import unicodedata
from typing import Any

from rich.console import Console
from rich.text import Text

KEPT = frozenset("\n\t")  # line breaks of multi-line messages, tabs


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` with every control or format character (Unicode categories Cc and Cf: ESC, BEL, CR,
    DEL, C1 controls such as CSI, bidirectional overrides) but newline and tab written as a Python
    escape (`\\x1b`, `\\u202e`)."""
    return "".join(_escaped(c) if c not in KEPT and unicodedata.category(c) in ("Cc", "Cf") else c for c in text)


class PrintableConsole(Console):
    """A rich console whose every printed string (a line, a table cell or title, a markup string) is
    `printable`: the escapes rich writes for its own styles are not in those strings and stay."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)
