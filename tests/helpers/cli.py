"""A suite file on disk, and the one error line the command line ends with."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_suite(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    text = result.output.strip()
    assert "Traceback" not in text and text.startswith("error:") and "\n" not in text, text
    return text

