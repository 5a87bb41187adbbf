"""Synthetic runs for the stability map: sweep points, router learning-rate scales, falling rewards."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers.results import make_run


def set_router_lr_scale(run, scale: float) -> None:
    """The run trained at router learning-rate scale `scale`, as an arm's own setting (`set:`) records it:
    the other runs of its folder stay one suite with it."""
    path = run.path / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["suite"]["train"] = {**(config["suite"].get("train") or {}), "router_lr_scale": scale}
    config["run"]["set"] = {**(config["run"].get("set") or {}), "train.router_lr_scale": scale}
    path.write_text(yaml.safe_dump(config))


def swept_run(root: Path, label: str, seed: int, sweep: dict, columns: dict | None = None, **kwargs):
    """A run at a sweep point, with the `sweep/<name>` columns a real run writes in every row."""
    columns = {**{f"sweep/{k}": v for k, v in sweep.items()}, **(columns or {})}
    return make_run(root, label, seed, sweep=sweep, columns=columns, **kwargs)


FALLING = [0.6 - 0.02 * s for s in range(1, 21)]  # training reward falling for 20 steps

