"""Shared test builders, moved from tests/test_launch.py."""

from __future__ import annotations

from gspo_bench.rundir.folder import TIMING_COLUMNS

TIME_COLUMNS = list(TIMING_COLUMNS)

