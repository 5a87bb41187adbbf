"""Names a run folder's config.yaml used in older releases, and today's: a folder written before a
rename still loads in the report and still resumes (its recorded settings compare equal to today's)."""

from __future__ import annotations

from typing import Any

# `run` section of config.yaml: old key -> today's key
RUN_KEYS = {"algorithm": "arm"}  # the entry's label without the sweep point (the arm), so named by older releases


def current_run_keys(config: dict[str, Any]) -> dict[str, Any]:
    """`config` (config.yaml as read) with its `run` section's old key names mapped to today's; a key
    recorded under both names keeps today's value."""
    run = config.get("run")
    if not isinstance(run, dict) or not RUN_KEYS.keys() & run.keys():
        return config
    renamed = {RUN_KEYS.get(key, key): value for key, value in run.items() if key in RUN_KEYS}
    kept = {key: value for key, value in run.items() if key not in RUN_KEYS}
    return {**config, "run": {**renamed, **kept}}
