"""Fixtures shared by several test files."""

from __future__ import annotations

import os

# no test reaches a hub: a name that is no local path fails at once instead of retrying the network for
# minutes (read when huggingface_hub and datasets are first imported, so before anything imports them)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from gspo_bench.runtime.kernels import pin_kernels  # noqa: E402

pin_kernels()  # before any test computes: the kernels the command line pins (gspo_bench.runtime.kernels)

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from gspo_bench import cli as cli_module  # noqa: E402


@pytest.fixture()
def cli(monkeypatch):
    """The command line as a user runs it; the console wide enough that one message is one line."""
    monkeypatch.setattr(cli_module.console, "width", 10_000)
    return lambda *args: CliRunner().invoke(cli_module.app, [str(a) for a in args])


def _order_line(config) -> str | None:
    """How to repeat this session's test order (pytest-randomly's seed), or None in file order."""
    seed = getattr(config.option, "randomly_seed", None)
    if seed is None or not config.pluginmanager.hasplugin("randomly"):
        return None
    return f"test order: random; repeat it with `pytest --randomly-seed={seed}`"


def pytest_sessionstart(session):
    line = _order_line(session.config)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:  # shown even under -q (the plugin's own header is not)
        reporter.write_line(line)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    line = _order_line(config)
    if line:  # again at the end, beside the failures it explains
        terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def setting():
    """A tiny MoE moved off its old policy and a batch of uneven prompts and responses
    (tests.helpers.micro_batches): the micro-batch exactness tests' shared case."""
    from tests.helpers.micro_batches import moved_setting

    return moved_setting()


@pytest.fixture(scope="module")
def parts():
    """A tiny MoE, its tokenizer and a sort task (tests.helpers.phases): the training phases' shared case."""
    from tests.helpers.phases import tiny_parts

    return tiny_parts()
