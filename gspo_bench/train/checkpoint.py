"""Checkpoints of a run: the model in Hugging Face format and the optimizer and loop state, written
aside with their checksums, read back, and only then swapped in, so a crash never leaves a
half-written checkpoint as the latest one; the checksums are verified again before a resume (and
by `gspo-bench eval`). A checkpoint without checksums.json is damaged, unless it predates checksums:
every checkpoint written since holds the CHECKSUMMED mark in its state.pt, so one without that mark
(and without checksums.json) was written before them and is used as it is. What a killed process
left half-written (`.checkpoint-new-*`) is removed when the run folder is opened again. A run resumes
from its last checkpoint (`restore`): the loop state, its tables checked, the optimizer, and provenance."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from gspo_bench.config.run import RunSpec
from gspo_bench.models.families import hf_model
from gspo_bench.rundir.checksums import CHECKSUMS, damage, write_checksums
from gspo_bench.rundir.folder import RunDir, atomic_leftovers, now, provenance, remove_entry, share
from gspo_bench.rundir.records import ProvenanceRecord
from gspo_bench.runtime.distributed import World
from gspo_bench.runtime.kernels import kernel_state
from gspo_bench.train.optim import set_lr
from gspo_bench.train.policy import Policy
from gspo_bench.train.state import RunState

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

CHECKSUMMED = "checksummed"  # a key of state.pt: this checkpoint was written with its checksums.json
NEW_PREFIX = ".checkpoint-new-"  # a checkpoint being written (renamed to checkpoint/ once it reads back right)


class CheckpointError(RuntimeError):
    """The run's checkpoint is damaged and no good one is left to resume from."""


def find_checkpoint(run_dir: Path) -> Path | None:
    """The latest checkpoint of a run (also one left mid-swap by a crash) that `checkpoint_damage`
    passes, or None if the run has none. A damaged one is passed over for the one before it where a
    crash left it; with none, CheckpointError names the damaged file."""
    run_dir = Path(run_dir)
    damaged = []
    for name in ("checkpoint", ".checkpoint-old"):
        path = run_dir / name
        if not path.exists():
            continue
        problem = checkpoint_damage(path)
        if problem is None:
            return path
        damaged.append(problem)
    if damaged:
        raise CheckpointError(f"{run_dir}: its checkpoint is damaged ({damaged[0]}) and no older one is kept; a "
                              "checkpoint cannot be rebuilt: run it again in a new folder")
    return None


def checkpoint_damage(path: Path) -> str | None:
    """None if the checkpoint `path` may be used: every file as its checksums.json lists it (size and
    sha256), or, without checksums.json, a complete checkpoint of before checksums (its state.pt loads
    and holds no CHECKSUMMED mark). Otherwise one line naming what is wrong."""
    if (path / CHECKSUMS).is_file():
        return damage(path)
    missing = f"{path / CHECKSUMS} is missing"
    if not ((path / "state.pt").is_file() and (path / "model" / "config.json").is_file()):
        return f"{missing} and the checkpoint is incomplete (state.pt, model/config.json)"
    try:  # mmap: the scalars are read, the optimizer's tensors are not
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=False, mmap=True)
    except Exception as err:  # any way a damaged file fails to load is damage
        return f"{missing} and {path / 'state.pt'} does not load ({type(err).__name__})"
    return missing if not isinstance(state, dict) or state.get(CHECKSUMMED) else None


def remove_half_written(run_dir: Path) -> None:
    """Remove the checkpoints and the temporary files of atomic writes (`atomic_leftovers`) a killed
    process left half-written in `run_dir` (call it holding the run folder's lock: no other process
    writes one then)."""
    for stale in Path(run_dir).glob(f"{NEW_PREFIX}*"):
        remove_entry(stale)
    for leftover in atomic_leftovers(Path(run_dir)):
        leftover.unlink(missing_ok=True)


def save_checkpoint(run_dir: Path, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                    optimizer: torch.optim.Optimizer, world: World = World(), **scalars: Any) -> None:
    """Write `run_dir/checkpoint/` (model/ in Hugging Face format + state.pt) by building it aside
    and swapping it in. The optimizer state is a full state dict keyed by parameter name, the same
    whether one process or FSDP2 ranks wrote it; under FSDP2 every rank takes part in gathering it
    and rank 0 writes."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # the model state first: under FSDP2 the optimizer state dict needs what gathering it sets up
    model_state = get_model_state_dict(model, options=options) if world.distributed else None
    optim_state = get_optimizer_state_dict(model, optimizer, options=options)
    if not world.is_main:
        return
    run_dir = Path(run_dir)
    tmp = Path(tempfile.mkdtemp(prefix=NEW_PREFIX, dir=run_dir))
    try:
        hf_model(model, "a checkpoint").save_pretrained(tmp / "model", state_dict=model_state)
        tokenizer.save_pretrained(tmp / "model")
        torch.save({"optimizer": optim_state, **scalars, CHECKSUMMED: True}, tmp / "state.pt")
        write_checksums(tmp)
        problem = damage(tmp)  # read back before it replaces the previous checkpoint
        if problem is not None:
            raise OSError(f"a new checkpoint of {run_dir} reads back wrong ({problem}); the previous one is kept")
        share(tmp)  # mkdtemp's folder is private (0700): the run folder's others are not
        final, old = run_dir / "checkpoint", run_dir / ".checkpoint-old"
        # a link (checkpoint/ moved to another disk) is unlinked, never followed: rmtree refused it
        # silently, and the next swap then renamed a folder onto the link (NotADirectoryError) at every
        # later checkpoint
        remove_entry(old)
        if final.exists() or final.is_symlink():
            final.rename(old)
        tmp.rename(final)
        remove_entry(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_checkpoint_state(checkpoint: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                          device: torch.device) -> dict[str, Any]:
    """Restore the optimizer state (sharded as the model is, in one process or under FSDP2) from a
    checkpoint; returns the loop's saved scalars (step, cumulative compute, collapse state)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    state = torch.load(checkpoint / "state.pt", map_location=device, weights_only=False)
    set_optimizer_state_dict(model, optimizer, state.pop("optimizer"), options=StateDictOptions(full_state_dict=True))
    state.pop(CHECKSUMMED, None)
    return state


def restore(spec: RunSpec, out: RunDir, checkpoint: Path, policy: Policy, device: torch.device,
            changes: list[str]) -> tuple[RunState, ProvenanceRecord]:
    """The loop state and provenance at `checkpoint`, the optimizer restored. `changes`: the settings
    changed since the run started (`resume_changes`, allowed by the caller), which apply (the lr too,
    which the restored optimizer state would otherwise bring back) and are recorded in provenance."""
    scalars = load_checkpoint_state(checkpoint, policy.model, policy.trainer(), device)
    check_tables(out, scalars["step"], spec.suite.eval.enabled)
    state = RunState.restored(scalars, out.read_rows("metrics.parquet"), out.read_rows("layers.parquet"),
                              out.read_rows("eval.parquet"))
    prov = out.read_provenance() or provenance(str(device))
    set_lr(policy.trainer(), spec.lr, spec.suite.train.router_lr_scale)
    prov.setdefault("resumed", []).append({"at_step": state.step, "time": now(), "changed": changes,
                                           "overrides": spec.overrides, "kernels": kernel_state(),
                                           "suite_sha256": spec.suite_sha256})
    return state, prov


def check_tables(out: RunDir, step: int, evaluated: bool) -> None:
    """ValueError unless the run's tables hold what a resume from a checkpoint at `step` keeps:
    metrics.parquet with every step 1..step, layers.parquet, and eval.parquet where the run evaluates.
    Their rows are not in the checkpoint: a table deleted or cut cannot be rebuilt from it."""
    if step == 0:
        return
    for name in ("metrics.parquet", "layers.parquet", *(["eval.parquet"] if evaluated else [])):
        if not (out.path / name).is_file():
            raise ValueError(_unresumable(out, f"{out.path / name} is missing", step))
    steps = sorted({int(row["step"]) for row in out.read_rows("metrics.parquet")})
    if [s for s in steps if s <= step] != list(range(1, step + 1)):
        raise ValueError(_unresumable(out, f"{out.path / 'metrics.parquet'} holds steps {steps}", step))


def _unresumable(out: RunDir, what: str, step: int) -> str:
    return (f"cannot resume {out.path}: {what}, but its checkpoint is at step {step}: the rows of steps 1..{step} "
            "cannot be rebuilt from the checkpoint; move the run folder away and run it again")
