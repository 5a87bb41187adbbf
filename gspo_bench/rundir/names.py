"""Folder names from labels, safe by construction: the one rule for every name that becomes a path.

A run's folder is `OUT/<suite>/<label>-s<seed>`; a label holds whatever the suite's values hold (a
swept system prompt can be `../../x`, a path, a sentence). `folder_name` turns any text into one path
component:

- letters, digits and `_ . , = @ + -` stay as they are (so `grpo@lr=0.0001` is its own name);
- every other character, `%` itself, and a `.` that starts the name or touches another `.` are
  written as `%XX` (the bytes of their UTF-8 encoding): no separator, no `..`, no hidden file;
- a name longer than MAX_NAME characters is cut and ends in `~` and a hash of the whole text.

Escaping is reversible and `~` is always escaped in an uncut name, so two different texts never get
the same name (up to the 64-bit hash of cut ones). A suite name must already be a folder name.
"""

from __future__ import annotations

import hashlib
import string

KEPT = frozenset(string.ascii_letters + string.digits + "_.,=@+-")
MAX_NAME = 120  # characters of a label's part of a folder name (file systems allow 255 bytes)
HASH_CHARS = 16


def _escape(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))


def folder_name(text: str) -> str:
    """`text` as one safe path component (see the module docstring)."""
    out = []
    for i, char in enumerate(text):
        dots = char == "." and (i == 0 or text[i - 1] == "." or text[i + 1:i + 2] == ".")
        out.append(_escape(char) if char not in KEPT or dots else char)
    name = "".join(out)
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    head = name[:MAX_NAME - HASH_CHARS - 1]
    head = head[:head.rfind("%")] if "%" in head[-2:] else head  # never half of an escape
    return f"{head}~{digest}"


def run_folder_name(label: str, seed: int) -> str:
    """The folder of one run: `<label>-s<seed>`, the label made safe."""
    return f"{folder_name(label)}-s{int(seed)}"


def is_folder_name(text: str) -> bool:
    """True when `text` is its own folder name (nothing to escape, not too long, not empty)."""
    return bool(text) and folder_name(text) == text
