"""Pinned CPU kernels (gspo_bench.runtime.kernels): what is set, what is kept, what is reported, and
that the thread count a run computes with is its suite's and goes back after."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch.overrides import TorchFunctionMode

from gspo_bench.runtime.kernels import (
    NATIVE,
    PINS,
    kernel_state,
    pin_kernels,
    pin_problem,
    torch_threads,
)
from tests.helpers.runs import run_suite, tiny_suite


def test_pins_fill_what_is_unset_keep_the_users_choice_and_stay_off_on_request():
    environ = {"MKL_CBWR": "AVX2"}
    added = pin_kernels(environ)
    assert added == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert environ == {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert pin_kernels({NATIVE: "1"}) == {} and pin_kernels({NATIVE: "0"}) == PINS


def test_the_tests_compute_with_the_pinned_kernels():
    """conftest pins before any test computes, as the command line does before any command."""
    torch.ones(4, 4) @ torch.ones(4, 4)  # MKL has picked its branch by now
    state = kernel_state()
    assert state["asked"] == PINS
    assert state["aten_cpu_capability"] == "AVX2" and state["mkl_branch"] == "COMPATIBLE"
    assert pin_problem(state) is None


def test_a_pin_that_did_not_take_is_named():
    asked = {"pinned": True, "asked": dict(PINS), "aten_cpu_capability": "AVX2", "mkl_branch": "COMPATIBLE"}
    assert pin_problem(asked) is None
    assert "DEFAULT kernels, not AVX2" in pin_problem(asked | {"aten_cpu_capability": "DEFAULT"})
    assert "OFF branch, not COMPATIBLE" in pin_problem(asked | {"mkl_branch": "OFF"})
    assert pin_problem(asked | {"mkl_branch": None}) is None  # a torch build without MKL: nothing to pin
    assert pin_problem(asked | {"pinned": False, "mkl_branch": "OFF"}) is None  # opted out: as asked
    users = asked | {"asked": dict(PINS, MKL_CBWR="AUTO"), "mkl_branch": "AUTO"}
    assert pin_problem(users) is None  # the user's own MKL_CBWR is their choice


def test_the_command_line_pins_before_torch_picks_a_kernel_and_importing_pins_nothing():
    code = ("import os\n"
            f"for name in {sorted(PINS)}: os.environ.pop(name, None)\n"
            "import torch, gspo_bench.cli\n"
            f"assert all(name not in os.environ for name in {sorted(PINS)})\n"
            "from typer.testing import CliRunner\n"
            "CliRunner().invoke(gspo_bench.cli.app, ['version'])\n"
            "torch.ones(4, 4) @ torch.ones(4, 4)\n"
            "from gspo_bench.runtime.kernels import kernel_state\n"
            "s = kernel_state(); print(s['aten_cpu_capability'], s['mkl_branch'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["AVX2", "COMPATIBLE"]


def test_torch_threads_sets_the_count_inside_and_restores_it():
    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    with torch_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    try:
        with torch_threads(other):
            raise RuntimeError("a failed run")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before


class SqrtCalls(TorchFunctionMode):
    """Records every float square root torch would send to MKL's vector math (torch.sqrt, Tensor.sqrt,
    Tensor.sqrt_, a pow to 0.5): its last bit differs between CPUs (runtime.kernels.ieee_sqrt)."""

    SQRT = {torch.sqrt, torch.Tensor.sqrt, torch.Tensor.sqrt_}
    POW = {torch.pow, torch.Tensor.pow, torch.Tensor.pow_, torch.Tensor.__pow__}

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        first = args[0] if args else None
        floating = isinstance(first, torch.Tensor) and first.is_floating_point() and first.numel() > 0
        if floating and (func in self.SQRT or (func in self.POW and len(args) > 1 and args[1] == 0.5)):
            self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **kwargs)


def test_a_run_takes_no_square_root_from_mkls_vector_math(tmp_path):
    """Warm start (its AdamW), router and logit noise (their Box-Muller), a correction's metrics and the RL
    updates: every square root a run takes is an exact one, so the pinned kernels give one result on every
    AVX2 CPU."""
    data = tiny_suite(tmp_path / "cache", rollout={"engine_options": {"router_noise": 0.5, "logit_noise": 0.5}},
                      budget={"kind": "steps", "value": 1},
                      objectives=[{"name": "grpo", "correction": {"kind": "tis"}}, {"name": "gspo"}])
    with SqrtCalls() as found:
        run_suite(data, tmp_path / "out")
    assert found.calls == []
    with SqrtCalls() as found:  # the guard sees what it guards against
        torch.ones(3).sqrt(), torch.ones(3) ** 0.5
    assert found.calls == ["sqrt", "pow"]
