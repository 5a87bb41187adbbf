"""Pinned CPU kernels: the same float results on every x86-64 CPU with AVX2.

torch's CPU build picks its kernels three ways, each of which changes float results:
    ATen's vectorised kernels   by the CPU's widest ISA (DEFAULT, AVX2, AVX512)    ATEN_CPU_CAPABILITY
    MKL's BLAS (every matmul)   by CPU vendor and model, not only by ISA            MKL_CBWR
    oneDNN                      by its widest ISA                                   ONEDNN_MAX_CPU_ISA
so a run on an AVX-512 Intel machine, an AVX2 Intel one and an AVX2 AMD one part at the first
matmul, and training (a warm start of hundreds of steps, a first-in-band stopping rule, sampled
tokens) turns that float noise into other trajectories. `pin_kernels` sets all three to one choice,
before torch picks any kernel: ATen's AVX2 kernels (every x86-64 CPU since 2013 has AVX2),
MKL's COMPATIBLE branch (the only conditional-numerical-reproducibility branch MKL runs alike on
Intel and AMD: asked for its AVX2 branch, MKL on AMD falls back to AUTO, which is per-model), and
oneDNN at most AVX2. Measured (docs/reproducibility.md): one RL step's statistics are bitwise
equal on an AMD EPYC and an emulated Intel Haswell with the pins, and differ without them.

A variable the user set already is kept (their choice, recorded); GSPO_BENCH_NATIVE_KERNELS=1
leaves all three unset (each machine's fastest kernels, results per machine). Thread counts are
the suite's `train.threads` (a float sum is split by thread count too: `torch_threads`).

`kernel_state` reads what is in effect (provenance records it with every run); `pin_problem` says
why a run's results will not match a pinned run elsewhere, or None.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator, MutableMapping
from functools import cache
from pathlib import Path
from typing import Any

PINS: dict[str, str] = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
NATIVE = "GSPO_BENCH_NATIVE_KERNELS"  # set to 1: no pins
# mkl_cbwr_get's answers (mkl_service.h): the branch MKL runs
MKL_BRANCHES = {0: "OFF", 1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2",
                9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}
_MKL_CBWR_BRANCH = 1  # mkl_cbwr_get's argument: which branch is set


def native_kernels(environ: MutableMapping[str, str] = os.environ) -> bool:
    """The user asked for the machine's own kernels (GSPO_BENCH_NATIVE_KERNELS set and not 0)."""
    return environ.get(NATIVE, "").strip() not in ("", "0")


def pin_kernels(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set each of `PINS` in `environ` that is not set yet (none with GSPO_BENCH_NATIVE_KERNELS);
    returns the ones it set. Takes effect only before torch's first kernel (ATen reads its variable
    at the first vectorised op, MKL at the first BLAS call): `gspo_bench` calls it on import."""
    if native_kernels(environ):
        return {}
    added = {name: value for name, value in PINS.items() if name not in environ}
    environ.update(added)
    return added


@cache
def _mkl_cbwr_get() -> Any:
    """MKL's mkl_serv_cbwr_get, from the torch build that links MKL statically; None without it."""
    import torch

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        function = ctypes.CDLL(str(library)).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    function.restype, function.argtypes = ctypes.c_int, [ctypes.c_int]
    return function


def mkl_branch() -> str | None:
    """The MKL code branch in effect (COMPATIBLE, AUTO, OFF, ...); None where torch has no MKL."""
    function = _mkl_cbwr_get()
    if function is None:
        return None
    code = int(function(_MKL_CBWR_BRANCH))
    return MKL_BRANCHES.get(code, str(code))


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or '' where it cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def kernel_state() -> dict[str, Any]:
    """What picks this process's CPU kernels now: the pins asked for, ATen's capability in effect,
    MKL's branch in effect, the thread count and the CPU (for provenance)."""
    import torch

    return {
        "pinned": not native_kernels(),
        "asked": {name: os.environ.get(name) for name in PINS},
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_branch": mkl_branch(),
        "threads": torch.get_num_threads(),
        "cpu": cpu_model(),
    }


def pin_problem(state: dict[str, Any]) -> str | None:
    """Why kernels asked to be pinned are not (so results will not match a pinned run on another
    CPU), or None: ATen below AVX2 (a CPU without AVX2, or torch ran a kernel before the pin) or MKL
    off its COMPATIBLE branch."""
    if not state["pinned"]:
        return None
    problems = []
    if state["asked"].get("ATEN_CPU_CAPABILITY") == PINS["ATEN_CPU_CAPABILITY"] and \
            state["aten_cpu_capability"] != "AVX2":
        problems.append(f"ATen runs {state['aten_cpu_capability']} kernels, not AVX2 (a CPU without AVX2, or "
                        "torch ran before gspo_bench was imported)")
    if state["asked"].get("MKL_CBWR") == PINS["MKL_CBWR"] and state["mkl_branch"] not in (None, "COMPATIBLE"):
        problems.append(f"MKL runs its {state['mkl_branch']} branch, not COMPATIBLE (torch ran a matmul before "
                        "gspo_bench was imported)")
    return "; ".join(problems) or None


def kernel_key() -> str:
    """What the kernels in effect make of a computation, for cache keys: ATen's capability and MKL's
    branch ("AVX2/COMPATIBLE" pinned, the same on every AVX2 CPU); unpinned MKL branches differ by CPU
    model, so the model is part of the key then."""
    state = kernel_state()
    key = f"{state['aten_cpu_capability']}/{state['mkl_branch']}/{state['threads']} threads"
    return key if state["mkl_branch"] in (None, "COMPATIBLE") else f"{key}/{state['cpu']}"


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to `threads` (unchanged for None) inside, restored after: a
    float sum is split by thread count, so a run or warm start computes with its suite's count, and
    the process (a notebook, the tests) gets its own back."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)

