"""What the per-update signals cost (not a test): the gradient-weight clip measure (`clip/grad_*`: one
autograd pass from the loss to the log-probs) and the cosine of consecutive update gradients
(`grad/cos_prev*`: one copy of the gradient and three dot products per update), each against the step's K
minibatch updates with every other measurement on.

    python experiments/perf/signal_cost.py                 # -> results/perf/signal_cost.csv and .md

On the benchmark's model (experiments/perf/bench.py: qwen3_moe, 8 layers, hidden 128, 8 experts top-2; P = 8,
G = 8, T = 32, K = 4; fp32 on the CPU at 2 threads), `update_policy` on one batch is timed with both signals
on, with each one off (monkeypatched to nothing), and with both off, interleaved over repeats; the costs are
the medians of the per-repeat differences, as a share of the update phase (an upper bound on their share of
a step, which also generates the batch).
"""

from __future__ import annotations

import platform
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import pandas as pd
import torch
import typer

from gspo_bench.config import TrainConfig
from gspo_bench.models import build_tiny_moe
from gspo_bench.objectives import objective_spec
from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.train import measurements, update
from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.optim import make_optimizer
from gspo_bench.train.policy import Policy
from gspo_bench.train.rollout import RolloutBatch

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])
CASES = ("both on", "gradient weights off", "cosines off", "both off")


def batch_and_policy(prompts: int = 8, group: int = 8, prompt_len: int = 8, response_len: int = 32):
    gen = torch.Generator().manual_seed(0)
    model = build_tiny_moe(num_layers=8, hidden_size=128, expert_hidden=128, num_experts=8, top_k=2, seed=0).train()
    rows, width = prompts * group, prompt_len + response_len
    ids = torch.randint(4, 50, (rows, width), generator=gen)
    batch = RolloutBatch(input_ids=ids, attention_mask=torch.ones(rows, width, dtype=torch.long),
                         response_mask=torch.ones(rows, response_len, dtype=torch.bool),
                         sampling_logp=torch.zeros(rows, response_len), routing=None,
                         rewards=torch.zeros(rows), advantages=torch.randn(rows, generator=gen), finite=torch.tensor(True))
    policy = Policy(model, make_optimizer(model, TrainConfig(), lr=1e-5))
    old = old_policy_pass(policy, batch, temperature=1.0)
    return policy, batch, old


def timed(policy, batch, old, case: str) -> float:
    with ExitStack() as stack:
        if case in ("gradient weights off", "both off"):
            stack.enter_context(mock.patch.object(update, "gradient_weights", lambda *a, **k: {}))
        if case in ("cosines off", "both off"):
            stack.enter_context(mock.patch.object(measurements.GradientCosines, "add", lambda self, applied: None))
        order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(1))
        start = time.perf_counter()
        update.update_policy(policy, objective_spec("gspo").fn, batch, old, order, 4, update.UpdateSettings())
        return time.perf_counter() - start


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform reports."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@app.command()
def main(repeats: int = typer.Option(15, min=3), threads: int = typer.Option(2, min=1),
         out: Path = typer.Option(Path("results/perf"), help="folder for signal_cost.csv and .md")) -> None:
    pin_kernels()
    torch.set_num_threads(threads)
    policy, batch, old = batch_and_policy()
    timed(policy, batch, old, "both on")  # warm-up
    rows = []
    for r in range(repeats):
        for case in CASES if r % 2 == 0 else CASES[::-1]:
            rows.append({"repeat": r, "case": case, "update_s": timed(policy, batch, old, case)})
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "signal_cost.csv", index=False)
    wide = frame.pivot(index="repeat", columns="case", values="update_s")
    base = statistics.median(wide["both on"])
    lines = [f"Command: `python experiments/perf/signal_cost.py --repeats {repeats} --threads {threads}`", "",
             f"Machine: {cpu_model()}, {threads} threads; update phase (K = 4 "
             f"minibatches of 16 responses x 32 tokens, every measurement on): median {base:.3f} s.", ""]
    for name, off in (("gradient weights (clip/grad_*)", "gradient weights off"), ("gradient cosines (grad/cos_prev*)", "cosines off"),
                      ("both", "both off")):
        diffs = (wide["both on"] - wide[off]) / wide[off]
        lines.append(f"- {name}: **{statistics.median(diffs):+.1%}** of the update phase (median of per-repeat "
                     f"differences; quartiles {diffs.quantile(0.25):+.1%} .. {diffs.quantile(0.75):+.1%})")
    (out / "signal_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    app()
