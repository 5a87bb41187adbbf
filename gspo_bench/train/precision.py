"""Training precision: fp32 master weights and optimizer state; bf16 compute under autocast.

With `train.dtype: bfloat16` the parameters stay fp32 (AdamW updates them there, so an update of
1e-6 is not rounded away as it would be on a bf16 weight near 1.0, whose spacing is 2^-7), and
every training forward (old-policy pass, update forwards) runs under `torch.autocast` in bf16.
Generation runs on a bf16 copy of the weights held by the rollout engine (`rollout.hf`).

Autocast does not know MoE experts' grouped matmul: `torch._grouped_mm` is on none of its op lists,
and transformers casts its input to the weight's dtype before calling it, so with fp32 master
weights every expert matmul ran in fp32 (on CUDA through the fp32 fallback: one matmul per expert
after a device-to-host copy of the offsets). On CUDA `autocast()` registers, once per
process, an autocast rule for `aten::_grouped_mm` that casts its floating operands to the autocast
dtype, as autocast does for `mm`: the experts then run in bf16 in training forwards as in
generation, on one process or under FSDP2 alike, and their weights' gradients flow back to the fp32
masters through the cast. Operands whose inner dimensions are not multiples of 8 (16 bytes of bf16:
the kernels' alignment) stay as they are. Not on CPU: there a bf16 grouped matmul is ~30x slower than
an fp32 one (`experiments/perf/gpu_phases.py --device cpu`), so CPU bf16 runs keep fp32 experts.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# the registrations live as long as their Library object: one per process, made on first use
_GROUPED_MM_AUTOCAST: dict[str, torch.library.Library] = {}


def _aligned(t: torch.Tensor) -> bool:
    """Rows of 16 bytes in bf16: the inner dimension, and for [E, K, N] weights both matrix dimensions
    (a token-count dimension may be anything)."""
    inner = t.shape[-2:] if t.dim() == 3 else t.shape[-1:]
    return all(size % 8 == 0 for size in inner)


def _grouped_mm_autocast_kernel(device_type: str) -> Callable[..., Any]:
    key = getattr(torch._C.DispatchKey, "Autocast" + torch._C._dispatch_key_for_device(device_type))

    def kernel(_keyset: Any, *args: Any, **kwargs: Any) -> Any:
        dtype = torch.get_autocast_dtype(device_type)
        operands = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_floating_point()]
        if all(_aligned(t) for t in operands):
            def cast(a: Any) -> Any:
                return a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a

            args, kwargs = tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return torch.ops.aten._grouped_mm.default(*args, **kwargs)

    return kernel


def register_grouped_mm_autocast(device_type: str = "cuda") -> None:
    """Make `device_type`'s autocast cast `torch._grouped_mm`'s operands to its dtype; idempotent."""
    if device_type in _GROUPED_MM_AUTOCAST or not hasattr(torch.ops.aten, "_grouped_mm"):
        return
    library = torch.library.Library("aten", "IMPL")
    key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
    library.impl("_grouped_mm", _grouped_mm_autocast_kernel(device_type), key, with_keyset=True)
    _GROUPED_MM_AUTOCAST[device_type] = library


def unregister_grouped_mm_autocast(device_type: str = "cuda") -> None:
    """Undo `register_grouped_mm_autocast` (tests and benchmarks compare with and without it)."""
    library = _GROUPED_MM_AUTOCAST.pop(device_type, None)
    if library is not None:
        library._destroy()


@dataclass(frozen=True)
class Precision:
    device_type: str = "cpu"  # "cpu" or "cuda"
    compute: torch.dtype = torch.float32  # autocast dtype; float32: no autocast

    @classmethod
    def named(cls, dtype: str, device: torch.device | str) -> Precision:
        if dtype not in DTYPES:
            raise ValueError(f"train.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        return cls(device_type=torch.device(device).type, compute=DTYPES[dtype])

    def autocast(self) -> AbstractContextManager:
        """Where forwards run: bf16 autocast (grouped expert matmuls included), or nothing to do for fp32."""
        if self.compute == torch.float32:
            return nullcontext()
        if self.device_type == "cuda":
            register_grouped_mm_autocast("cuda")
        return torch.autocast(self.device_type, dtype=self.compute)
