"""Write the small local Hugging Face dataset `experiments/hf_dataset.yaml` trains on: two-number
addition and subtraction problems in GSM8K's layout (a `question` field, an `answer` field whose
final answer follows '#### '), as train-*.parquet and test-*.parquet files that
`datasets.load_dataset(<directory>)` reads as splits `train` and `test`.

    python experiments/data/make_arith_parquet.py            # -> experiments/data/arith/
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pandas as pd


def records(pairs: list[tuple[int, int, str]]) -> pd.DataFrame:
    rows = []
    for a, b, op in pairs:
        value = a + b if op == "+" else a - b
        rows.append({"question": f"what is {a}{op}{b}?", "answer": f"{a}{op}{b}={value}\n#### {value}"})
    return pd.DataFrame(rows)


def main(out: Path) -> None:
    problems = [(a, b, op) for a in range(10) for b in range(10) for op in "+-"]
    random.Random(0).shuffle(problems)
    out.mkdir(parents=True, exist_ok=True)
    records(problems[:160]).to_parquet(out / "train-00000-of-00001.parquet", index=False)
    records(problems[160:]).to_parquet(out / "test-00000-of-00001.parquet", index=False)
    print(f"{out}: {len(problems[:160])} train, {len(problems[160:])} test records")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "arith")
