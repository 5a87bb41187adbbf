"""One run of a suite, resolved once: the record the planner fills (`gspo_bench.suite.runner.plan_runs`)
and hands down; `gspo_bench.train` reads it and never resolves a setting again.

A run is an objective entry x seed (at a sweep point) with its own suite (the point's, with the entry's
`set:` values). Resolved here, from the record alone: the learning rate, the seed of the warm start it
starts from, the code it runs (each plugin's and reward file's sha256 of the bytes this process
executed, taken when the record is made) and its resolved config (config.yaml), which a `--resume`
compares with the one the run recorded (`config_changes`: the rule of `gspo_bench.config.changes`).
Imports no torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gspo_bench.config.changes import settings_changes
from gspo_bench.config.schema import ObjectiveEntry, SuiteConfig


@dataclass(frozen=True)
class RunSpec:
    suite: SuiteConfig  # the run's own suite (a sweep gives each point its own; the entry's `set:` applied)
    entry: ObjectiveEntry  # labelled objective@point with a sweep
    seed: int
    run_dir: Path
    sweep: dict[str, Any] = field(default_factory=dict)  # swept values by short name ({} without a sweep)
    arm: str = ""  # the entry's label before the sweep point was added (default: the label)
    overrides: dict[str, Any] = field(default_factory=dict)  # `--set` values by dotted path, already in `suite`
    weights_suite: SuiteConfig | None = None  # the suite whose starting weights the run uses (the sweep
    # point's, without the entry's own `set:`, so every arm of a seed starts alike); None: `suite`
    init_weights: Path | None = None  # the folder of those weights (the runner fills it once they exist)
    suite_sha256: str | None = None  # of the suite file (OUT/<suite>/suite.yaml) the run was started with
    # resolved as the record is made, from the fields above and the code this process loaded for the suite:
    code: dict[str, str] = field(init=False)  # {plugin or reward file: sha256 of the bytes executed}
    config: str = field(init=False)  # the run's config.yaml (`resolved_config`)

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", code_hashes(self.suite))
        object.__setattr__(self, "config", resolved_config(self))

    @property
    def name(self) -> str:
        return f"{self.entry.run_label}-s{self.seed}"

    @property
    def start(self) -> SuiteConfig:
        """The suite that decides the run's starting weights."""
        return self.weights_suite if self.weights_suite is not None else self.suite

    @property
    def lr(self) -> float:
        """The run's learning rate: its entry's, else the suite's."""
        return self.entry.lr or self.suite.train.lr

    @property
    def warm_start_seed(self) -> int | None:
        """The seed of the warm start the run starts from (`WarmStartConfig.seed_for`); None for a real
        checkpoint (`model.path`)."""
        return None if self.suite.model.path is not None else self.suite.warm_start.seed_for(self.seed)

    def with_weights(self, init_weights: Path, suite_sha256: str | None = None) -> RunSpec:
        """This run, its starting weights prepared and its suite file written."""
        return dataclasses.replace(self, init_weights=init_weights, suite_sha256=suite_sha256)


def resolved_config(spec: RunSpec) -> str:
    """The run's config.yaml (`spec.config`, made with the record): its suite plus everything the run
    resolved: objective, replay, clip range, lr, seed, the sweep point it belongs to, the `--set`
    overrides it was given and its code's hashes."""
    entry = spec.entry
    run = {"label": entry.run_label, "arm": spec.arm or entry.run_label, "objective": entry.objective,
           "replay": entry.use_replay, "replay_from": entry.replay_source if entry.use_replay else None,
           "seed": spec.seed, "lr": spec.lr, **entry.clip_range(), "params": entry.params, "sweep": spec.sweep,
           "correction": entry.correction, "set": entry.set, "overrides": spec.overrides,
           **({"replay_weights": True} if entry.replays_weights else {}),
           **({"plugins": spec.code} if spec.code else {})}
    return yaml.safe_dump({"run": run, "suite": spec.suite.model_dump(mode="json")}, sort_keys=False)


def code_hashes(suite: SuiteConfig) -> dict[str, str]:
    """{plugin (installed or the suite's) or reward file: sha256 of the bytes this process executed}: the
    code the run runs (a file edited after it loaded is not), and a plugin or reward function edited since
    a run started is a change of the run's settings (config.yaml's `run.plugins`), refused on resume as an
    edited suite is."""
    from gspo_bench.config.plugins import function_sha256, plugins_loaded

    found = {plugin.name: plugin.sha256 for plugin in plugins_loaded(suite.plugins)}
    if suite.task.reward is not None:
        found[suite.task.reward.file] = function_sha256(suite.task.reward.file, suite.task.reward.name)
    return found


def code_edited(spec: RunSpec) -> str | None:
    """Why the code this process loaded for the run is not the code its record was made with (a plugin or
    reward file edited between planning and a worker opening the run), or None."""
    now, planned = code_hashes(spec.suite), spec.code
    edited = sorted(name for name in {*now, *planned} if now.get(name) != planned.get(name))
    if not edited:
        return None
    return (f"{', '.join(edited)} changed since the suite was planned (sha256 {planned.get(edited[0])} -> "
            f"{now.get(edited[0])}): the run would record code it did not plan; run the suite again")


def config_changes(run_dir: Path, spec: RunSpec) -> list[str]:
    """"field: recorded -> now" for every setting that changes the run's results where its recorded
    config.yaml and the one `spec` resolves to differ (`gspo_bench.config.changes`: the rule the report
    groups suites by); [] for a run that recorded none."""
    recorded = read_run_config(Path(run_dir))
    return [] if recorded is None else changes_since(recorded, spec)


def resume_changes(spec: RunSpec, run_dir: Path, allow_changed: bool) -> list[str]:
    """The settings changed since the run in `run_dir` started (`config_changes`), checked before any weights
    load: ValueError listing them unless `allow_changed`."""
    changes = config_changes(run_dir, spec)
    if changes and not allow_changed:
        raise ValueError(f"{run_dir}: the suite changed since this run started ({'; '.join(changes)}); resume it "
                         "unchanged, or pass --allow-changed to continue with the new settings")
    return changes


def changes_since(recorded: dict[str, Any], spec: RunSpec) -> list[str]:
    """"field: recorded -> now" between a run's recorded config.yaml (`read_run_config`) and `spec`'s."""
    return settings_changes(recorded, yaml.safe_load(spec.config))


def optimizer_layout_change(recorded: dict[str, Any], run: RunSpec) -> str | None:
    """Why the run's checkpointed optimizer state cannot be loaded under its settings now, even with
    --allow-changed, or None: train.router_lr_scale moved to or from 1 changes the optimizer's param
    groups (one group at 1, the routers a group of their own otherwise: gspo_bench.train.optim), and
    the resume failed on it with KeyError 'param_groups.0.name' (after suite.yaml was rewritten). `recorded`:
    the run's config.yaml."""
    train = (recorded.get("suite") or {}).get("train") or {}
    before, now = float(train.get("router_lr_scale", 1.0)), float(run.suite.train.router_lr_scale)
    if (before == 1.0) == (now == 1.0):
        return None
    return (f"train.router_lr_scale {before:g} -> {now:g} changes the optimizer's parameter groups (the routers are a "
            "group of their own unless the scale is 1), so the run's checkpointed optimizer state cannot be loaded: "
            f"resume it at router_lr_scale {before:g}, or run it again in a new folder")


def read_run_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's recorded config.yaml (None where there is none); ValueError naming the file where it is
    damaged: not YAML, not a mapping, or a `run.seed` that is not an integer."""
    from gspo_bench.config.yamlread import read_yaml
    from gspo_bench.rundir.folder import config_problem
    from gspo_bench.rundir.renames import current_run_keys

    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    problem: str | None
    try:
        config = read_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except ValueError as err:  # read_yaml's one line: "not valid YAML: ..." or its alias bound
        problem = str(err)
    else:
        problem = config_problem(config)
        if problem is None:
            return current_run_keys(config or {})
    raise ValueError(f"{path} is damaged ({problem}): move the run folder away and run it again")
