"""Writes never go through a link (gspo_bench.rundir.folder.remove_entry, the atomic writes): the
report's files and figures, and a run's checkpoint/ moved to another disk behind a link."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch

from analysis.report.figure_table import FigureSpec, ReportFigure
from analysis.report.writer import save_figures, write_report
from gspo_bench.rundir.folder import remove_entry
from tests.helpers.results import make_run


def victim(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "elsewhere" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not the report's\n")
    return path


def one_figure(sources) -> plt.Figure:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    return fig


def test_figures_replace_a_link_and_leave_its_target(tmp_path):
    out = tmp_path / "figures"
    out.mkdir()
    target = victim(tmp_path, "kept.png")
    (out / "line.png").symlink_to(target)
    spec = FigureSpec("line", "A line", one_figure, lambda s: [])
    paths = save_figures([ReportFigure(spec.name, spec.title, spec, None)], out)  # one_figure reads no sources
    assert [p.name for p in paths] == ["line.png", "line.pdf"]
    assert not (out / "line.png").is_symlink() and (out / "line.png").read_bytes()[:4] == b"\x89PNG"
    assert target.read_text() == "not the report's\n"


def test_the_report_replaces_links_and_leaves_their_targets(tmp_path, monkeypatch):
    """report.md and report.html planted as links (a results folder someone handed over): both are
    replaced by the report's own files and what they pointed to is untouched. A report stopped while
    it writes its figures leaves neither of the old files (never an old report.html beside a new
    report.md)."""
    make_run(tmp_path, "grpo", 0, steps=6)
    make_run(tmp_path, "gspo", 0, steps=6)
    out = tmp_path / "synth" / "report"
    out.mkdir()
    targets = {name: victim(tmp_path, name) for name in ("report.md", "report.html")}
    for name, target in targets.items():
        (out / name).symlink_to(target)
    from analysis.data.load import load_results
    from analysis.report import writer as report

    results = load_results(tmp_path / "synth")
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
    with monkeypatch.context() as patch:
        patch.setattr(report, "save_figures", stopped)
        with pytest.raises(KeyboardInterrupt):
            write_report(results, out)
    assert not any((out / name).exists() or (out / name).is_symlink() for name in targets)
    for name, target in targets.items():
        (out / name).symlink_to(target)
    paths = write_report(results, out)
    for name, target in targets.items():
        assert not (out / name).is_symlink() and target.read_text() == "not the report's\n"
    assert paths["md"].read_text().startswith("#") and "<html>" in paths["html"].read_text()


def test_remove_entry_unlinks_a_link_to_a_folder_and_keeps_the_folder(tmp_path):
    folder = tmp_path / "disk2" / "checkpoint"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_text("x")
    link = tmp_path / "run" / "checkpoint"
    link.parent.mkdir()
    link.symlink_to(folder, target_is_directory=True)
    remove_entry(link)
    assert not link.exists() and not link.is_symlink() and (folder / "state.pt").read_text() == "x"
    remove_entry(link)  # nothing there: nothing done
    remove_entry(folder.parent)
    assert not folder.parent.exists()


def test_a_checkpoint_moved_behind_a_link_is_replaced_at_every_later_checkpoint(tmp_path):
    """checkpoint/ moved to another disk and linked back: the next checkpoints swap in beside it (the
    second one used to fail with NotADirectoryError and leave .checkpoint-old, failing every resume
    after); the moved checkpoint stays where it was moved."""
    from gspo_bench.models import build_char_tokenizer, build_tiny_moe
    from gspo_bench.rundir.checksums import damage
    from gspo_bench.train.checkpoint import find_checkpoint, save_checkpoint

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    model = build_tiny_moe(num_layers=1)
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(run_dir, model, build_char_tokenizer(), optimizer, step=1)
    moved = tmp_path / "disk2" / "checkpoint"
    moved.parent.mkdir()
    (run_dir / "checkpoint").rename(moved)
    (run_dir / "checkpoint").symlink_to(moved, target_is_directory=True)
    for step in (2, 3):
        save_checkpoint(run_dir, model, build_char_tokenizer(), optimizer, step=step)
        assert not (run_dir / "checkpoint").is_symlink() and not (run_dir / ".checkpoint-old").exists()
    assert find_checkpoint(run_dir) == run_dir / "checkpoint" and damage(run_dir / "checkpoint") is None
    assert damage(moved) is None  # what the link pointed to is left as it was


@pytest.mark.parametrize("stale", ["link", "folder"])
def test_a_stale_checkpoint_old_does_not_block_the_next_checkpoint(tmp_path, stale):
    """A .checkpoint-old left by a crash (a folder) or by the bug above (a link) is removed by the next
    checkpoint."""
    from gspo_bench.models import build_char_tokenizer, build_tiny_moe
    from gspo_bench.train.checkpoint import save_checkpoint

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    model = build_tiny_moe(num_layers=1)
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(run_dir, model, build_char_tokenizer(), optimizer, step=1)
    elsewhere = tmp_path / "disk2"
    elsewhere.mkdir()
    if stale == "link":
        (run_dir / ".checkpoint-old").symlink_to(elsewhere, target_is_directory=True)
    else:
        (run_dir / ".checkpoint-old").mkdir()
    save_checkpoint(run_dir, model, build_char_tokenizer(), optimizer, step=2)
    assert not (run_dir / ".checkpoint-old").exists() and not (run_dir / ".checkpoint-old").is_symlink()
    assert elsewhere.is_dir()
