"""Performance benchmark (not a test): gspo-bench's RL step against TRL's GRPOTrainer, the cost of
the measurements and of routing replay, and step time against G x T.

    python experiments/perf/bench.py                      # all three parts -> results/perf/
    python experiments/perf/bench.py --parts compare --repeats 9
    python experiments/perf/bench.py --device cuda --dtype bfloat16 --out results/perf/gpu/tiny
    python experiments/perf/bench.py --preset mid --parts compare --frameworks gspo-bench,trl --out results/perf/gpu/mid

`--preset mid` is the mid-size MoE of the GPU work (qwen3_moe, 16 layers, hidden 1024, 16 heads, 4 KV
heads, 64 experts of width 384, top-8: 1.25 B parameters, 0.19 B active; P = 32, G = 8, T = 128, bf16
on CUDA). Per step, gspo-bench's rollout and update seconds are reported beside the step (the
per-phase breakdown; `experiments/perf/gpu_phases.py` times generation and training alone).

One "RL step" is the same work on both sides: P prompts x G sampled responses of exactly T tokens
(</s> is never sampled, so lengths cannot differ between the two), rewards, group advantages, one
no-grad pass for the old policy's log-probs, then 4 minibatch updates (AdamW, grad clip 1.0, no KL,
aux loss off) from the same tiny MoE weights and tokenizer on the same prompts. TRL runs GSPO
(`importance_sampling_level="sequence"`, `loss_type="grpo"`) with `steps_per_generation=4`;
gspo-bench runs `gspo` with all its measurements on. A step's time is the wall time between the
ends of consecutive steps, so everything each framework does per step (logging, result writes)
counts. The first step of every run is a warm-up and is not counted; the frameworks alternate
(order flipped each repeat) and medians are reported.
"""

from __future__ import annotations

import json
import math
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import typer

from gspo_bench.config import RunSpec, parse_suite
from gspo_bench.models import build_char_tokenizer, build_tiny_moe, save_model
from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.tasks import make_task
from gspo_bench.train import step_seed, train_run

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@dataclass(frozen=True)
class Setting:
    prompts: int = 8  # P
    group: int = 8  # G
    max_new_tokens: int = 32  # T (every response has exactly T tokens)
    minibatches: int = 4
    lr: float = 1e-4
    # the quickstart model: 8 MoE layers, hidden 128, 8 experts of width 128, top-2
    num_layers: int = 8
    hidden_size: int = 128
    expert_hidden: int = 128
    num_experts: int = 8
    top_k: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    task: str = "countdown"
    threads: int = 2
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 0

    @property
    def tokens_per_step(self) -> int:  # response tokens sampled per RL step
        return self.prompts * self.group * self.max_new_tokens


PRESETS = {
    "mid": dict(num_layers=16, hidden_size=1024, num_heads=16, num_kv_heads=4, num_experts=64, expert_hidden=384,
                top_k=8, prompts=32, group=8, max_new_tokens=128, device="cuda", dtype="bfloat16"),
}


# ---------------------------------------------------------------------------- shared setup
def save_initial_weights(setting: Setting, path: Path) -> Path:
    """The tiny MoE (random init, seeded) and the char tokenizer both frameworks start from."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe(
        "qwen3_moe", seed=setting.seed, vocab_size=len(tokenizer), num_layers=setting.num_layers,
        hidden_size=setting.hidden_size, expert_hidden=setting.expert_hidden, num_experts=setting.num_experts,
        top_k=setting.top_k, num_heads=setting.num_heads, num_kv_heads=setting.num_kv_heads,
    )
    return save_model(model, tokenizer, path)


def step_examples(setting: Setting, step: int):
    """The prompts gspo-bench's loop draws at `step` (seeded from (seed, step)); TRL gets the same."""
    task = make_task(setting.task, **task_params(setting))
    rng = random.Random(step_seed(setting.seed, step, 0))
    return [task.train_example(rng) for _ in range(setting.prompts)]


def task_params(setting: Setting) -> dict:
    return {"count": 3} if setting.task == "countdown" else {}


# ---------------------------------------------------------------------------- gspo-bench
def time_ours(setting: Setting, weights: Path, workdir: Path, steps: int, objective: str = "gspo",
              measure: bool = True, train: dict | None = None) -> list[dict]:
    """Run gspo-bench's loop for 1 warm-up + `steps` steps; one dict per counted step (`train`: more
    train settings, e.g. replay_scoring)."""
    suite = parse_suite({
        "name": "perf",
        "model": {"num_layers": setting.num_layers, "hidden_size": setting.hidden_size, "top_k": setting.top_k,
                  "num_experts": setting.num_experts, "expert_hidden": setting.expert_hidden,
                  "num_heads": setting.num_heads, "num_kv_heads": setting.num_kv_heads},
        "task": {"name": setting.task, "params": task_params(setting)},
        "warm_start": {"enabled": False},
        "rollout": {"prompts_per_step": setting.prompts, "group_size": setting.group,
                    "max_new_tokens": setting.max_new_tokens, "ignore_eos": True},
        "train": {"lr": setting.lr, "minibatches": setting.minibatches, "threads": setting.threads,
                  "device": setting.device, "dtype": setting.dtype, "measure": measure,
                  "checkpoint_every": 10**9, **(train or {})},
        "budget": {"kind": "steps", "value": steps + 1},
        "objectives": [{"name": objective}],
        "seeds": [setting.seed],
    })
    run_dir = Path(tempfile.mkdtemp(prefix=f"ours-{objective}-", dir=workdir))
    ends, rows = [], []

    def on_step(row: dict) -> None:
        sync(setting.device)
        ends.append(time.perf_counter())
        rows.append(row)

    train_run(RunSpec(suite=suite, entry=suite.objectives[0], seed=setting.seed, run_dir=run_dir,
                      init_weights=weights), on_step=on_step)
    return [{"step_s": ends[i] - ends[i - 1], "rollout_s": rows[i]["time/rollout_s"],
             "update_s": rows[i]["time/update_s"], "flops": rows[i]["compute/flops"], "mfu": rows[i]["perf/mfu"]}
            for i in range(1, len(ends))]


# ---------------------------------------------------------------------------- TRL
def time_trl(setting: Setting, weights: Path, workdir: Path, steps: int,
             gradient_checkpointing: bool = False) -> list[dict]:
    """Run TRL's GRPOTrainer (GSPO settings) for 1 warm-up + `steps` RL steps; one dict per counted step.

    TRL turns gradient checkpointing on by default; gspo-bench does not checkpoint, so identical
    settings mean `gradient_checkpointing=False` (the comparison also times TRL's default).
    """
    try:
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as err:
        raise SystemExit(f"the TRL comparison needs trl: pip install -e '.[perf]' ({err})") from None

    examples = [ex for step in range(1, steps + 2) for ex in step_examples(setting, step)]
    task = make_task(setting.task, **task_params(setting))
    dataset = Dataset.from_list([{"prompt": ex.prompt, "idx": i} for i, ex in enumerate(examples)])

    def reward(completions, idx, **_):
        return [task.reward(text, examples[i]) for text, i in zip(completions, idx, strict=True)]

    ends: list[float] = []

    class EndOfStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            sync(setting.device)
            ends.append(time.perf_counter())

    dtype = getattr(torch, setting.dtype)
    model = AutoModelForCausalLM.from_pretrained(weights, local_files_only=True, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(weights, local_files_only=True)
    batch = setting.prompts * setting.group
    args = GRPOConfig(
        output_dir=str(Path(tempfile.mkdtemp(prefix="trl-", dir=workdir))),
        per_device_train_batch_size=batch // setting.minibatches, steps_per_generation=setting.minibatches,
        gradient_accumulation_steps=1, num_iterations=1, num_generations=setting.group,
        max_completion_length=setting.max_new_tokens, generation_kwargs={"min_new_tokens": setting.max_new_tokens},
        temperature=1.0, top_p=1.0, top_k=0,
        importance_sampling_level="sequence", loss_type="grpo", epsilon=3e-4, epsilon_high=4e-4,
        beta=0.0, router_aux_loss_coef=0.0, scale_rewards="group",
        learning_rate=setting.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, optim="adamw_torch", max_steps=(steps + 1) * setting.minibatches,
        shuffle_dataset=False, seed=setting.seed, use_cpu=setting.device == "cpu",
        bf16=setting.dtype == "bfloat16", report_to=[], save_strategy="no", logging_steps=10**9,
        disable_tqdm=True, dataloader_num_workers=0, gradient_checkpointing=gradient_checkpointing,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[EndOfStep()])
    trainer.train()
    rl_ends = ends[setting.minibatches - 1 :: setting.minibatches]  # the end of each RL step's last update
    return [{"step_s": rl_ends[i] - rl_ends[i - 1]} for i in range(1, len(rl_ends))]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------- the parts
FRAMEWORKS = {  # name -> timer(setting, weights, workdir, steps)
    "gspo-bench": time_ours,
    "trl": time_trl,  # identical settings (no gradient checkpointing)
    "trl-default-ckpt": lambda *a: time_trl(*a, gradient_checkpointing=True),  # TRL's default
}


def compare(setting: Setting, weights: Path, workdir: Path, repeats: int, steps: int,
            frameworks: list[str] | None = None) -> list[dict]:
    frameworks = frameworks or list(FRAMEWORKS)
    rows = []
    for r in range(repeats):
        order = frameworks if r % 2 == 0 else frameworks[::-1]
        for framework in order:
            timings = FRAMEWORKS[framework](setting, weights, workdir, steps)
            for i, t in enumerate(timings):
                rows.append({"framework": framework, "repeat": r, "step": i + 1, **t,
                             "tokens_per_s": setting.tokens_per_step / t["step_s"]})
            print(f"  compare repeat {r} {framework}: median {median(timings):.3f} s/step", flush=True)
    return rows


OVERHEAD_CASES = {  # (objective, measure, more train settings)
    "measurements on": ("gspo", True, {}),
    "measurements off": ("gspo", False, {}),
    "replay off": ("grpo", False, {}),
    "replay on": ("grpo_rr", False, {}),
    "replay scoring off": ("grpo", True, {}),
    "replay scoring on": ("grpo", True, {"replay_scoring": True}),  # the batch scored three ways a step
}


def overhead(setting: Setting, weights: Path, workdir: Path, repeats: int, steps: int) -> list[dict]:
    rows = []
    for r in range(repeats):
        cases = list(OVERHEAD_CASES.items())
        for case, (objective, measure, train) in cases if r % 2 == 0 else cases[::-1]:
            timings = time_ours(setting, weights, workdir, steps, objective=objective, measure=measure, train=train)
            for i, t in enumerate(timings):
                rows.append({"case": case, "objective": objective, "measure": measure, "repeat": r,
                             "step": i + 1, **t})
            print(f"  overhead repeat {r} {case}: median {median(timings):.3f} s/step", flush=True)
    return rows


def scaling(setting: Setting, weights: Path, workdir: Path, steps: int, groups: list[int],
            lengths: list[int]) -> list[dict]:
    points = [("G", replace(setting, group=g)) for g in groups]
    points += [("T", replace(setting, max_new_tokens=t)) for t in lengths if t != setting.max_new_tokens]
    rows = []
    for sweep, point in points:
        timings = time_ours(point, weights, workdir, steps)
        rows.append({"sweep": sweep, "G": point.group, "T": point.max_new_tokens, "P": point.prompts,
                     "GxT": point.group * point.max_new_tokens, "tokens": point.tokens_per_step,
                     "step_s": median(timings), "rollout_s": statistics.median(t["rollout_s"] for t in timings),
                     "update_s": statistics.median(t["update_s"] for t in timings)})
        print(f"  scaling G={point.group} T={point.max_new_tokens}: {rows[-1]['step_s']:.3f} s/step", flush=True)
    rows += decode_latency(setting, weights)
    return rows


def decode_latency(setting: Setting, weights: Path, batches=(8, 32, 64, 128, 256), length: int = 64) -> list[dict]:
    """Seconds per decode step of the hf engine against the number of sequences decoded together:
    what a step of T decode steps costs whatever G is."""
    from transformers import AutoModelForCausalLM

    from gspo_bench.rollout import SamplingParams, make_engine

    model = AutoModelForCausalLM.from_pretrained(weights, local_files_only=True, dtype=getattr(torch, setting.dtype))
    model = model.to(setting.device)
    engine = make_engine("hf", pad_id=0, eos_id=2)
    prompts = [ex.prompt for ex in step_examples(setting, 1)]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(weights, local_files_only=True)
    encoded = [tokenizer.encode(p) for p in prompts]
    rows = []
    for sequences in batches:
        group = max(1, sequences // len(encoded))
        params = SamplingParams(group_size=group, max_new_tokens=length, capture_routing=False, ignore_eos=True)
        engine.generate(model, encoded[:1], SamplingParams(group_size=2, max_new_tokens=4, ignore_eos=True))  # warm
        times = []
        for _ in range(3):
            sync(setting.device)
            start = time.perf_counter()
            engine.generate(model, encoded, params)
            sync(setting.device)
            times.append(time.perf_counter() - start)
        n = group * len(encoded)
        rows.append({"sweep": "decode", "sequences": n, "T": length, "decode_step_s": statistics.median(times) / length})
        print(f"  decode: {n} sequences: {rows[-1]['decode_step_s'] * 1e3:.2f} ms per decode step", flush=True)
    return rows


# ---------------------------------------------------------------------------- statistics
def median(timings: list[dict]) -> float:
    return statistics.median(t["step_s"] for t in timings)


def two_term_fit(t: list[float], tokens: list[float], y: list[float]) -> dict:
    """Least squares y = a + b T + c (P G T): decoding's per-step cost scales with T alone."""
    import numpy as np

    design = np.column_stack([np.ones(len(t)), t, tokens])
    coef, *_ = np.linalg.lstsq(design, np.asarray(y), rcond=None)
    residual = np.asarray(y) - design @ coef
    ss_tot = float(((np.asarray(y) - np.mean(y)) ** 2).sum())
    return {"intercept_s": float(coef[0]), "per_decode_step_s": float(coef[1]), "per_token_s": float(coef[2]),
            "r2": 1 - float((residual**2).sum()) / ss_tot if ss_tot > 0 else math.nan}


def linear_fit(x: list[float], y: list[float]) -> dict:
    """Least squares y = a + b x with R^2."""
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((xi - mx) ** 2 for xi in x)
    b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y, strict=True)) / sxx
    a = my - b * mx
    ss_res = sum((yi - a - b * xi) ** 2 for xi, yi in zip(x, y, strict=True))
    ss_tot = sum((yi - my) ** 2 for yi in y)
    return {"intercept_s": a, "slope_s_per_token": b, "r2": 1 - ss_res / ss_tot if ss_tot > 0 else math.nan}


def paired_ratio(rows: list[dict], key: str, num: str, den: str) -> list[float]:
    """Per repeat, median step time of `num` over that of `den` (pairs taken within a repeat)."""
    out = []
    for r in sorted({row["repeat"] for row in rows}):
        def med(v, r=r):
            return statistics.median(row["step_s"] for row in rows if row[key] == v and row["repeat"] == r)
        out.append(med(num) / med(den))
    return out


def summarize(setting: Setting, compare_rows, overhead_rows, scaling_rows) -> dict:
    summary: dict = {"setting": asdict(setting), "tokens_per_step": setting.tokens_per_step}
    present = {r["framework"] for r in compare_rows}
    if {"gspo-bench", "trl"} <= present:
        med = {f: statistics.median(r["step_s"] for r in compare_rows if r["framework"] == f) for f in present}
        ours = [r for r in compare_rows if r["framework"] == "gspo-bench"]
        summary["compare"] = {
            "ours_step_s": med["gspo-bench"], "trl_step_s": med["trl"],
            "ours_rollout_s": statistics.median(r["rollout_s"] for r in ours),
            "ours_update_s": statistics.median(r["update_s"] for r in ours),
            # within-repeat pairs: a slow spell of the machine hits both sides of a pair
            "ratio_ours_over_trl": statistics.median(paired_ratio(compare_rows, "framework", "gspo-bench", "trl")),
            "ratio_per_repeat": paired_ratio(compare_rows, "framework", "gspo-bench", "trl"),
            "ours_tokens_per_s": setting.tokens_per_step / med["gspo-bench"],
            "trl_tokens_per_s": setting.tokens_per_step / med["trl"],
        }
        if "trl-default-ckpt" in present:
            summary["compare"] |= {"trl_default_step_s": med["trl-default-ckpt"], "ratio_ours_over_trl_default":
                                   statistics.median(paired_ratio(compare_rows, "framework", "gspo-bench",
                                                                  "trl-default-ckpt"))}
    if overhead_rows:
        m = paired_ratio(overhead_rows, "case", "measurements on", "measurements off")
        rr = paired_ratio(overhead_rows, "case", "replay on", "replay off")
        scoring = paired_ratio(overhead_rows, "case", "replay scoring on", "replay scoring off")
        summary["overhead"] = {
            "measurements": statistics.median(m) - 1, "measurements_per_repeat": [v - 1 for v in m],
            "replay": statistics.median(rr) - 1, "replay_per_repeat": [v - 1 for v in rr],
            "replay_scoring": statistics.median(scoring) - 1, "replay_scoring_per_repeat": [v - 1 for v in scoring],
            **{f"{case}_step_s": statistics.median(r["step_s"] for r in overhead_rows if r["case"] == case)
               for case in OVERHEAD_CASES},
        }
    if scaling_rows:
        points = [r for r in scaling_rows if r["sweep"] in ("G", "T")]
        tokens, times = [r["tokens"] for r in points], [r["step_s"] for r in points]
        summary["scaling"] = {**linear_fit(tokens, times), "points": len(points),
                              "g_range": f"{min(r['G'] for r in points)}..{max(r['G'] for r in points)}",
                              "t_range": f"{min(r['T'] for r in points)}..{max(r['T'] for r in points)}",
                              "two_term": two_term_fit([r["T"] for r in points], tokens, times)}
        decode = [r for r in scaling_rows if r["sweep"] == "decode"]
        if decode:
            fit = linear_fit([r["sequences"] for r in decode], [r["decode_step_s"] for r in decode])
            summary["decode"] = {"fixed_s": fit["intercept_s"], "per_sequence_s": fit["slope_s_per_token"],
                                 "r2": fit["r2"], "batches": [r["sequences"] for r in decode]}
    return summary


# ---------------------------------------------------------------------------- outputs
def write_csv(rows: list[dict], path: Path) -> None:
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.6g")


def plot(out: Path, compare_rows, overhead_rows, scaling_rows, summary: dict) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    panels = [p for p, rows in (("compare", compare_rows if "compare" in summary else []), ("overhead", overhead_rows), ("scaling", scaling_rows)) if rows]
    if not panels:  # nothing to compare (e.g. one framework alone): the CSVs say it all
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        if panel == "compare":
            present = [f for f in FRAMEWORKS if any(r["framework"] == f for r in compare_rows)]
            sns.boxplot(pd.DataFrame(compare_rows), x="framework", y="step_s", ax=ax, order=present)
            c = summary["compare"]
            ax.set_title(f"one RL step, P x G x T = {summary['tokens_per_step']} tokens\n"
                         f"ours / TRL = {c['ratio_ours_over_trl']:.2f}")
            ax.set_ylabel("seconds per RL step")
        elif panel == "overhead":
            sns.boxplot(pd.DataFrame(overhead_rows), x="case", y="step_s", ax=ax, order=list(OVERHEAD_CASES))
            o = summary["overhead"]
            ax.set_title(f"measurements {o['measurements']:+.1%}, routing replay {o['replay']:+.1%}")
            ax.set_ylabel("seconds per RL step")
            ax.tick_params(axis="x", rotation=20)
        else:
            frame = pd.DataFrame([r for r in scaling_rows if r["sweep"] in ("G", "T")])
            frame["sweep"] = frame["sweep"].map({"G": "G sweep (T fixed)", "T": "T sweep (G fixed)"})
            sns.scatterplot(frame, x="tokens", y="step_s", hue="sweep", style="sweep", s=60, ax=ax)
            s = summary["scaling"]
            xs = [0, frame["tokens"].max()]
            ax.plot(xs, [s["intercept_s"] + s["slope_s_per_token"] * x for x in xs], color="gray", lw=1)
            ax.set_title(f"step time vs P x G x T: R$^2$ = {s['r2']:.3f}\n"
                         f"{s['slope_s_per_token'] * 1e3:.3f} ms per token + {s['intercept_s']:.2f} s")
            ax.set_xlabel("response tokens per step (P x G x T)")
            ax.set_ylabel("seconds per RL step")
    fig.tight_layout()
    path = out / "perf.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def summary_markdown(summary: dict, command: str) -> str:
    s = summary["setting"]
    lines = [f"Command: `{command}`", "",
             f"Setting: qwen3_moe ({s['num_layers']} layers, hidden {s['hidden_size']}, {s['num_experts']} "
             f"experts of width {s['expert_hidden']}, top-{s['top_k']}), P={s['prompts']} G={s['group']} T={s['max_new_tokens']}, "
             f"{s['minibatches']} minibatches, {s['device']} {s['dtype']}, {s['threads']} threads.", ""]
    if "compare" in summary:
        c = summary["compare"]
        lines += [f"- RL step (medians): gspo-bench {c['ours_step_s']:.3f} s, TRL GRPOTrainer {c['trl_step_s']:.3f} s: "
                  f"**ours / TRL = {c['ratio_ours_over_trl']:.2f}** (median of per-repeat ratios: "
                  f"{', '.join(f'{v:.2f}' for v in c['ratio_per_repeat'])}); "
                  f"{c['ours_tokens_per_s']:.0f} vs {c['trl_tokens_per_s']:.0f} response tokens/s",
                  f"- gspo-bench's step by phase (medians): rollout {c['ours_rollout_s']:.3f} s, update (old-policy "
                  f"pass, {s['minibatches']} minibatch updates, measurements) {c['ours_update_s']:.3f} s"]
        if "trl_default_step_s" in c:
            lines += [f"- against TRL's defaults (gradient checkpointing on): TRL {c['trl_default_step_s']:.3f} s, "
                      f"ours / TRL = {c['ratio_ours_over_trl_default']:.2f}"]
    if "overhead" in summary:
        o = summary["overhead"]
        lines += [f"- all measurements (ratio stats, clip fractions, routing capture, drift, mismatch): "
                  f"**{o['measurements']:+.1%}** of step time (per repeat: "
                  f"{', '.join(f'{v:+.1%}' for v in o['measurements_per_repeat'])})",
                  f"- routing replay: **{o['replay']:+.1%}** (per repeat: "
                  f"{', '.join(f'{v:+.1%}' for v in o['replay_per_repeat'])})"]
        if "replay_scoring" in o:
            lines += [f"- paired replay scoring (`train.replay_scoring`: the batch scored under live, R2 and R3 "
                      f"routing each step), GRPO with measurements: **{o['replay_scoring']:+.1%}** (per repeat: "
                      f"{', '.join(f'{v:+.1%}' for v in o['replay_scoring_per_repeat'])})"]
    if "scaling" in summary:
        f = summary["scaling"]
        two = f["two_term"]
        lines += [f"- step time = {f['intercept_s']:.3f} s + {f['slope_s_per_token'] * 1e3:.4f} ms x (P x G x T): "
                  f"**R² = {f['r2']:.4f}** over {f['points']} points (G {f['g_range']}, T {f['t_range']})",
                  f"- step time = {two['intercept_s']:.3f} s + {two['per_decode_step_s'] * 1e3:.2f} ms x T + "
                  f"{two['per_token_s'] * 1e3:.4f} ms x (P x G x T): **R² = {two['r2']:.4f}**"]
    if "decode" in summary:
        d = summary["decode"]
        lines += [f"- one decode step (hf engine) = {d['fixed_s'] * 1e3:.2f} ms + {d['per_sequence_s'] * 1e3:.4f} ms "
                  f"per sequence (R² = {d['r2']:.3f}, {min(d['batches'])}..{max(d['batches'])} sequences)"]
    return "\n".join(lines) + "\n"


@app.command()
def main(
    parts: str = typer.Option("compare,overhead,scaling", help="comma-separated: compare, overhead, scaling"),
    out: Path = typer.Option(Path("results/perf"), help="where CSVs, the plot and the summary go"),
    repeats: int = typer.Option(5, min=1, help="interleaved repeats (compare, overhead)"),
    steps: int = typer.Option(5, min=1, help="counted RL steps per run (after one warm-up step)"),
    prompts: int = typer.Option(8, min=1), group: int = typer.Option(8, min=2),
    max_new_tokens: int = typer.Option(32, min=1),
    groups: str = typer.Option("4,8,16,32", help="G values of the scaling sweep"),
    lengths: str = typer.Option("16,32,64,128,256", help="T values of the scaling sweep"),
    frameworks: str = typer.Option(",".join(FRAMEWORKS), help="compare: which frameworks"),
    threads: int = typer.Option(2, min=1), device: str = typer.Option("cpu"),
    dtype: str = typer.Option("float32", help="float32 or bfloat16"),
    preset: str = typer.Option("", help="mid: the 1.25 B mid-size MoE, P=32 G=8 T=128, bf16 on cuda (overrides "
                               "--prompts/--group/--max-new-tokens/--device/--dtype)"),
) -> None:
    chosen = [p.strip() for p in parts.split(",") if p.strip()]
    unknown = set(chosen) - {"compare", "overhead", "scaling"}
    if unknown:
        raise typer.BadParameter(f"unknown parts {sorted(unknown)}; choose from compare, overhead, scaling")
    torch.set_num_threads(threads)
    setting = Setting(prompts=prompts, group=group, max_new_tokens=max_new_tokens, threads=threads,
                      device=device, dtype=dtype)
    if preset:
        if preset not in PRESETS:
            raise typer.BadParameter(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
        setting = replace(setting, **PRESETS[preset])
    if setting.device.startswith("cuda") and not torch.cuda.is_available():
        raise typer.BadParameter(f"--device {setting.device}: this machine has no CUDA device")
    out.mkdir(parents=True, exist_ok=True)
    compare_rows = overhead_rows = scaling_rows = []
    with tempfile.TemporaryDirectory(prefix="gspo-bench-perf-") as tmp:
        workdir = Path(tmp)
        weights = save_initial_weights(setting, workdir / "init")
        if "compare" in chosen:
            compare_rows = compare(setting, weights, workdir, repeats, steps, frameworks.split(","))
            write_csv(compare_rows, out / "compare.csv")
        if "overhead" in chosen:
            overhead_rows = overhead(setting, weights, workdir, repeats, steps)
            write_csv(overhead_rows, out / "overhead.csv")
        if "scaling" in chosen:
            scaling_rows = scaling(setting, weights, workdir, steps,
                                   [int(g) for g in groups.split(",")], [int(t) for t in lengths.split(",")])
            write_csv(scaling_rows, out / "scaling.csv")
    summary = summarize(setting, compare_rows, overhead_rows, scaling_rows)
    summary["machine"] = {"python": platform.python_version(), "torch": torch.__version__,
                          "cpu": platform.processor() or platform.machine(),
                          "gpu": torch.cuda.get_device_name() if setting.device.startswith("cuda") else None}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    command = "python experiments/perf/bench.py " + " ".join(sys.argv[1:])
    (out / "summary.md").write_text(summary_markdown(summary, command.strip()))
    plot(out, compare_rows, overhead_rows, scaling_rows, summary)
    print((out / "summary.md").read_text())


if __name__ == "__main__":
    pin_kernels()  # as `gspo-bench` does, before anything computes: the same kernels as its runs
    app()
