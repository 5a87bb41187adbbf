"""GPU figures of every step (peak memory, rollout and training tokens/s, MFU against the device's
bf16 peak), their TensorBoard and report views, and the dry run's activation, logits and KV-cache
estimates, on CPU: the GPU columns exist and are blank there, the arithmetic is checked on hand cases
with fake device names, fake timings and a faked CUDA memory counter."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from gspo_bench.config import parse_suite
from gspo_bench.models.tiny import TinyMoESpec, tiny_config
from gspo_bench.rundir.folder import GPU_COLUMNS, REQUIRED_COLUMNS
from gspo_bench.runtime import hardware
from gspo_bench.suite.plan import expert_layers, plan_suite, plan_vs_peak
from tests.helpers.runs import metrics, run_suite, tiny_suite

GIB = 2**30
FIGURES = ("gpu/peak_mem_gib", "perf/rollout_tokens_per_s", "perf/train_tokens_per_s", "perf/mfu")


# ---------------------------------------------------------------------------- the device's peak
@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12), ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA A100 80GB PCIe", 312e12), ("NVIDIA L4", 121e12), ("NVIDIA L40S", 362e12), ("NVIDIA A10", 125e12),
    ("NVIDIA GeForce RTX 4090", 165e12),
    ("NVIDIA A10G", None), ("Tesla V100-SXM2-16GB", None), ("Radeon Instinct MI300X", None),
])
def test_dense_bf16_peak_of_known_gpus_and_blank_for_others(name, peak):
    assert hardware.bf16_dense_peak(name) == peak


def test_the_device_is_read_by_name_on_cuda_and_nothing_is_read_off_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * GIB + GIB // 2)
    resets = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: resets.append(device))
    cuda = torch.device("cuda", 0)
    assert hardware.device_peak_flops(cuda) == 756e12
    assert hardware.peak_memory_gib(cuda) == 3.5
    hardware.reset_peak_memory(cuda)
    assert resets == [cuda]
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert hardware.device_peak_flops(cuda) is None
    cpu = torch.device("cpu")
    hardware.reset_peak_memory(cpu)
    assert resets == [cuda] and hardware.device_peak_flops(cpu) is None and math.isnan(hardware.peak_memory_gib(cpu))


def test_step_figures_by_hand():
    figures = hardware.step_figures(response_tokens=1000, rollout_s=2.0, tokens_trained=3000, update_s=1.5,
                                    flops=9.89e14, step_s=4.0, peak_flops=989e12, gpus=1, peak_mem_gib=40.5)
    assert figures == {"gpu/peak_mem_gib": 40.5, "perf/rollout_tokens_per_s": 500.0,
                       "perf/train_tokens_per_s": 2000.0, "perf/mfu": pytest.approx(0.25)}
    two = hardware.step_figures(response_tokens=1000, rollout_s=2.0, tokens_trained=3000, update_s=1.5,
                                flops=9.89e14, step_s=4.0, peak_flops=989e12, gpus=2)
    assert two["perf/mfu"] == pytest.approx(0.125) and math.isnan(two["gpu/peak_mem_gib"])
    unknown = hardware.step_figures(response_tokens=1000, rollout_s=2.0, tokens_trained=3000, update_s=1.5,
                                    flops=9.89e14, step_s=4.0, peak_flops=None)
    assert math.isnan(unknown["perf/mfu"]) and unknown["perf/rollout_tokens_per_s"] == 500.0


# ---------------------------------------------------------------------------- every row, TensorBoard
def one_step_suite(cache: Path, **changes) -> dict:
    return tiny_suite(cache, **{"warm_start": {"enabled": False}, "budget": {"kind": "steps", "value": 1},
                                "objectives": [{"name": "grpo"}], **changes})


def test_rows_on_cpu_carry_tokens_per_second_and_blank_gpu_figures(tmp_path):
    assert set(FIGURES) <= set(REQUIRED_COLUMNS) and set(GPU_COLUMNS) == {"gpu/peak_mem_gib", "perf/mfu"}
    run_suite(one_step_suite(tmp_path / "cache"), tmp_path / "out")
    row = metrics(tmp_path / "out", "tiny", "grpo-s0").iloc[0]
    assert math.isnan(row["gpu/peak_mem_gib"]) and math.isnan(row["perf/mfu"])
    responses = 2 * 4  # prompts_per_step x group_size
    assert row["perf/rollout_tokens_per_s"] == pytest.approx(row["response/len_mean"] * responses / row["time/rollout_s"])
    assert row["perf/train_tokens_per_s"] == pytest.approx(row["compute/tokens_trained"] / row["time/update_s"])
    assert row["perf/rollout_tokens_per_s"] > 0 and row["perf/train_tokens_per_s"] > 0


def test_a_known_gpu_gives_mfu_and_peak_memory_in_the_row_and_tensorboard(tmp_path, monkeypatch):
    """The loop's device readings faked: a 1 GFLOP/s device with a 1.5 GiB peak."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from gspo_bench.train import loop

    readings = []
    monkeypatch.setattr(loop, "device_peak_flops", lambda device: 1e9)
    monkeypatch.setattr(loop, "reset_peak_memory", lambda device: readings.append("reset"))
    monkeypatch.setattr(loop, "peak_memory_gib", lambda device: readings.append("peak") or 1.5)
    run_suite(one_step_suite(tmp_path / "cache", tracking={"tensorboard": True}, budget={"kind": "steps", "value": 2}),
              tmp_path / "out")
    assert readings == ["reset", "peak"] * 2  # each step's own peak
    row = metrics(tmp_path / "out", "tiny", "grpo-s0").iloc[0]
    assert row["gpu/peak_mem_gib"] == 1.5
    assert row["perf/mfu"] == pytest.approx(row["compute/flops"] / row["time/step_s"] / 1e9)
    events = EventAccumulator(str(tmp_path / "out" / "tiny" / "grpo-s0" / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    for column in FIGURES:
        logged = events.Scalars(column)
        assert [e.step for e in logged] == [1, 2] and logged[0].value == pytest.approx(row[column], rel=1e-6), column


# ---------------------------------------------------------------------------- the report
def test_the_report_shows_gpu_figures_per_objective(tmp_path):
    from analysis.data.gpu import gpu_table
    from analysis.data.load import Results

    m = pd.DataFrame({"label": ["grpo", "grpo", "gspo"], "gpu/peak_mem_gib": [40.0, 41.0, 39.0],
                      "perf/rollout_tokens_per_s": [1000.0, 1200.0, 900.0], "perf/train_tokens_per_s": [10.0, 30.0, 5.0],
                      "perf/mfu": [0.002, 0.004, float("nan")], "time/step_s": [25.0, 23.0, 24.0]})
    runs = pd.DataFrame({"label": ["grpo", "gspo"], "device": ["cuda:0", "cuda:0"]})
    table = gpu_table(Results(metrics=m, layers=pd.DataFrame(), runs=runs, evals=pd.DataFrame())).set_index("objective")
    assert table.loc["grpo", "peak GPU memory (GiB)"] == 41.0 and table.loc["grpo", "rollout tokens/s"] == 1100.0
    assert table.loc["grpo", "training tokens/s"] == 20.0 and table.loc["grpo", "MFU"] == pytest.approx(0.003)
    assert math.isnan(table.loc["gspo", "MFU"]) and table.loc["gspo", "step (s)"] == 24.0
    assert table.loc["gspo", "device"] == "cuda:0"
    old = m.assign(**{c: float("nan") for c in FIGURES})
    assert "no GPU figures" in gpu_table(Results(metrics=old, layers=pd.DataFrame(), runs=runs, evals=pd.DataFrame()))


def test_the_written_report_has_the_gpu_section(tmp_path):
    from analysis.data.load import load_results
    from analysis.report.writer import write_report

    run_suite(one_step_suite(tmp_path / "cache"), tmp_path / "out")
    paths = write_report(load_results(tmp_path / "out" / "tiny"), tmp_path / "report", allow_unmatched=True)
    text = paths["md"].read_text()
    assert "GPU figures per objective" in text and "rollout tokens/s" in text


# ---------------------------------------------------------------------------- the dry run's memory
SMALL = {"model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
         "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8}}


def small_suite(dtype: str = "float32", rollout_dtype: str | None = None):
    return parse_suite({"name": "small", **SMALL, "task": {"name": "sort", "params": {"max_len": 3}},
                        "rollout": {**SMALL["rollout"], "dtype": rollout_dtype},
                        "train": {"minibatches": 2, "dtype": dtype}, "warm_start": {"enabled": False},
                        "budget": {"kind": "steps", "value": 1}, "objectives": [{"name": "grpo"}]})


def test_expert_layers_read_top_k_and_width_from_the_model():
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(tiny_config(TinyMoESpec(num_layers=3, hidden_size=32, expert_hidden=48,
                                                                         num_experts=4, top_k=2)))
    assert expert_layers(model) == [(2, 48)] * 3


# ---------------------------------------------------------------------------- step 1 on a GPU
def test_step_one_prints_the_plan_beside_the_measured_peak():
    from gspo_bench.suite.progress import memory_check

    suite = small_suite()
    planned = plan_suite(suite).memory
    assert memory_check(suite, {"step": 1, "gpu/peak_mem_gib": 1.25}) == plan_vs_peak(planned, 1.25)
    assert memory_check(suite, {"step": 2, "gpu/peak_mem_gib": 1.25}) is None  # step 1 only
    assert memory_check(suite, {"step": 1, "gpu/peak_mem_gib": float("nan")}) is None  # off CUDA
