"""`train.optimizer: adamw8bit`: torchao's AdamW8bit, the training state that fits one GPU.

torchao is an extra (`lowmem`): where it is missing the option fails at once with what to install;
where it is there (CPU or GPU) one update is AdamW's within what 8-bit moments allow, the moments
are 8-bit, learning rates stay floats, and a checkpoint round-trips the optimizer state.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from gspo_bench.config import TrainConfig
from gspo_bench.models import build_tiny_moe
from gspo_bench.train.optim import make_optimizer, set_lr

HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
needs_torchao = pytest.mark.skipif(not HAS_TORCHAO, reason="needs torchao (pip install 'gspo-bench[lowmem]')")


def model_on(device: str) -> torch.nn.Module:
    # expert weights [4, 128, 32] and [4, 32, 64]: over 4,096 values, quantised; the rest stay fp32
    return build_tiny_moe(num_layers=1, hidden_size=32, expert_hidden=64, num_experts=4, vocab_size=40, seed=2).to(device)


def test_adamw8bit_without_torchao_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.optim", None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "torchao", None)
    with pytest.raises(RuntimeError, match=r"adamw8bit needs torchao.*gspo-bench\[lowmem\].*train.optimizer: adamw"):
        make_optimizer(model_on("cpu"), TrainConfig(optimizer="adamw8bit"), lr=1e-3)


def one_update(device: str, optimizer: str, lr: float = 1e-2) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = model_on(device)
    opt = make_optimizer(model, TrainConfig(optimizer=optimizer), lr=lr)
    ids = torch.randint(4, 40, (2, 6), generator=torch.Generator().manual_seed(0)).to(device)
    model(input_ids=ids).logits.float().pow(2).mean().backward()
    opt.step()
    return model, opt


def check_8bit_update(device: str) -> None:
    plain, _ = one_update(device, "adamw")
    low, opt = one_update(device, "adamw8bit")
    start = model_on(device)
    for (name, p), q, p0 in zip(plain.named_parameters(), low.parameters(), start.parameters(), strict=True):
        step_plain, step_low = (p - p0).detach(), (q - p0).detach()
        # Adam's first step is lr * sign(grad) up to eps; 8-bit moments keep it within a few percent
        torch.testing.assert_close(step_low, step_plain, rtol=0.05, atol=1e-4, msg=name)
    quantised = [type(s["exp_avg"]).__name__ for s in opt.state.values()]
    assert "OptimState8bit" in quantised
    assert all(isinstance(group["lr"], float) for group in opt.param_groups)
    set_lr(opt, 5e-3, 1.0)
    assert opt.param_groups[0]["lr"] == 5e-3
    state = opt.state_dict()
    again = make_optimizer(low, TrainConfig(optimizer="adamw8bit"), lr=5e-3)
    again.load_state_dict(state)
    assert again.state_dict()["state"].keys() == state["state"].keys()


@needs_torchao
def test_adamw8bit_on_cpu():
    check_8bit_update("cpu")


@pytest.mark.gpu
@needs_torchao
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_adamw8bit_on_gpu():
    check_8bit_update("cuda")
