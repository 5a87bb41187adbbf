"""User text in report.md: labels, suite names, sweep points, run messages and paths go into markdown
text and tables only through `escape`, so that none of them can start a tag (`<script>`, `<img
onerror=...>`), a link, emphasis or a table cell, or end a table row (a newline). report.html renders
the same markdown text with `to_html`, which reads the escapes back as plain characters."""

from __future__ import annotations

import html
import re
import unicodedata

SPECIAL = "\\`*_[]<>|&#~$"  # characters markdown (CommonMark, GFM tables, math) gives a meaning
_ESCAPED = re.compile(r"\\([" + re.escape(SPECIAL) + "])")
_PLACEHOLDER = 0xE000  # private-use code points stand for escaped characters while markup is parsed


# the Unicode categories never shown raw: control (an escape sequence's ESC), format (bidi overrides,
# isolates and marks: U+202A-202E, U+2066-2069, U+200E, U+200F, U+061C; zero-width and soft hyphen),
# surrogates, private use (the placeholders of `to_html` among them), unassigned, line and paragraph separators
HIDDEN = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def escape(text: object) -> str:
    """`text` as `shown` (one line, hidden characters as escapes), every markdown-special character
    backslash-escaped (but `_` between two letters or digits, which CommonMark never reads as emphasis:
    `grpo_rr` stays readable)."""
    line = shown(text)
    return "".join("\\" + c if c in SPECIAL and not _intraword(line, i) else c for i, c in enumerate(line))


def shown(text: object) -> str:
    """The one rule for user text (labels, suite names, sweep points, run messages, paths) wherever the
    report shows it: report.md through `escape`, report.html's text, headings, captions, tables and title,
    and its figures (analysis.report.plotly_text): on one line (line breaks and tabs as one space), every
    character of a HIDDEN category as its escape (`visible`)."""
    return visible(re.sub(r"[\r\n\t\v\f\u2028\u2029]+", " ", str(text)))


def shown_lines(text: str) -> str:
    """`text` as `shown`, line by line (each line's breaks kept): the static figures' text, whose titles
    our figure code writes on two lines (matplotlib's PDF writer fails on some hidden characters)."""
    return "\n".join(visible(line) for line in str(text).split("\n"))


def visible(text: str) -> str:
    """`text` with every character of a HIDDEN category (an escape sequence's ESC, U+202E that reverses
    the text after it, U+2066 that isolates it, ...) written as its escape, `\\x1b`, `\\u202e`, as the
    console shows them: what reads on the page is what the text holds."""
    return "".join(_escape_code(c) if unicodedata.category(c) in HIDDEN else c for c in text)


def _escape_code(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _intraword(line: str, i: int) -> bool:
    return line[i] == "_" and 0 < i < len(line) - 1 and line[i - 1].isalnum() and line[i + 1].isalnum()


def to_html(markdown: str) -> str:
    """The report's markdown text (user text escaped, `**bold**` and `` `code` `` ours) as HTML."""
    hidden = _ESCAPED.sub(lambda m: chr(_PLACEHOLDER + ord(m[1])), markdown)
    text = html.escape(hidden)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    text = re.sub(r"`(.+?)`", r"<code>\1</code>", text)
    return re.sub(f"[{chr(_PLACEHOLDER)}-{chr(_PLACEHOLDER + 127)}]",
                  lambda m: html.escape(chr(ord(m[0]) - _PLACEHOLDER)), text)
