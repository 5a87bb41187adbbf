"""The metrics columns that depend on wall-clock time (differ between equal runs side by side)."""

from __future__ import annotations

from gspo_bench.rundir.folder import TIMING_COLUMNS

TIME_COLUMNS = list(TIMING_COLUMNS)

