"""The files of a run, damaged or left half-written: checkpoints need their checksums (sha256 compared)
unless they predate them, `eval` checks them, half-written checkpoints go when a run folder is
opened, a missing metrics or layers file stops a resume, a damaged status.json is named, folders are
shared as the umask says, and what reaches the console is printable."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch
import yaml

from gspo_bench.rundir.folder import RunDir
from tests.helpers.cli import one_line_error
from tests.helpers.interrupts import interrupted, quick_suite
from tests.helpers.runs import assert_same_metrics, metrics, run_suite


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart-cache")




def stopped(cache: Path, out: Path, at_step: int, **changes) -> tuple[Path, Path]:
    """`interrupted` (a run whose weights change, stopped after its step-`at_step` row as a kill -9
    leaves it), with its suite written to a file: (suite file, run folder)."""
    data, run_dir = interrupted(cache, out, at_step, **changes)
    suite = out.parent / f"{out.name}.yaml"
    suite.write_text(yaml.safe_dump(data))
    return suite, run_dir


def flip_a_byte(path: Path) -> None:
    """One byte changed in the middle of the file; the size stays."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def resume_fails(cli, suite: Path, out: Path, run_dir: Path, *fragments: str) -> str:
    """`run --resume` ends the run failed (exit 1) and says why, on the console and in status.json."""
    result = cli("run", suite, "--out", out, "--resume")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    recorded = RunDir(run_dir).read_status()
    assert recorded["status"] == "failed", recorded
    for fragment in fragments:
        assert fragment in recorded["message"] and fragment in result.output, (fragment, recorded, result.output)
    return recorded["message"]


# ------------------------------------------------------------------ checksums

def test_a_checkpoint_without_its_checksums_is_damaged(tmp_path, cache, cli):
    suite, run_dir = stopped(cache, tmp_path / "out", at_step=2)
    (run_dir / "checkpoint" / "checksums.json").unlink()
    flip_a_byte(run_dir / "checkpoint" / "model" / "model.safetensors")
    resume_fails(cli, suite, tmp_path / "out", run_dir, f"{run_dir / 'checkpoint' / 'checksums.json'} is missing")


def test_a_flipped_byte_is_caught_by_its_sha256(tmp_path, cache, cli):
    suite, run_dir = stopped(cache, tmp_path / "out", at_step=2)
    flip_a_byte(run_dir / "checkpoint" / "model" / "model.safetensors")
    resume_fails(cli, suite, tmp_path / "out", run_dir,
                 f"{run_dir / 'checkpoint' / 'model' / 'model.safetensors'} differs from what was written (sha256)")


def test_a_failed_resume_of_a_stopped_run_no_longer_says_resume_continues_it(tmp_path, cache, cli):
    """A run stopped by SIGTERM says `--resume` continues it; its resume then fails on a damaged
    checkpoint: status.json says why it was not resumed, not the stop's advice."""
    import signal

    from gspo_bench.rundir.failure import failure_message
    from gspo_bench.runtime.stopping import Stopped

    suite, run_dir = stopped(cache, tmp_path / "out", at_step=2)
    RunDir(run_dir).write_status("failed", failure_message(Stopped(signal.SIGTERM), run_dir), step=2)
    assert "--resume` continues it" in RunDir(run_dir).read_status()["message"]
    flip_a_byte(run_dir / "checkpoint" / "model" / "model.safetensors")
    message = resume_fails(cli, suite, tmp_path / "out", run_dir, "differs from what was written (sha256)")
    assert message.startswith("not resumed: ") and "continues it" not in message


def test_a_checkpoint_from_before_checksums_is_resumed_as_it_is(tmp_path, cache):
    """A checkpoint of a version that wrote no checksums is told by its state.pt, which holds no
    `checksummed` mark; it resumes to the uninterrupted run's metrics."""
    from gspo_bench.train.checkpoint import CHECKSUMMED

    data = quick_suite(cache)
    run_suite(data, tmp_path / "whole")
    _, run_dir = stopped(cache, tmp_path / "out", at_step=2)
    state = torch.load(run_dir / "checkpoint" / "state.pt", weights_only=False)
    assert state.pop(CHECKSUMMED) is True
    torch.save(state, run_dir / "checkpoint" / "state.pt")
    (run_dir / "checkpoint" / "checksums.json").unlink()
    assert run_suite(data, tmp_path / "out", resume=True)["gspo-s0"]["status"] == "done"
    assert_same_metrics(metrics(tmp_path / "whole", "tiny", "gspo-s0"), metrics(tmp_path / "out", "tiny", "gspo-s0"))


@pytest.mark.parametrize("damage", ["flipped", "no-checksums"])
def test_eval_refuses_a_damaged_checkpoint_naming_the_file(tmp_path, cache, cli, damage):
    _, run_dir = stopped(cache, tmp_path / "out", at_step=2)
    checkpoint = run_dir / "checkpoint"
    if damage == "flipped":
        flip_a_byte(checkpoint / "model" / "model.safetensors")
        named = f"{checkpoint / 'model' / 'model.safetensors'} differs from what was written (sha256)"
    else:
        (checkpoint / "checksums.json").unlink()
        named = f"{checkpoint / 'checksums.json'} is missing"
    output = one_line_error(cli("eval", run_dir, "--tasks", "sort", "--out", tmp_path / "eval"))
    assert named in output and "checkpoint is damaged" in output


def test_eval_names_a_model_directory_that_does_not_load(tmp_path, cli):
    from gspo_bench.models import build_char_tokenizer, build_tiny_moe, save_model

    model = tmp_path / "model"
    save_model(build_tiny_moe(num_layers=1), build_char_tokenizer(), model)
    with open(model / "model.safetensors", "r+b") as handle:
        handle.truncate(100)
    output = one_line_error(cli("eval", model, "--tasks", "sort", "--out", tmp_path / "eval"))
    assert f"{model}: cannot load the model" in output


# ------------------------------------------------------------------ half-written checkpoints, missing tables

def test_a_half_written_first_checkpoint_is_removed_on_resume_and_by_a_new_run(tmp_path, cache, cli):
    """A run killed while writing its first checkpoint leaves `.checkpoint-new-*` and no checkpoint:
    resuming it, or starting a run in that folder, removes it."""
    suite, run_dir = stopped(cache, tmp_path / "out", at_step=1)
    assert not (run_dir / "checkpoint").exists()
    (run_dir / ".checkpoint-new-x1y2" / "model").mkdir(parents=True)
    (run_dir / ".checkpoint-new-x1y2" / "model" / "model.safetensors").write_bytes(b"\0" * 1000)
    (run_dir / ".metrics.parquet.k9_2xq1a").write_bytes(b"PAR1")  # a table a kill -9 left half-written
    result = cli("run", suite, "--out", tmp_path / "out", "--resume")
    assert result.exit_code == 0, result.output
    assert not list(run_dir.glob(".checkpoint-new-*")) and RunDir(run_dir).read_status()["status"] == "done"
    assert not (run_dir / ".metrics.parquet.k9_2xq1a").exists()
    fresh = tmp_path / "fresh" / "tiny" / "gspo-s0"
    (fresh / ".checkpoint-new-a1b2").mkdir(parents=True)
    result = cli("run", suite, "--out", tmp_path / "fresh")
    assert result.exit_code == 0, result.output
    assert not list(fresh.glob(".checkpoint-new-*")) and (fresh / "checkpoint").is_dir()


def test_the_temporary_files_of_atomic_writes_a_kill_left_are_removed_and_nothing_else(tmp_path):
    """An atomic write goes to `.NAME.XXXXXXXX` beside NAME, then is renamed: a kill -9 between the two
    leaves the temporary file for good, unless opening the run folder removes it (once only
    `.checkpoint-new-*` went). A user's own dot-file, and the run's files, stay."""
    from gspo_bench.rundir.folder import atomic_write_text
    from gspo_bench.train.checkpoint import remove_half_written

    run = RunDir(tmp_path / "run")
    run.write_status("failed", step=1)
    atomic_write_text(run.path / "config.yaml", "run: {}\n")
    left = [".metrics.parquet.k9_2xq1a", ".layers.parquet.abcdefgh", ".status.json.x1", ".config.yaml.y2",
            ".provenance.json.z3", ".eval.parquet.w4", "..lock.v5", ".error.log.u6"]
    for name in left:
        (run.path / name).write_bytes(b"half")
    (run.path / ".notes").write_text("mine")
    remove_half_written(run.path)
    assert sorted(p.name for p in run.path.iterdir()) == [".notes", "config.yaml", "status.json"]


@pytest.mark.parametrize("table", ["metrics.parquet", "layers.parquet"])
def test_a_resume_without_its_metrics_or_layers_file_is_refused_naming_it(tmp_path, cache, cli, table):
    suite, run_dir = stopped(cache, tmp_path / "out", at_step=2)
    (run_dir / table).unlink()
    message = resume_fails(cli, suite, tmp_path / "out", run_dir, f"{run_dir / table} is missing")
    assert "steps 1..1" in message and "cannot be rebuilt" in message


def test_a_resume_with_steps_missing_from_metrics_is_refused(tmp_path, cache, cli):
    suite, run_dir = stopped(cache, tmp_path / "out", at_step=3, budget={"kind": "steps", "value": 4})
    rows = RunDir(run_dir).read_rows("metrics.parquet")
    RunDir(run_dir).write_rows("metrics.parquet", [r for r in rows if r["step"] != 1])
    resume_fails(cli, suite, tmp_path / "out", run_dir, f"{run_dir / 'metrics.parquet'} holds steps [2, 3]",
                 "steps 1..2")


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00binary"], ids=["text", "binary"])
def test_a_damaged_status_json_is_named(tmp_path, cache, cli, content):
    suite, run_dir = stopped(cache, tmp_path / "out", at_step=2)
    (run_dir / "status.json").write_bytes(content)
    output = one_line_error(cli("run", suite, "--out", tmp_path / "out", "--resume"))
    assert f"{run_dir / 'status.json'} is damaged" in output


@pytest.mark.parametrize(("name", "content", "why"), [
    ("status.json", "{}", "status.json is damaged (no status"),  # once KeyError: 'status'
    ("status.json", '{"status": "paused"}', "status.json is damaged (unknown status 'paused'"),  # once skipped
    ("config.yaml", "run: [unclosed", "config.yaml is damaged (not valid YAML"),
    ("config.yaml", "- 1\n", "config.yaml is damaged (expected a mapping at the top, found list"),
    ("config.yaml", "run: {seed: 0.5}\nsuite: {}\n", "config.yaml is damaged (run.seed: expected an integer, got 0.5"),
])
def test_run_names_a_damaged_run_file_before_any_compute(tmp_path, cli, name, content, why):
    """`run --resume` over a run folder whose status.json or config.yaml is damaged: one line naming the
    file, before the warm start (no cache made)."""
    from tests.helpers.cli import write_suite
    from tests.helpers.runs import tiny_suite

    suite = write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}]))
    run = RunDir(tmp_path / "out" / "tiny" / "grpo-s0")
    run.write_status("failed", "stopped", step=1)
    run.write_text("config.yaml", "run: {seed: 0}\nsuite: {}\n")
    (run.path / name).write_text(content)
    error = one_line_error(cli("run", suite, "--out", tmp_path / "out", "--resume"))
    assert f"{run.path}/{why}" in error and not (tmp_path / "cache").exists()


def test_a_resume_without_config_yaml_is_refused_unless_allow_changed(tmp_path, cli):
    """A stopped run whose config.yaml was deleted: the edit check of --resume has nothing to compare with,
    so the resume is refused (naming the file) before any compute; --allow-changed takes the risk."""
    from gspo_bench.config import parse_suite
    from gspo_bench.suite.folder_checks import check_outputs
    from gspo_bench.suite.runner import plan_runs
    from tests.helpers.cli import write_suite
    from tests.helpers.runs import tiny_suite

    data = tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}])
    runs = plan_runs(parse_suite(data), tmp_path / "out")
    RunDir(runs[0].run_dir).write_status("failed", "stopped", step=1)
    with pytest.raises(ValueError, match="config.yaml is missing"):
        check_outputs(runs, resume=True)
    assert check_outputs(runs, resume=True, allow_changed=True) == runs
    error = one_line_error(cli("run", write_suite(tmp_path / "s.yaml", data), "--out", tmp_path / "out", "--resume"))
    assert f"{runs[0].run_dir / 'config.yaml'} is missing" in error and not (tmp_path / "cache").exists()


# ------------------------------------------------------------------ permissions

def test_checkpoints_and_the_warm_start_cache_are_shared_as_the_umask_says(tmp_path):
    previous = os.umask(0o002)
    try:
        run_suite(quick_suite(tmp_path / "cache", budget={"kind": "steps", "value": 1},
                              warm_start={"band": [0.0, 1.0]}), tmp_path / "out")
    finally:
        os.umask(previous)
    [entry] = [p for p in (tmp_path / "cache").iterdir() if p.name.startswith("warmstart-")]
    checkpoint = tmp_path / "out" / "tiny" / "gspo-s0" / "checkpoint"
    for folder in (checkpoint, entry):
        paths = [folder, *folder.rglob("*")]
        modes = {p.relative_to(folder.parent).as_posix(): oct(stat.S_IMODE(p.stat().st_mode)) for p in paths}
        assert {m for p, m in modes.items() if (folder.parent / p).is_dir()} == {"0o775"}, modes
        assert {m for p, m in modes.items() if (folder.parent / p).is_file()} == {"0o664"}, modes


# ------------------------------------------------------------------ the console

CONTROL = "\x1b[2J\x1b]0;owned\x07x\u202e\x9b"


def test_control_characters_of_labels_never_reach_the_console(tmp_path, cli):
    data = {"name": "tiny", "task": {"name": "sort", "params": {"max_len": 3}}, "warm_start": {"enabled": False,
            "cache_dir": str(tmp_path / "cache")}, "model": {"num_layers": 1, "hidden_size": 32, "expert_hidden": 32,
            "num_experts": 4}, "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
            "train": {"threads": 1}, "budget": {"kind": "steps", "value": 1},
            "objectives": [{"name": "grpo", "label": f"a{CONTROL}"}]}
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump(data))
    outputs = [cli("validate", suite).output, cli("run", suite, "--out", tmp_path / "out").output]
    suite.write_text(yaml.safe_dump({**data, "objectives": data["objectives"] * 2}))
    outputs.append(one_line_error(cli("validate", suite)))
    for output in outputs:
        assert not {"\x1b", "\x07", "\u202e", "\x9b"} & set(output), repr(output)
        assert "a\\x1b[2J\\x1b]0;owned\\x07x\\u202e\\x9b" in output, output
    assert json.loads((tmp_path / "out" / "tiny" / "a%1B%5B2J%1B%5D0%3Bowned%07x%E2%80%AE%C2%9B-s0" / "status.json")
                      .read_text())["status"] == "done"
