"""Live tracking of a run in TensorBoard and/or Weights & Biases (optional extras).

    tracking: {tensorboard: true, wandb: {project: moe-rl, mode: offline}}

Every numeric column of a step's row is logged at its step (the same names as metrics.parquet:
`reward/mean`, `moe/drift_expert`, `clip/frac`, ...), evaluation scores as `eval/<task>`, and the
resolved config once, from rank 0 only. TensorBoard events go to `<run>/tensorboard/`, W&B files to
`<run>/wandb/`; the W&B run is named after the run folder (`<label>-s<seed>`), grouped by suite, and a
resumed run continues the same W&B run (its id comes from the folder) while TensorBoard drops the
events a crash left after the checkpoint (`purge_step`). metrics.parquet stays the record; these are views.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gspo_bench.config.schema import TrackingConfig

NOT_LOGGED = ("step", "seed", "replay")  # identity columns: the step is the x axis, the rest is in the config


class TrackingUnavailable(RuntimeError):
    """A configured tracker whose package is not installed."""


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of a row as floats (booleans as 0/1), identity columns left out."""
    out = {}
    for key, value in row.items():
        if key in NOT_LOGGED:
            continue
        if isinstance(value, bool | numbers.Real) or (hasattr(value, "dtype") and getattr(value, "ndim", None) == 0):
            out[key] = float(value)  # numpy scalars too (a 0-d array has ndim 0)
    return out


def _require(module: str, what: str) -> Any:  # the module, imported
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrackingUnavailable(f"tracking.{what} is on, but {what} is not installed: pip install "
                                  f"'gspo-bench[tracking]' (or pip install {what})") from None


class Tracker:
    """The configured trackers of one run; `log_row`, `log_eval`, `close`."""

    def __init__(self, cfg: TrackingConfig, run_dir: Path, group: str, config: dict[str, Any], resume_step: int = 0):
        self.tensorboard = self.wandb = None
        run_dir = Path(run_dir)
        if cfg.tensorboard:
            _require("tensorboard", "tensorboard")
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step + 1 if resume_step else None)
            self.tensorboard.add_text("config", "\n".join("    " + line for line in _yaml(config).splitlines()))
        if cfg.wandb is not None:
            wandb = _require("wandb", "wandb")
            run_id = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]
            self.wandb = wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, group=group, name=run_dir.name,
                                    id=run_id, resume="allow", dir=str(run_dir), config=config, mode=cfg.wandb.mode,
                                    reinit="create_new", settings=wandb.Settings(silent=True))

    def log_row(self, row: dict[str, Any]) -> None:
        step, values = int(row["step"]), scalars(row)
        if self.tensorboard is not None:
            for key, value in values.items():
                self.tensorboard.add_scalar(key, value, global_step=step)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in values.items() if not math.isnan(v)}, step=step)

    def log_eval(self, step: int, scores: dict[str, dict]) -> None:
        values = {f"eval/{task}": float(s["score"]) for task, s in scores.items()}
        if self.tensorboard is not None:
            for key, value in values.items():
                self.tensorboard.add_scalar(key, value, global_step=step)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def close(self, status: str = "done") -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None
        if self.wandb is not None:
            self.wandb.finish(exit_code=0 if status in ("done", "collapsed") else 1)
            self.wandb = None


def open_tracker(cfg: TrackingConfig | None, run_dir: Path, group: str, config: dict[str, Any], resume_step: int,
                 is_main: bool) -> Tracker | None:
    """The run's tracker (rank 0, when any tracker is configured), else None."""
    if not is_main or cfg is None or not (cfg.tensorboard or cfg.wandb is not None):
        return None
    return Tracker(cfg, run_dir, group, config, resume_step)


def check_available(cfg: TrackingConfig) -> list[str]:
    """Problems with the configured trackers on this machine (a package missing), before any compute."""
    problems = []
    for what, on in (("tensorboard", cfg.tensorboard), ("wandb", cfg.wandb is not None)):
        if on:
            try:
                _require(what, what)
            except TrackingUnavailable as err:
                problems.append(str(err))
    return problems


def _yaml(config: dict) -> str:
    import yaml

    return yaml.safe_dump(config, sort_keys=False)
