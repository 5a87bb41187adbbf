"""The `gspo-bench` command line: wiring only; the work lives in the library modules."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    help="Matched-compute benchmark of RL objectives (GRPO, GSPO, ...) on Mixture-of-Experts LMs.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
if not console.is_terminal:  # logs and pipes: wide enough that tables do not wrap
    console = Console(width=140)


@app.command("ls")
def list_registered() -> None:
    """List the registered objectives with their default clip ranges."""
    from gspo_bench.objectives import list_objectives, objective_spec

    table = Table(title="objectives")
    for col in ("name", "advantages", "clip_low", "clip_high", "description"):
        table.add_column(col)
    for name in list_objectives():
        spec = objective_spec(name)
        fmt = lambda v: "-" if v is None else f"{v:g}"  # noqa: E731
        table.add_row(name, spec.advantages, fmt(spec.clip_low), fmt(spec.clip_high), escape(spec.description))
    console.print(table)


@app.command()
def probe(
    objectives: str = typer.Option(
        "grpo,gspo,gspo_token,dapo,dr_grpo,gmpo,sapo,cispo", help="comma-separated objective names"
    ),
    family: str = typer.Option("qwen3_moe", help="tiny MoE family"),
    prompts: int = typer.Option(8, min=1),
    group_size: int = typer.Option(8, min=2),
    max_new_tokens: int = typer.Option(24, min=1),
    minibatches: int = typer.Option(4, min=1),
    lr: float = typer.Option(3e-4, min=0.0),
    seed: int = 0,
) -> None:
    """One RL step (K minibatch updates) of each objective on a tiny MoE from identical weights."""
    from gspo_bench.objectives import UnknownObjectiveError, objective_spec
    from gspo_bench.probe import ProbeConfig, run_probe

    names = [n.strip() for n in objectives.split(",") if n.strip()]
    for name in names:
        try:
            objective_spec(name)  # unknown names fail before any work
        except UnknownObjectiveError as err:
            raise typer.BadParameter(str(err), param_hint="--objectives") from None
    cfg = ProbeConfig(
        objectives=names, family=family, prompts=prompts, group_size=group_size,
        max_new_tokens=max_new_tokens, minibatches=minibatches, lr=lr, seed=seed,
    )
    console.print(f"probe: {family}, P={prompts} x G={group_size}, K={minibatches} minibatches, lr={lr:g}")
    columns = ["loss", "clip/frac", "ratio/token_var", "ratio/seq_var", "kl/old_new", "moe/drift", "moe/drift_expert",
               "grad/norm", "time/update_s"]
    table = Table(title="one RL step per objective: means over the K minibatches")
    table.add_column("objective")
    for col in columns:
        table.add_column(col, justify="right")
    with console.status("sampling and updating ...") as status:
        rows = run_probe(cfg, on_result=lambda r: status.update(f"done: {r['objective']}"))
    for row in rows:
        table.add_row(row["objective"], *(f"{row[c]:.3g}" for c in columns))
    console.print(table)
    console.print(f"reward/mean of the shared rollouts: {rows[0]['reward/mean']:.3f}")


@app.command()
def version() -> None:
    """Print the gspo-bench version."""
    from gspo_bench import __version__

    console.print(__version__)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
