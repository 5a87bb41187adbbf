"""Where an RL step's time goes, for gspo-bench and for TRL: py-spy samples of the benchmark's
compare runs, grouped into the model's forward, autograd backward, the optimizer, the generation
loop around the model, and everything else (the framework's own code).

    python experiments/perf/profile_step.py            # -> results/perf/profile.csv and profile.md

Needs py-spy (pip install -e '.[perf]'). Sampling at 100 Hz slows both frameworks alike; the shares,
not the times, are the result.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import typer

HERE = Path(__file__).resolve().parent
LOOPS = {"gspo-bench": "train_run (", "trl": "_inner_training_loop ("}  # frames that hold a run's steps
# first matching rule wins, innermost question first
CATEGORIES = [
    ("autograd backward (model)", lambda s: "_engine_run_backward" in s),
    ("optimizer step and grad clip", lambda s: "torch/optim/" in s or "clip_grad" in s),
    ("model forward (transformers modeling code)", lambda s: "transformers/models/" in s),
    ("generation loop around the model", lambda s: "transformers/generation/" in s),
]


def classify(stack: str) -> str:
    for name, rule in CATEGORIES:
        if rule(stack):
            return name
    return "framework code (loop, rewards, objective, logging, ...)"


def profile(framework: str, steps: int, rate: int) -> Counter:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "samples.txt"
        command = [sys.executable, str(HERE / "bench.py"), "--parts", "compare", "--repeats", "1",
                   "--steps", str(steps), "--frameworks", framework, "--out", tmp]
        subprocess.run(["py-spy", "record", "-r", str(rate), "-f", "raw", "-o", str(raw), "--", *command],
                       check=True, capture_output=True)
        counts: Counter = Counter()
        for line in raw.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if LOOPS[framework] in stack:
                counts[classify(stack)] += int(n)
        return counts


def main(out: Path = typer.Option(Path("results/perf")), steps: int = typer.Option(8, min=1),
         rate: int = typer.Option(100, min=1)) -> None:
    import pandas as pd

    rows = []
    for framework in ("gspo-bench", "trl"):
        counts = profile(framework, steps, rate)
        total = sum(counts.values())
        rows += [{"framework": framework, "category": c, "samples": n, "share": n / total} for c, n in counts.items()]
        print(f"{framework}: {total} samples inside the training loop", flush=True)
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "profile.csv", index=False, float_format="%.4f")
    table = frame.pivot(index="category", columns="framework", values="share").fillna(0.0)
    lines = [f"Command: `python experiments/perf/profile_step.py --steps {steps} --rate {rate}` "
             "(py-spy samples inside each framework's training loop; shares of them)", "",
             "| where | gspo-bench | TRL |", "|---|---|---|"]
    lines += [f"| {c} | {table.loc[c, 'gspo-bench']:.1%} | {table.loc[c, 'trl']:.1%} |" for c in table.index]
    (out / "profile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
