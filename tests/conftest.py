"""Fixtures shared by several test files."""

from __future__ import annotations

from gspo_bench.runtime.kernels import pin_kernels

pin_kernels()  # before any test computes: the kernels the command line pins (gspo_bench.runtime.kernels)

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from gspo_bench import cli as cli_module  # noqa: E402


@pytest.fixture()
def cli(monkeypatch):
    """The command line as a user runs it; the console wide enough that one message is one line."""
    monkeypatch.setattr(cli_module.console, "width", 10_000)
    return lambda *args: CliRunner().invoke(cli_module.app, [str(a) for a in args])
