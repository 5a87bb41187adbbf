"""Warm starts shipped with the package (gspo_bench/warmstarts/, made by experiments/ship_warm_starts.py): a
fresh warm start of a shipped key writes the shipped files bit for bit; an empty cache takes the shipped entry
without training; a shipped entry whose files do not match their checksums is not used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gspo_bench.train.warmstart as warmstart
from gspo_bench.config import load_suite
from gspo_bench.rundir.checksums import CHECKSUMS
from gspo_bench.suite.runner import starting_weights

ROOT = Path(__file__).resolve().parent.parent
LAG_SUITE = ROOT / "experiments" / "lag" / "lag_pilot.yaml"  # the CI-sized MoE's fixed 50-step warm start


def suite_in(cache: Path):
    suite = load_suite(LAG_SUITE)
    return suite.model_copy(update={"warm_start": suite.warm_start.model_copy(update={"cache_dir": str(cache)})})


def files(entry: Path) -> dict:
    return json.loads((entry / CHECKSUMS).read_text())


def test_a_fresh_warm_start_writes_the_shipped_entry_bit_for_bit(tmp_path):
    fresh = starting_weights(suite_in(tmp_path), 0, log=lambda line: None, shipped=False)
    shipped = warmstart.SHIPPED / fresh.name
    assert shipped.is_dir(), f"no shipped entry {fresh.name}: make ship-warm-starts"
    assert files(fresh) == files(shipped) and "model.safetensors" in files(fresh)


def test_an_empty_cache_takes_the_shipped_entry_without_training(tmp_path):
    def no_training(step, accuracy):
        raise AssertionError("the warm start trained")

    lines: list[str] = []
    taken = starting_weights(suite_in(tmp_path), 0, log=lines.append, on_eval=no_training)
    assert taken.parent == tmp_path and files(taken) == files(warmstart.SHIPPED / taken.name)
    assert any("shipped with the package" in line for line in lines)


def test_a_damaged_shipped_entry_is_not_used(tmp_path, monkeypatch):
    name = starting_weights(suite_in(tmp_path / "probe"), 0, log=lambda line: None).name
    shipped, true = tmp_path / "shipped", warmstart.SHIPPED / name
    shutil.copytree(true, shipped / name)
    weights = shipped / name / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(warmstart, "SHIPPED", shipped)
    lines: list[str] = []
    made = starting_weights(suite_in(tmp_path / "cache"), 0, log=lines.append)
    assert any("is damaged" in line and "model.safetensors differs" in line for line in lines)
    assert any(line.strip().startswith("trained") for line in lines)
    assert files(made) == files(true)  # trained afresh: the true entry
