"""GPU phases benchmark (not a test): generation and one training forward+backward of a mid-size MoE,
each way the project can run them, timed alone.

    python experiments/perf/gpu_phases.py --out results/perf/gpu            # the mid-size model (1.25 B)
    python experiments/perf/gpu_phases.py --preset tiny --device cpu --out /tmp/phases

Generation (B = P x G rows, exactly T new tokens each, `ignore_eos`):
- `generate, fp32 master, autocast`: transformers' generate on the fp32 training weights under bf16
  autocast (what a run did before the rollout copy);
- `generate, bf16 copy`: the hf engine's default on its bf16 rollout copy;
- `static, bf16 copy`: the hf engine's `decode: static` (one CUDA graph per decode step on a GPU).
Training (one forward+backward of a minibatch: B / 4 rows, as with the paper's 4 minibatches):
- fp32 weights under bf16 autocast, with the grouped-matmul autocast rule (`train.precision`) and
  without it (before this round: the experts in fp32);
- bf16 weights (a lower bound; not what a run does, its master weights are fp32).
Medians of `--repeats` timed repeats after one warm-up each.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

import torch
import typer

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.train import precision

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])

PRESETS = {  # model sizes and the batch: prompts P, group G, new tokens T
    "mid": dict(model=dict(num_layers=16, hidden_size=1024, num_heads=16, num_kv_heads=4, num_experts=64,
                           expert_hidden=384, top_k=8), prompts=32, group=8, max_new_tokens=128),
    "tiny": dict(model=dict(num_layers=8, hidden_size=128, num_experts=8, expert_hidden=128, top_k=2),
                 prompts=8, group=8, max_new_tokens=32),
}


def timed(fn, device: str, repeats: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def grouped_mm_rule(on: bool) -> None:
    """Register or remove the autocast rule for grouped expert matmuls."""
    if on:
        precision.register_grouped_mm_autocast("cuda")
    else:
        precision.unregister_grouped_mm_autocast("cuda")


def generation_rows(model, prompts, params, device: str, repeats: int) -> list[dict]:
    rows = []
    ways = [("generate, fp32 master, autocast", "generate", "float32"), ("generate, bf16 copy", "generate", "bfloat16"),
            ("static, bf16 copy", "static", "bfloat16")]
    for name, decode, dtype in ways:
        engine = make_engine("hf", pad_id=0, eos_id=2, dtype=dtype, decode=decode, copy_weights=dtype != "float32")
        engine.sync_weights(model)
        grouped_mm_rule(True)

        def run(engine=engine):
            with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
                engine.generate(model, prompts, params)

        times = timed(run, device, repeats)
        rows.append({"phase": "generation", "how": name, "median_s": statistics.median(times), "times_s": times})
        print(f"generation  {name:40s} {statistics.median(times):8.3f} s", flush=True)
    return rows


def training_rows(model, batch, n_response: int, device: str, repeats: int) -> list[dict]:
    rows = []
    bf16 = build_like(model).to(device=device, dtype=torch.bfloat16)
    for name, net, rule in [("fp32 weights, autocast, grouped-mm rule", model, True),
                            ("fp32 weights, autocast, no rule", model, False), ("bf16 weights", bf16, True)]:
        grouped_mm_rule(rule)

        def run(net=net):
            with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
                logp, _ = response_forward(net, batch["input_ids"], batch["attention_mask"], n_response)
            logp.float().mean().backward()
            net.zero_grad(set_to_none=True)

        times = timed(run, device, repeats)
        rows.append({"phase": "train forward+backward", "how": name, "median_s": statistics.median(times),
                     "times_s": times})
        print(f"train f+b   {name:40s} {statistics.median(times):8.3f} s", flush=True)
    grouped_mm_rule(True)
    return rows


def build_like(model):
    return type(model)(model.config).eval()


@app.command()
def main(preset: str = typer.Option("mid", help=f"one of {', '.join(PRESETS)}"),
         out: Path = typer.Option(Path("results/perf/gpu")), device: str = typer.Option("cuda"),
         repeats: int = typer.Option(3, min=1), threads: int = typer.Option(2, min=1)) -> None:
    if preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise typer.BadParameter(f"--device {device}: this machine has no CUDA device")
    torch.set_num_threads(threads)
    spec = PRESETS[preset]
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe("qwen3_moe", seed=0, vocab_size=len(tokenizer), **spec["model"]).to(device)
    prompts = [tokenizer.encode(f"{a} + {b} =") for a, b in zip(range(spec["prompts"]), range(7, 99), strict=False)]
    params = SamplingParams(group_size=spec["group"], max_new_tokens=spec["max_new_tokens"], ignore_eos=True,
                            seed=1, capture_routing=True)
    rows = generation_rows(model, prompts, params, device, repeats)
    rollout = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16", decode="static",
                          copy_weights=True).generate(model, prompts, params)
    minibatch = len(rollout.input_ids) // 4
    batch = {"input_ids": rollout.input_ids[:minibatch], "attention_mask": rollout.attention_mask[:minibatch]}
    rows += training_rows(model, batch, rollout.response_mask.shape[1], device, repeats)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"preset": preset, **spec, "parameters": sum(p.numel() for p in model.parameters()),
            "rows": len(prompts) * spec["group"], "torch": torch.__version__, "python": platform.python_version(),
            "device": torch.cuda.get_device_name() if device.startswith("cuda") else platform.machine()}
    (out / f"phases-{preset}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does, before anything computes: the same kernels as its runs
    app()
