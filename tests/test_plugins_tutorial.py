"""docs/plugins.md, executed: its files written as the tutorial shows them and its `$ gspo-bench ...`
commands run in order in an empty folder (the tutorial's own tiny suite: 3 arms x 1 seed x 3 steps)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.config.plugins import unload_plugins

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"


def tutorial_files(text: str) -> dict[str, str]:
    """{file name: content} of every "Save as `NAME`:" block."""
    return dict(re.findall(r"^Save as `([^`]+)`:\n\n```\w+\n(.*?)```", text, re.S | re.M))


def tutorial_commands(text: str) -> list[list[str]]:
    return [shlex.split(line)[1:] for line in re.findall(r"^\$ (gspo-bench .+)$", text, re.M)]


def test_the_tutorial_names_its_files_and_commands():
    text = TUTORIAL.read_text()
    assert set(tutorial_files(text)) == {"xpo.py", "xpo.yaml"}
    assert [c[0] for c in tutorial_commands(text)] == ["check", "validate", "run", "report"]


@pytest.mark.slow
def test_the_tutorial_runs_from_an_empty_folder_to_a_report(tmp_path, monkeypatch):
    """Needs training: the tutorial's own run (warm start and 3 runs of 3 steps, two at a time) and report."""
    text = TUTORIAL.read_text()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GSPO_BENCH_CACHE", str(tmp_path / "cache"))
    for name, content in tutorial_files(text).items():
        Path(name).write_text(content)
    unload_plugins()
    try:
        for command in tutorial_commands(text):
            result = CliRunner().invoke(app, command)
            assert result.exit_code == 0, (command, result.output)
    finally:
        unload_plugins()
    report = (tmp_path / "runs" / "xpo" / "report" / "report.md").read_text()
    assert re.search(r"^\| grpo_seqkl +\| +0 \| xpo\.py +\|", report, re.M), report[-2000:]
