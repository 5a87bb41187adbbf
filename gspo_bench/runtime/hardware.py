"""The GPU figures of a step: peak GPU memory, rollout and training tokens/s, and model FLOPs
utilisation (MFU) against the device's dense bf16 peak.

    gpu/peak_mem_gib           torch.cuda.max_memory_allocated over the step (the peak statistics are
                               reset when the step starts), GiB; NaN off CUDA
    perf/rollout_tokens_per_s  response tokens generated / time/rollout_s
    perf/train_tokens_per_s    tokens forwarded and back-propagated (compute/tokens_trained) / time/update_s
                               (everything after the rollout: old-policy pass, K updates, drift, the row)
    perf/mfu                   compute/flops / time/step_s / (dense bf16 peak FLOP/s x GPUs); NaN where the
                               device is not CUDA or its name is not in BF16_DENSE_PEAK

compute/flops is the harness's estimate (2 N_active per token forwarded, 6 N_active per token trained,
attention's sequence term left out: `gspo_bench.train.compute`), so MFU here is that estimate's share of the
peak, not a hardware counter. Pure functions here; the loop reads the device once per step.
"""

from __future__ import annotations

import re

import torch

# Dense (not 2:4-sparse) bf16 tensor-core peak FLOP/s per GPU, from the vendors' datasheets (NVIDIA
# publishes "with sparsity" figures; these are half of them). Matched in order against
# torch.cuda.get_device_name, so specific variants come before their family.
BF16_DENSE_PEAK: tuple[tuple[str, float], ...] = (
    (r"\bH100\b.*\bPCIe\b", 756e12),  # H100 PCIe datasheet: 1,513 TFLOPS with sparsity
    (r"\bH100\b.*\bNVL\b", 835e12),  # H100 NVL: 1,671 with sparsity
    (r"\bH100\b", 989e12),  # H100 SXM (e.g. "NVIDIA H100 80GB HBM3"): 1,979 with sparsity
    (r"\bH200\b.*\bNVL\b", 835e12),  # H200 NVL: 1,671 with sparsity
    (r"\bH200\b", 989e12),  # H200 SXM (and GH200's GPU): 1,979 with sparsity
    (r"\bB200\b", 2250e12),  # B200 (HGX B200): 4.5 PFLOPS with sparsity
    (r"\bA100\b", 312e12),  # A100 SXM and PCIe: 624 with sparsity
    (r"\bL40S\b", 362e12),  # L40S: 733 with sparsity
    (r"\bL4\b", 121e12),  # L4: 242 with sparsity
    (r"\bA10\b", 125e12),  # A10 (not A10G, whose figure NVIDIA does not publish): 250 with sparsity
    (r"\bRTX 4090\b", 165e12),  # Ada whitepaper: 165.2 with FP32 accumulate (330.4 with sparsity)
)

GIB = 2**30


def bf16_dense_peak(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s of the GPU named `device_name`, or None for a GPU not in the table."""
    for pattern, flops in BF16_DENSE_PEAK:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return flops
    return None


def device_peak_flops(device: torch.device) -> float | None:
    """The dense bf16 peak of `device`; None off CUDA or for an unknown GPU (MFU is then blank)."""
    if device.type != "cuda":
        return None
    return bf16_dense_peak(torch.cuda.get_device_name(device))


def reset_peak_memory(device: torch.device) -> None:
    """Start measuring this step's peak GPU memory (nothing to do off CUDA)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float:
    """Most memory allocated on `device` since the last `reset_peak_memory`, GiB; NaN off CUDA."""
    if device.type != "cuda":
        return float("nan")
    return torch.cuda.max_memory_allocated(device) / GIB


def _per_second(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else float("nan")


def step_figures(*, response_tokens: float, rollout_s: float, tokens_trained: float, update_s: float,
                 flops: float, step_s: float, peak_flops: float | None, gpus: int = 1,
                 peak_mem_gib: float = float("nan")) -> dict[str, float]:
    """The GPU figures of one step (module docstring); `peak_flops` None leaves MFU blank (NaN)."""
    mfu = float("nan") if peak_flops is None else _per_second(flops, step_s) / (peak_flops * gpus)
    return {
        "gpu/peak_mem_gib": peak_mem_gib,
        "perf/rollout_tokens_per_s": _per_second(response_tokens, rollout_s),
        "perf/train_tokens_per_s": _per_second(tokens_trained, update_s),
        "perf/mfu": mfu,
    }


def require_device(name: str, field: str) -> torch.device:
    """`name` (cpu, cuda, cuda:N) as a device of this machine; ValueError naming the suite `field` that
    asks for a device it does not have. `validate` and the run call it alike."""
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{field}: {name}, but this machine has no CUDA device")
        if (device.index or 0) >= torch.cuda.device_count():
            raise ValueError(f"{field}: {name}, but this machine has {torch.cuda.device_count()} GPU(s)")
    return device
