"""What reaches the warm start and its cache key (gspo_bench.suite.runner.starting_weights,
gspo_bench.train.warmstart.warm_start): `warm_start.steps`, and the CPU kernels with their thread count
in the key (other kernels or threads make other float sums, so other weights). Both were broken by a
review without a test noticing."""

from __future__ import annotations

from pathlib import Path

from gspo_bench.config.load import parse_suite
from gspo_bench.runtime.kernels import torch_threads
from gspo_bench.suite import runner
from gspo_bench.train import warmstart


def tiny_suite(**warm_start) -> object:
    return parse_suite({"name": "t", "task": {"name": "sort", "params": {"max_len": 3}},
                        "budget": {"kind": "steps", "value": 2}, "objectives": [{"name": "grpo"}],
                        "model": {"num_layers": 1}, "warm_start": warm_start})


def test_warm_start_steps_reach_the_warm_start(tmp_path, monkeypatch):
    seen = {}

    def fake(build, tokenizer, task, params, key_parts, cache, on_eval=None, shipped=None):
        seen["params"] = params
        return None, {"path": str(tmp_path), "cached": True, "accuracy": 0.3, "steps": params.steps}

    monkeypatch.setattr(warmstart, "warm_start", fake)
    suite = tiny_suite(steps=7, cache_dir=str(tmp_path / "cache"))
    assert runner.starting_weights(suite, 0, log=lambda line: None) == tmp_path
    assert seen["params"].steps == 7


def key_of(tmp_path: Path, monkeypatch) -> str:
    """The cache key warm_start computes (nothing trained or saved)."""
    monkeypatch.setattr(warmstart, "finetune", lambda *a, **k: {"steps": 0, "accuracy": 0.0})
    monkeypatch.setattr(warmstart, "save_entry", lambda *a, **k: None)
    _, info = warmstart.warm_start(lambda: None, None, None, warmstart.WarmStartParams(), {"seed": 0}, tmp_path)
    return info["key"]


def test_the_cache_key_holds_the_kernels_and_their_thread_count(tmp_path, monkeypatch):
    with torch_threads(1):
        one = key_of(tmp_path, monkeypatch)
    with torch_threads(2):
        two = key_of(tmp_path, monkeypatch)
    assert one != two
    with torch_threads(1):
        assert key_of(tmp_path, monkeypatch) == one
        monkeypatch.setattr(warmstart, "kernel_key", lambda: "AVX512/AUTO/1 threads/some cpu")
        assert key_of(tmp_path, monkeypatch) not in (one, two)



def threads_seen(tmp_path: Path, monkeypatch, **warm_start) -> int:
    """torch's thread count while `starting_weights` warm-starts a suite with train.threads 1."""
    import torch

    seen = {}

    def fake(build, tokenizer, task, params, key_parts, cache, on_eval=None, shipped=None):
        seen["threads"] = torch.get_num_threads()
        return None, {"path": str(tmp_path), "cached": True, "accuracy": 0.3, "steps": 1}

    monkeypatch.setattr(warmstart, "warm_start", fake)
    suite = tiny_suite(cache_dir=str(tmp_path / "cache"), **warm_start)
    suite = suite.model_copy(update={"train": suite.train.model_copy(update={"threads": 1})})
    with torch_threads(3):
        runner.starting_weights(suite, 0, log=lambda line: None)
    return seen["threads"]


def test_warm_start_threads_set_the_warm_starts_thread_count_and_train_threads_otherwise(tmp_path, monkeypatch):
    assert threads_seen(tmp_path, monkeypatch, threads=2) == 2
    assert threads_seen(tmp_path, monkeypatch) == 1
