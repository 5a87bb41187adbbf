"""The README's objective table: every registered objective and algorithm, what it does (its registry
line), and where it ran in a tuned quickstart-size comparison, its final held-out reward (mean over the
comparison's seeds) and on how many seeds RL learned (the report's learnability test), computed from the
committed run folders.

    python experiments/objective_table.py            # print the table
    python experiments/objective_table.py --write    # replace it in README.md, between its markers

`tests/test_objective_table.py` holds README.md to what this prints.
"""

from __future__ import annotations

from pathlib import Path

import typer

from analysis.data.load import finished, load_results
from analysis.evidence.learning import learning
from gspo_bench.config import ALGORITHMS
from gspo_bench.objectives import list_objectives, objective_spec

ROOT = Path(__file__).resolve().parents[1]
# the tuned quickstart-size comparisons (experiments/tuning): same model, warm start, seeds 0-3 and FLOPs
COMPARISONS = ("results/tuning/quickstart_tuned", "results/tuning/quickstart_tuned_2026")
BEGIN, END = "<!-- objective table: python experiments/objective_table.py --write -->", "<!-- objective table end -->"


def tuned_outcomes(root: Path = ROOT) -> dict[str, tuple[str, float, str]]:
    """Per arm of the tuned comparisons: (its folder, final held-out reward averaged over seeds, 'k of n'
    seeds that learned)."""
    out = {}
    for folder in COMPARISONS:
        for found in learning(finished(load_results(root / folder))).values():
            for arm, row in found.arms.iterrows():
                out[str(arm)] = (folder, float(row["final"]), f"{row['learned_seeds']} of {int(row['seeds'])}")
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(root: Path = ROOT) -> str:
    """The markdown table: objectives, then algorithms (suite entries that set more than the objective)."""
    tuned = tuned_outcomes(root)
    rows = [(name, objective_spec(name).description) for name in list_objectives()]
    rows += [(name, "algorithm: " + ", ".join(f"{k}={v}" for k, v in parts.items())) for name, parts in ALGORITHMS.items()]
    lines = ["| name | what it is (`gspo-bench ls`) | tuned quickstart-size run | final held-out reward | learned |",
             "|---|---|---|---|---|"]
    for name, what in rows:
        if name in tuned:
            folder, final, learned = tuned[name]
            lines.append(f"| `{name}` | {_cell(what)} | [{Path(folder).name}]({folder}/report/report.md) | {final:.3f} | {learned} |")
        else:
            lines.append(f"| `{name}` | {_cell(what)} | - | - | - |")
    return "\n".join(lines) + "\n"


def with_table(readme: str, text: str) -> str:
    """`readme` with the text between its markers replaced by `text`."""
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ValueError(f"README.md must hold each marker once: {BEGIN} ... {END}")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{text}{END}{tail}"


def main(write: bool = typer.Option(False, "--write", help="replace the table in README.md")) -> None:
    text = table()
    if write:
        readme = ROOT / "README.md"
        readme.write_text(with_table(readme.read_text(), text))
    else:
        typer.echo(text, nl=False)


if __name__ == "__main__":
    typer.run(main)
