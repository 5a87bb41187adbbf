"""Benchmark (not a test): how far faster kernels could take a stability-map run on this CPU, measured
on the model of `experiments/stability/stage2_arms.yaml` at one thread, each way its matrix products
and its other ops could run.

    python experiments/perf/kernel_bound.py        # -> results/perf/kernel_bound/{kernel_bound.json,README.md}

Two kernel settings, each in a fresh process (the variables take effect only before torch's first kernel):
- `pinned`: gspo-bench's default (`gspo_bench.runtime.kernels`): MKL's COMPATIBLE branch for every
  matmul, ATen's and oneDNN's AVX2 kernels: the same bits on every x86-64 CPU with AVX2;
- `native`: `GSPO_BENCH_NATIVE_KERNELS=1`: the machine's fastest kernels, results per CPU model.

and, under each, three measurements:
- `mm`: GFLOP/s of one `torch.mm` at the shapes of one minibatch's matrix products;
- `update`: one minibatch's training forward and backward (`models.forward.response_forward`, its
  log-probs summed), eager, with the share of self CPU time in matrix products (torch's profiler:
  `aten::mm`, `aten::bmm`, `aten::addmm`, the experts' `aten::_grouped_mm` with the mm's it calls),
  and the same under `torch.compile` (Inductor, C++ for the CPU: the experts' grouped matmul is
  wrapped in a custom op so it stays one extern call as in eager instead of breaking the graph;
  `-march=x86-64-v3`, vector width from ATEN_CPU_CAPABILITY), with its compile time and its largest
  difference from eager's log-probs;
- `rollout`: the `hf` engine's rollout of the suite's step (8 prompts x 8, 12 new tokens, router
  noise 3, routes recorded), transformers' `generate` and our static-cache loop, eager; and
  `generate` under no_grad alone against inference mode (the engine's default on CPU), in
  alternating pairs.

The runs-per-hour bound applies the measured factors to a stage-2 run's CPU seconds per phase
(`experiments/perf/where_time_goes/stability_stage2.json`): updates and the old-policy pass take the
update's factor, the rollout its own, the rest stays (the warm start, cached across a suite's runs,
left out). It is an upper bound for compile: routing capture, R3's replay and router noise hook into
the model and would break its graph in a run; the isolated forward measured here has no hooks.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from gspo_bench.runtime.kernels import PINS

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])
ROOT = Path(__file__).resolve().parents[2]
MODEL = dict(num_layers=4, hidden_size=64, expert_hidden=64, num_experts=8, top_k=2)  # stage2_arms.yaml's model
ROWS, PROMPT, RESPONSE = 16, 10, 8  # one of 4 minibatches of 64 rows; sort prompts, ~5-12 response tokens
MATMUL_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::_grouped_mm")
PHASES_FILE = ROOT / "experiments/perf/where_time_goes/stability_stage2.json"
MODEL_PHASES = {"updates": "update", "old-policy pass": "update", "rollout (decode)": "rollout",
                "held-out evaluation": "rollout"}


def timed_ms(fn: Any, repeats: int, warmup: int = 3) -> float:
    """Median wall milliseconds of `fn()` over `repeats` calls after `warmup`."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def register_grouped_mm_op() -> Any:
    """torch._grouped_mm as a custom op with its own backward: Inductor calls it as one extern kernel
    (transformers' compile path for fp32 experts is a per-expert loop with a host sync, a graph break)."""
    import torch

    @torch.library.custom_op("kernel_bound::grouped_mm", mutates_args=(),
                             schema="(Tensor x, Tensor weight, Tensor offs) -> Tensor")
    def grouped_mm(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch._grouped_mm(x, weight, offs=offs)

    @grouped_mm.register_fake
    def _(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return x.new_empty(x.shape[0], weight.shape[2])

    @torch.library.custom_op("kernel_bound::grouped_mm_weight_grad", mutates_args=(),
                             schema="(Tensor x, Tensor grad, Tensor offs) -> Tensor")
    def weight_grad(x: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch._grouped_mm(x.t(), grad, offs=offs)

    @weight_grad.register_fake
    def _(x: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return x.new_empty(offs.shape[0], x.shape[1], grad.shape[1])

    def setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x, weight, offs = ctx.saved_tensors
        return grouped_mm(grad, weight.transpose(1, 2).contiguous(), offs), weight_grad(x, grad, offs), None

    grouped_mm.register_autograd(backward, setup_context=setup)
    return grouped_mm


def measure(kernels: str, repeats: int) -> dict[str, Any]:
    """This process's figures (its kernels were set by the caller's environment)."""
    import torch
    import torch._inductor.config as inductor
    import transformers.integrations.moe as hf_moe
    from torch.profiler import ProfilerActivity, profile

    from gspo_bench.models.forward import response_forward
    from gspo_bench.models.tiny import build_tiny_moe
    from gspo_bench.rollout.engine import SamplingParams, make_engine
    from gspo_bench.runtime.kernels import kernel_state

    torch.set_num_threads(1)
    figures: dict[str, Any] = {"kernels": kernels, "kernel_state": kernel_state()}
    # ---------------------------------------------------------------- matmul throughput
    tokens, hidden, expert = ROWS * (PROMPT + RESPONSE), MODEL["hidden_size"], MODEL["expert_hidden"]
    per_expert = tokens * MODEL["top_k"] // MODEL["num_experts"]
    shapes = {"attention projection": (tokens, hidden, hidden), "one expert's gate+up": (per_expert, hidden, 2 * expert),
              "one expert's down": (per_expert, expert, hidden)}
    figures["mm_gflops"] = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        ms = timed_ms(lambda a=a, b=b: a @ b, repeats * 20)
        figures["mm_gflops"][name] = {"shape": [m, k, n], "us": ms * 1000, "gflops": 2 * m * k * n / (ms / 1000) / 1e9}
    # ---------------------------------------------------------------- one minibatch's forward + backward
    model = build_tiny_moe("qwen3_moe", seed=0, **MODEL)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (ROWS, PROMPT + RESPONSE), generator=generator)
    mask = torch.ones_like(ids)

    def update(forward_model: torch.nn.Module) -> None:
        logp, _ = response_forward(forward_model, ids, mask, RESPONSE)
        logp.sum().backward()

    grouped_mm = register_grouped_mm_op()
    hf_moe._grouped_mm = lambda x, weight, offs: grouped_mm(x.to(weight.dtype), weight, offs)  # eager: the same kernel
    eager_ms = timed_ms(lambda: update(model), repeats)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            update(model)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    inductor.cpp.march = "x86-64-v3"  # AVX2 + FMA, not -march=native: the same code on every such CPU
    compiled = torch.compile(model, dynamic=False)
    start = time.perf_counter()
    update(compiled)
    compile_s = time.perf_counter() - start
    compiled_ms = timed_ms(lambda: update(compiled), repeats)
    with torch.no_grad():
        eager_logp, _ = response_forward(model, ids, mask, RESPONSE)
        compiled_logp, _ = response_forward(compiled, ids, mask, RESPONSE)
    figures["update"] = {"rows": ROWS, "width": PROMPT + RESPONSE, "response": RESPONSE, "eager_ms": eager_ms,
                         "matmul_share": matmul / total, "compiled_ms": compiled_ms, "compile_s": compile_s,
                         "compiled_max_abs_diff": float((eager_logp - compiled_logp).abs().max()),
                         "compiled_bitwise_equal": bool(torch.equal(eager_logp, compiled_logp))}
    # ---------------------------------------------------------------- the step's rollout
    prompts = [torch.randint(5, 60, (PROMPT,), generator=generator).tolist() for _ in range(8)]
    params = SamplingParams(group_size=8, max_new_tokens=12, seed=3, capture_routing=True)
    rollouts = {}
    for decode in ("generate", "static"):
        engine = make_engine("hf", pad_id=0, eos_id=2, decode=decode, router_noise=3.0)
        figures[f"rollout_{decode}_ms"] = timed_ms(lambda engine=engine: engine.generate(model, prompts, params),
                                                   max(3, repeats // 3), warmup=2)
        rollouts[decode] = engine.generate(model, prompts, params)
    figures["rollout_generate_no_grad_ms"], figures["rollout_generate_inference_ms"] = paired_inference_mode(
        lambda: make_engine("hf", pad_id=0, eos_id=2, router_noise=3.0).generate(model, prompts, params),
        max(6, repeats // 2))
    figures["rollout_static_same_tokens"] = bool(torch.equal(rollouts["generate"].response_ids,
                                                            rollouts["static"].response_ids))
    figures["rollout_static_same_logp_bits"] = bool(torch.equal(rollouts["generate"].sampling_logp,
                                                               rollouts["static"].sampling_logp))
    # the static loop's decode step compiled (no routing capture, no router noise: hooks would break its graph)
    import gspo_bench.rollout.static_decode as static_decode
    from gspo_bench.models.padding import left_pad

    rows = [p for p in prompts for _ in range(params.group_size)]
    prompt_ids, prompt_mask = left_pad(rows, 0)
    rule = static_decode.DecodeRule(eos_id=2, pad_id=0, min_new_tokens=0, temperature=1.0, top_p=1.0, seed=3)

    def decode() -> Any:
        return static_decode.static_decode(model.eval(), prompt_ids, prompt_mask, torch.arange(len(rows)), 12, rule,
                                           capture_routing=False, graph=False)

    eager_state = decode()
    figures["rollout_static_plain_ms"] = timed_ms(decode, max(3, repeats // 3), warmup=2)
    eager_step = static_decode.decode_step
    static_decode.decode_step = torch.compile(eager_step, dynamic=False)
    start = time.perf_counter()
    compiled_state = decode()
    figures["rollout_static_compiled_compile_s"] = time.perf_counter() - start
    figures["rollout_static_compiled_ms"] = timed_ms(decode, max(3, repeats // 3), warmup=2)
    static_decode.decode_step = eager_step
    figures["rollout_static_compiled_same_tokens"] = bool(torch.equal(eager_state.tokens, compiled_state.tokens))
    return figures


def paired_inference_mode(rollout: Any, repeats: int) -> tuple[float, float]:
    """Median ms of `rollout()` with the engine's decode under no_grad alone and under inference mode
    (`gspo_bench.rollout.hf.decodes_in_inference_mode`, its default on CPU), in alternating pairs."""
    import gspo_bench.rollout.hf as hf_engine

    default = hf_engine.decodes_in_inference_mode
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for i in range(repeats + 2):
            for inference in (False, True) if i % 2 == 0 else (True, False):
                hf_engine.decodes_in_inference_mode = default if inference else (lambda *args: False)
                start = time.perf_counter()
                rollout()
                if i >= 2:  # two warm-up pairs
                    times[inference].append((time.perf_counter() - start) * 1000)
    finally:
        hf_engine.decodes_in_inference_mode = default
    return statistics.median(times[False]), statistics.median(times[True])


def run_bound(phases: dict[str, float], factors: dict[str, float], dropped: tuple[str, ...] = ()) -> float:
    """Runs per hour, as a multiple of now, with each model phase `factors[...]` times faster and the
    phases whose names start with one of `dropped` gone."""
    faster = sum(s / factors.get(MODEL_PHASES.get(name, ""), 1.0) for name, s in phases.items()
                 if not name.startswith(dropped or ("\0",)))
    return sum(phases.values()) / faster


def stage2_phases() -> dict[str, float]:
    """A stage-2 run's CPU seconds per phase, the warm start (cached across a suite's runs) left out."""
    data = json.loads(PHASES_FILE.read_text())
    phases = {k: v for k, v in data["phases_cpu_s"].items() if not k.startswith("warm start")}
    return phases | {"other": data["other_cpu_s"]}


# worker processes per kernel setting before giving up. Each has an Inductor cache of its own: a native
# process using the cache a pinned one had filled aborted with heap corruption in 4 of 5 tries here
# (glibc's malloc checks), none of 5 with its own
TRIES = 3
WAYS = (("eager", "eager"), ("compiled", "eager"), ("compiled", "compiled"))  # (update, decode step)


def bounds(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs-per-hour multiple of each way, against pinned eager with `generate` (today's runs). A
    compiled decode step's factor is its own against the same loop eager, without routes or noise."""
    base = results["pinned"]
    phases = stage2_phases()
    rows = []
    for kernels, fig in results.items():
        for update_way, decode_way in WAYS:
            update = base["update"]["eager_ms"] / fig["update"]["compiled_ms" if update_way == "compiled" else "eager_ms"]
            rollout = base["rollout_generate_ms"] / fig["rollout_generate_ms"]
            if decode_way == "compiled":
                rollout *= fig["rollout_static_plain_ms"] / fig["rollout_static_compiled_ms"]
            factors = {"update": update, "rollout": rollout}
            rows.append({"kernels": kernels, "update": update_way, "decode step": decode_way, "update_x": update,
                         "rollout_x": rollout, "runs_per_hour_x": run_bound(phases, factors),
                         "with_no_checkpoint_or_rows_x": run_bound(phases, factors,
                                                                   dropped=("checkpoint", "metrics and layers rows"))})
    return rows


def write_readme(out: Path, results: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    def row(label: str, cell: Any) -> str:  # cell: one kernel setting's figures -> its text
        return f"| {label} | " + " | ".join(cell(results[k]) for k in ("pinned", "native")) + " |"

    lines = ["# Kernel bound: how far faster kernels could take a stage-2 run (this machine, one thread)", "",
             "`python experiments/perf/kernel_bound.py --out results/perf/kernel_bound` (figures in `kernel_bound.json`).",
             "", "| | pinned (default) | native |", "|---|---|---|"]
    for name in results["pinned"]["mm_gflops"]:
        shape = results["pinned"]["mm_gflops"][name]["shape"]
        lines.append(row(f"mm GFLOP/s, {name} {shape}", lambda f, name=name: f"{f['mm_gflops'][name]['gflops']:.1f}"))
    for label, key in (("update fwd+bwd, eager ms", "eager_ms"), ("update fwd+bwd, compiled ms", "compiled_ms"),
                       ("compile s (first call)", "compile_s")):
        lines.append(row(label, lambda f, key=key: f"{f['update'][key]:.1f}"))
    lines += [
        row("matrix products' share of eager update CPU", lambda f: f"{100 * f['update']['matmul_share']:.0f}%"),
        row("compiled log-probs bitwise equal to eager (largest difference)",
            lambda f: f"{f['update']['compiled_bitwise_equal']} ({f['update']['compiled_max_abs_diff']:.1e})"),
        row("rollout ms, `generate` under no_grad / under inference mode (the engine's default on CPU)",
            lambda f: f"{f['rollout_generate_no_grad_ms']:.1f} / {f['rollout_generate_inference_ms']:.1f}"),
        *(row(f"rollout ms, `{decode}`", lambda f, decode=decode: f"{f[f'rollout_{decode}_ms']:.1f}")
          for decode in ("generate", "static")),
        row("rollout ms, static loop without routes or noise: eager / decode step compiled",
            lambda f: f"{f['rollout_static_plain_ms']:.1f} / {f['rollout_static_compiled_ms']:.1f}"),
        row("its compile s; same tokens as eager",
            lambda f: f"{f['rollout_static_compiled_compile_s']:.1f}; {f['rollout_static_compiled_same_tokens']}"),
        row("worker processes that died before this one", lambda f: str(f["crashed_tries"])),
        row("static: same tokens / same log-prob bits as generate",
            lambda f: f"{f['rollout_static_same_tokens']} / {f['rollout_static_same_logp_bits']}"),
    ]
    lines += ["", "Runs per hour of a stage-2 run, as a multiple of today's (pinned, eager, `generate`), from the "
              "measured factors applied to its CPU seconds per phase:", "",
              "| kernels | update | decode step | update x | rollout x | runs per hour x | also no checkpoint or rows writes x |",
              "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['kernels']} | {row['update']} | {row['decode step']} | {row['update_x']:.2f} | {row['rollout_x']:.2f} | "
                     f"{row['runs_per_hour_x']:.2f} | {row['with_no_checkpoint_or_rows_x']:.2f} |")
    (out / "README.md").write_text("\n".join(lines) + "\n")


@app.command()
def main(out: Path = typer.Option(Path("results/perf/kernel_bound")), repeats: int = typer.Option(30, min=3),
         worker: str = typer.Option("", hidden=True), worker_out: Path = typer.Option(None, hidden=True)) -> None:
    if worker:
        worker_out.write_text(json.dumps(measure(worker, repeats)))
        return
    results = {}
    for kernels in ("pinned", "native"):
        env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
        env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)} | (
            {"GSPO_BENCH_NATIVE_KERNELS": "1"} if kernels == "native" else PINS)  # set before the worker's torch
        crashes = 0
        while True:  # each try in a fresh process and a fresh Inductor cache
            with tempfile.TemporaryDirectory() as tmp:
                target = Path(tmp) / "figures.json"
                done = subprocess.run([sys.executable, __file__, "--repeats", str(repeats), "--worker", kernels,
                                       "--worker-out", str(target)], env=env | {"TORCHINDUCTOR_CACHE_DIR": tmp})
                if done.returncode == 0:
                    results[kernels] = json.loads(target.read_text()) | {"crashed_tries": crashes}
                    break
            crashes += 1
            print(f"{kernels}: the worker died (exit {done.returncode}), try {crashes} of {TRIES}")
            if crashes == TRIES:
                raise SystemExit(f"{kernels}: {TRIES} tries died; no figures")
        print(f"{kernels}: {json.dumps(results[kernels]['update'])}")
    out.mkdir(parents=True, exist_ok=True)
    rows = bounds(results)
    (out / "kernel_bound.json").write_text(json.dumps({"results": results, "bounds": rows}, indent=1) + "\n")
    write_readme(out, results, rows)
    print((out / "README.md").read_text())


if __name__ == "__main__":
    app()
