"""The two JSON records of a run folder, typed once: `status.json` (how far the run got and how it
ended) and `provenance.json` (what it ran with, where, from which starting weights). Training writes
them (`gspo_bench.train`: `RunDir.write_status`, `provenance`), the suite and the analysis read them.

A record read from disk may come from an older release, which wrote fewer fields: every field a
reader cannot count on is `NotRequired`, and readers take it with `.get`. mypy refuses a writer that
sets a field not declared here, or a value of another type (a `.get` of an undeclared name reads as
`object`, which it does not refuse); tests/test_run_records.py holds what the writers write and what
the committed results hold to the declared fields.
"""

# (no `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations)
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict, cast

SCHEMA_VERSION = 1
Status = Literal["running", "done", "collapsed", "failed"]
STATUSES: tuple[Status, ...] = ("running", "done", "collapsed", "failed")


class StatusRecord(TypedDict):
    """status.json: the run's state, rewritten at its start, at each resume and at its end."""

    schema_version: NotRequired[int]  # SCHEMA_VERSION of the release that wrote the run
    status: Status
    message: NotRequired[str]  # why a run failed or collapsed ("" otherwise)
    updated: NotRequired[str]  # when (ISO 8601, UTC)
    step: NotRequired[int]  # the last step done
    cum_flops: NotRequired[float]  # a finished run's compute (done only)
    cum_tokens: NotRequired[float]


class GitState(TypedDict):
    commit: str | None  # None outside a git checkout
    dirty: bool | None  # tracked files changed since the commit


class WarmStartRecord(TypedDict):
    """The run's starting weights: the warm start's seed (None for `model.path`) and folder, and from its
    warmstart.json (where it has one) its cache key, accuracy and steps."""

    seed: int | None
    path: str
    key: NotRequired[str]
    accuracy: NotRequired[float]
    steps: NotRequired[int]
    in_band: NotRequired[bool]


class ResumeRecord(TypedDict):
    """One `--resume` of the run."""

    at_step: int
    time: str
    changed: list[str]  # the settings changed (--allow-changed: gspo_bench.config.changes)
    overrides: dict[str, Any]  # its `--set` values by dotted path
    kernels: dict[str, Any]  # gspo_bench.runtime.kernels.kernel_state at the resume
    suite_sha256: str | None


class PluginRecord(TypedDict):
    """One plugin a run loaded (gspo_bench.config.plugins): its name as the suite gives it, the file or
    module it came from, the file's sha256 and what it registered (`kind:name` each)."""

    name: str
    path: str
    sha256: str
    registered: list[str]


class TaskBaselineRecord(TypedDict):
    """The chance baseline of a run's task (gspo_bench.tasks.task_baseline) as the run computed it: the
    mean and per-response standard deviation of the reward of `policy` over `samples` problems."""

    mean: float
    std: float
    samples: int
    policy: str


class ProvenanceRecord(TypedDict, total=False):
    """provenance.json: what the run was computed with and where; written at its start (the first
    nine fields by `gspo_bench.rundir.folder.provenance`), at each resume and at its end. Older
    releases wrote the first nine only."""

    schema_version: int
    git: GitState
    packages: dict[str, str | None]  # distribution -> version (None: not installed)
    python: str
    platform: str
    device: str
    hostname: str
    start: str
    end: str | None  # None while the run runs
    overrides: dict[str, Any]  # `--set` values by dotted path at the start
    kernels: dict[str, Any]  # gspo_bench.runtime.kernels.kernel_state at the start
    suite_sha256: str | None  # of the suite file the run started with
    warm_start: WarmStartRecord
    resumed: list[ResumeRecord]
    plugins: list[PluginRecord]  # the installed and the suite's plugins (none before plugins existed)
    task_baseline: TaskBaselineRecord | None  # of the run's task (None: it declares none; absent: older runs)


def status_problem(body: Mapping[str, object]) -> str | None:
    """What is wrong with status.json's record `body` (None where nothing is): no `status`, or one
    that is not in STATUSES."""
    if "status" not in body:
        return f"no status (one of {', '.join(STATUSES)})"
    if body["status"] not in STATUSES:
        return f"unknown status {body['status']!r} (one of {', '.join(STATUSES)})"
    return None


def as_status(body: dict[str, Any]) -> StatusRecord:
    """`body` (status.json's object, as read) as the record, once `status_problem` found nothing: its
    other fields are read as written."""
    problem = status_problem(body)
    if problem is not None:
        raise ValueError(problem)
    return cast(StatusRecord, body)


def as_provenance(body: dict[str, Any]) -> ProvenanceRecord:
    """`body` (provenance.json's object, as read) as the record: every field may be missing (an older
    release), each is read as written."""
    return cast(ProvenanceRecord, body)


def status_record(status: str, message: str, updated: str, step: int, **totals: float) -> StatusRecord:
    """The status.json a run writes; `totals`: a finished run's `cum_flops` and `cum_tokens`."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}")
    unknown = set(totals) - {"cum_flops", "cum_tokens"}
    if unknown:
        raise ValueError(f"status.json has no field {', '.join(sorted(unknown))} (gspo_bench.rundir.records.StatusRecord)")
    return cast(StatusRecord, {"schema_version": SCHEMA_VERSION, "status": status, "message": message,
                               "updated": updated, "step": step, **totals})
