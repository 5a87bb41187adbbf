"""Checksums of a folder of saved files (a checkpoint, a warm-start cache entry): the size and
sha256 of every file, written beside them as `checksums.json` once they are all written, and
verified before the folder is used, so a truncated or altered file is named instead of failing
deep inside a loader (or, worse, loading)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CHECKSUMS = "checksums.json"


def _digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_checksums(folder: Path) -> None:
    """`folder/checksums.json`: size and sha256 of every file under `folder` (write it last)."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS)
    body = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _digest(p)} for p in files}
    (folder / CHECKSUMS).write_text(json.dumps(body, indent=1))


def damage(folder: Path) -> str | None:
    """None if every file `folder/checksums.json` lists has its size and sha256; otherwise one line
    naming what is wrong (the checksums file itself missing or unreadable, a file missing, cut
    short or altered)."""
    folder = Path(folder)
    try:
        listed = json.loads((folder / CHECKSUMS).read_text())
    except FileNotFoundError:
        return f"{folder / CHECKSUMS} is missing"
    except (OSError, ValueError) as err:
        return f"{folder / CHECKSUMS} is unreadable ({err})"
    for name, expected in listed.items():
        path = folder / name
        if not path.is_file():
            return f"{path} is missing"
        size = path.stat().st_size
        if size != expected["size"]:
            return f"{path} has {size} bytes, {expected['size']} were written"
        if _digest(path) != expected["sha256"]:
            return f"{path} differs from what was written (sha256)"
    return None
