"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gspo_bench import cli as cli_module


@pytest.fixture()
def cli(monkeypatch):
    """The command line as a user runs it; the console wide enough that one message is one line."""
    monkeypatch.setattr(cli_module.console, "width", 10_000)
    return lambda *args: CliRunner().invoke(cli_module.app, [str(a) for a in args])
