"""Training precision: fp32 master weights and optimizer state; bf16 compute under autocast.

With `train.dtype: bfloat16` the parameters stay fp32 (AdamW updates them there, so an update of
1e-6 is not rounded away as it would be on a bf16 weight near 1.0, whose spacing is 2^-7), and
every forward (rollout, old-policy pass, update forwards) runs under `torch.autocast` in bf16.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


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
        """Where forwards run: bf16 autocast, or nothing to do for fp32."""
        if self.compute == torch.float32:
            return nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute)
