"""Benchmark (not a test): the peak memory and time of one minibatch update on CPU, plain against
micro-batches (`train.micro_batch_tokens`) and the fused log-prob head (`train.logprob_chunk_tokens`).

    python experiments/perf/micro_memory.py [--out results/perf] [--repeats 5] [--threads 1]

The model is the quickstart's shape (qwen3_moe, 8 layers, hidden 128, 8 experts of width 128,
top-2) with a 16k vocabulary, so the head matters as on a real model; the batch is 128 uniform rows
(prompt 32 + response 160 tokens) in 4 minibatches of 32 rows (6,144 tokens); micro-batches hold
1/8 of a minibatch's tokens (768), the fused head 256 positions per block.
Peak memory: each setting in a fresh subprocess builds the model, the batch, the old-policy pass
and runs one warm-up update (AdamW's moments and the gradients exist from then on); then the
process's peak resident set is reset (`/proc/self/clear_refs`, Linux) and one minibatch update
runs (forward, backward, clip, AdamW): its peak memory is the peak RSS minus the RSS just before it
(tracemalloc does not see torch's allocations). Time: one process runs `--repeats` updates of every
setting, interleaved (order reversed every other repeat, after a warm-up round), and reports the
median and the median ratio to the plain update of the same repeat. `m2po` couples rows, so its
micro-batched update runs a no-grad pass over the minibatch first: its ratio beside `grpo`'s is
that pass's cost. The peak is the median of `--memory-repeats` fresh processes per setting, with
glibc's mmap threshold fixed at 64 KiB (`MALLOC_MMAP_THRESHOLD_`): every large tensor is then its
own mapping, returned when freed, and the RSS follows what torch holds (with glibc's adaptive
threshold, freed blocks stay in the heap and the same update's peak moved between 340 and 488 MiB
over three runs). Writes `micro_memory.csv` (every process), `micro_memory_times.csv` and
`micro_memory.md`.
"""
from __future__ import annotations

import ctypes
import dataclasses
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import typer

from gspo_bench.runtime.kernels import pin_kernels

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])

ROWS, PROMPT, RESPONSE, VOCAB, MINIBATCHES = 128, 32, 160, 16384, 4  # a minibatch: 32 rows x 192 tokens
HEAD_CHUNK = 256  # train.logprob_chunk_tokens where the fused head is on
SETTINGS = {  # name -> (objective, micro-batches of 1/8 of the minibatch's tokens, fused head)
    "plain": ("grpo", False, False),
    "fused head": ("grpo", False, True),
    "micro 1/8": ("grpo", True, False),
    "micro 1/8 + fused head": ("grpo", True, True),
    "plain, m2po": ("m2po", False, False),
    "micro 1/8, m2po (no-grad pass first)": ("m2po", True, False),
}


def rss_kib(field: str) -> int:
    """VmRSS or VmHWM (the peak since the last reset) of this process, KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}: this benchmark needs Linux")


def reset_peak() -> int:
    """Free what can be freed, reset the peak RSS to the current RSS; returns that RSS (KiB)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux >= 4.0)
    return rss_kib("VmRSS")


def setup(threads: int):
    """The model with its optimizer, the batch, pi_old and the 4 minibatches' rows."""
    from gspo_bench.config import TrainConfig
    from gspo_bench.models import build_tiny_moe
    from gspo_bench.train.old_policy import old_policy_pass
    from gspo_bench.train.optim import make_optimizer
    from gspo_bench.train.policy import Policy
    from gspo_bench.train.rollout import RolloutBatch

    torch.set_num_threads(threads)
    model = build_tiny_moe("qwen3_moe", num_layers=8, hidden_size=128, expert_hidden=128, num_experts=8, top_k=2,
                           vocab_size=VOCAB, seed=0).train()
    policy = Policy(model, make_optimizer(model, TrainConfig(), lr=1e-5))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, VOCAB, (ROWS, PROMPT + RESPONSE), generator=gen)
    batch = RolloutBatch(input_ids=ids, attention_mask=torch.ones_like(ids),
                         response_mask=torch.ones(ROWS, RESPONSE, dtype=torch.bool),
                         sampling_logp=torch.zeros(ROWS, RESPONSE), routing=None, rewards=torch.zeros(ROWS),
                         advantages=torch.randn(ROWS, generator=gen), finite=torch.tensor(True))
    old = old_policy_pass(policy, batch, temperature=1.0, record_routing=False, head_chunk=HEAD_CHUNK)
    old = dataclasses.replace(old, logp=old.logp + 0.05 * torch.randn(old.logp.shape, generator=gen))
    return policy, batch, old, torch.arange(ROWS).tensor_split(MINIBATCHES)


def update_for(name: str, rows: torch.Tensor):
    """The objective and UpdateSettings of setting `name` (micro-batches of 1/8 of a minibatch's tokens)."""
    from gspo_bench.objectives import objective_spec
    from gspo_bench.train.update import UpdateSettings

    objective_name, micro, fused = SETTINGS[name]
    spec = objective_spec(objective_name)
    tokens = rows.numel() * (PROMPT + RESPONSE)
    return spec.fn, UpdateSettings(inputs=spec.inputs, coupled=spec.coupled, head_chunk=HEAD_CHUNK if fused else None,
                                   micro_batch_tokens=tokens // 8 if micro else None)


def measure(name: str, threads: int) -> dict:
    """One setting in this (fresh) process: the peak memory of one update after a warm-up update."""
    from gspo_bench.train.update import update_minibatch

    policy, batch, old, rows = setup(threads)
    objective, settings = update_for(name, rows[0])
    update_minibatch(policy, objective, batch, old, rows[1], settings)  # warm-up: AdamW state, gradients
    before = reset_peak()
    update_minibatch(policy, objective, batch, old, rows[0], settings)
    peak = rss_kib("VmHWM")
    return {"setting": name, "objective": SETTINGS[name][0], "minibatch_tokens": rows[0].numel() * (PROMPT + RESPONSE),
            "micro_batch_tokens": settings.micro_batch_tokens, "logprob_chunk_tokens": settings.head_chunk,
            "rss_before_mib": before / 1024, "peak_rss_mib": peak / 1024, "update_peak_mib": (peak - before) / 1024}


NO_GRAD_PASS = "the no-grad pass alone (m2po's, micro 1/8)"


def timing(repeats: int, threads: int) -> list[dict]:
    """Seconds per update of every setting, and of the coupled objective's no-grad pass alone,
    interleaved in one process (order reversed every other repeat)."""
    from gspo_bench.train.micro_batches import plan_micro_batches
    from gspo_bench.train.update import no_grad_pass, update_minibatch

    policy, batch, old, rows = setup(threads)
    out = []
    names = [*SETTINGS, NO_GRAD_PASS]
    for r in range(repeats + 1):  # repeat 0 warms up
        minibatch = rows[r % MINIBATCHES]
        for name in names if r % 2 == 0 else names[::-1]:
            coupled_micro = "micro 1/8, m2po (no-grad pass first)"
            objective, settings = update_for(name if name in SETTINGS else coupled_micro, minibatch)
            start = time.perf_counter()
            if name == NO_GRAD_PASS:
                plan = plan_micro_batches(batch.attention_mask[minibatch], batch.n_response, settings.micro_batch_tokens)
                no_grad_pass(policy, batch, old, minibatch, plan, settings)
            else:
                update_minibatch(policy, objective, batch, old, minibatch, settings)
            if r:
                out.append({"setting": name, "repeat": r, "update_s": time.perf_counter() - start})
    return out


@app.command()
def main(out: Path = typer.Option(Path("results/perf"), help="where micro_memory.csv and .md go"),
         repeats: int = typer.Option(5, min=1, help="timed updates per setting (interleaved, after a warm-up round)"),
         threads: int = typer.Option(1, min=1, help="torch threads"),
         memory_repeats: int = typer.Option(3, min=1, help="fresh processes per setting for the peak (median, range)"),
         one: str | None = typer.Option(None, hidden=True, help="measure this setting's peak here, print JSON")) -> None:
    if one is not None:  # a fresh process per setting: its peak RSS is its own
        print(json.dumps(measure(one, threads)))
        return
    # every large tensor its own mmap, returned to the system when freed: RSS follows what torch holds
    # (glibc's adaptive threshold would otherwise keep freed blocks in the heap, at random sizes)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
    rows = []
    for r in range(memory_repeats):
        for name in SETTINGS:
            done = subprocess.run([sys.executable, __file__, "--one", name, "--threads", str(threads)],
                                  capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise RuntimeError(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
            rows.append({**json.loads(done.stdout.strip().splitlines()[-1]), "repeat": r})
            print(f"  {name}: update peak {rows[-1]['update_peak_mib']:.0f} MiB", flush=True)
    peaks = pd.DataFrame(rows)
    times = pd.DataFrame(timing(repeats, threads))
    frame = peaks.groupby("setting", sort=False).median(numeric_only=True).drop(columns="repeat")
    frame["update_peak_min_mib"] = peaks.groupby("setting")["update_peak_mib"].min()
    frame["update_peak_max_mib"] = peaks.groupby("setting")["update_peak_mib"].max()
    frame["update_s_median"] = times.groupby("setting")["update_s"].median()
    per_repeat = times.pivot(index="repeat", columns="setting", values="update_s")
    frame["time_vs_plain"] = per_repeat.div(per_repeat["plain"], axis=0).median()  # paired within a repeat
    frame["peak_vs_plain"] = frame["update_peak_mib"] / frame.loc["plain", "update_peak_mib"]
    extra = per_repeat[NO_GRAD_PASS].div(per_repeat["micro 1/8"]).median()  # paired within a repeat
    frame = frame.reset_index()
    out.mkdir(parents=True, exist_ok=True)
    peaks.to_csv(out / "micro_memory.csv", index=False)
    times.to_csv(out / "micro_memory_times.csv", index=False)
    command = "python experiments/perf/micro_memory.py " + " ".join(sys.argv[1:])
    shown = frame[["setting", "micro_batch_tokens", "logprob_chunk_tokens", "rss_before_mib", "update_peak_mib",
                   "update_peak_min_mib", "update_peak_max_mib", "peak_vs_plain", "update_s_median", "time_vs_plain"]]
    text = (f"# Peak memory of one minibatch update on CPU\n\n`{command.strip()}`\n\n"
            f"qwen3_moe, 8 layers, hidden 128, 8 experts x 128, top-2, vocabulary {VOCAB}; a minibatch of "
            f"{ROWS // MINIBATCHES} rows x {PROMPT + RESPONSE} tokens; {threads} thread(s); torch {torch.__version__}, "
            f"{platform.machine()}. update_peak_mib: peak RSS during one update minus the RSS before it, median of "
            f"{memory_repeats} fresh processes per setting (min, max beside it; glibc's mmap threshold fixed at 64 KiB "
            f"so that freed tensors leave the RSS); peak_vs_plain: of the medians; update_s_median: median of {repeats} updates per setting, interleaved in one "
            f"process; time_vs_plain: median over repeats of the ratio to plain's update in the same repeat.\n\n"
            + shown.to_markdown(index=False, floatfmt=".3g") + "\n\n"
            f"The no-grad pass a coupled objective runs before its micro-batches, timed alone: median "
            f"{times[times.setting == NO_GRAD_PASS].update_s.median():.3g} s, {extra:.2f} x the micro-batched grpo "
            f"update of the same repeat (median of the paired ratios).\n")
    (out / "micro_memory.md").write_text(text)
    print(text)


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does, before anything computes: the same kernels as its runs
    app()
