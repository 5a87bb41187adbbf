"""The README's objective table (experiments/objective_table.py): it lists every registered objective and
algorithm, and its numbers are what the committed tuned comparisons give; README.md holds exactly what the
script prints."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gspo_bench.config import ALGORITHMS
from gspo_bench.objectives import list_objectives

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("objective_table", ROOT / "experiments" / "objective_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def printed(script):
    return script.table()


def test_the_readme_holds_the_table_the_script_prints(script, printed):
    readme = (ROOT / "README.md").read_text()
    assert f"{script.BEGIN}\n{printed}{script.END}" in readme, "run: python experiments/objective_table.py --write"


def test_every_objective_and_algorithm_has_a_row_and_the_tuned_arms_their_numbers(printed):
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ") for line in printed.splitlines()[2:]}
    assert set(rows) == set(list_objectives()) | set(ALGORITHMS)
    tuned = {name for name, cells in rows.items() if cells[2] != "-"}
    assert tuned == {"grpo", "grpo_rr", "gspo", "gspo_token", "grpo_rr_full", "minpro", "vespo", "dro", "ipo", "vcpo"}
    # experiments/tuning/README.md's results, as its reports print them
    assert rows["minpro"][3:] == ["0.266", "3 of 4 |"] and rows["vespo"][3:] == ["0.248", "0 of 4 |"]
    assert rows["ipo"][3:] == ["0.264", "2 of 4 |"] and rows["grpo_rr"][3:] == ["0.261", "3 of 4 |"]
    assert "\\|pi - mu\\|" in rows["ipo"][1]  # a | inside a cell is escaped, so the row keeps its columns


def test_the_table_goes_between_its_markers_and_nowhere_else(script):
    readme = f"# title\n{script.BEGIN}\nold\n{script.END}\nafter\n"
    assert script.with_table(readme, "| new |\n") == f"# title\n{script.BEGIN}\n| new |\n{script.END}\nafter\n"
    with pytest.raises(ValueError, match="marker once"):
        script.with_table("# no markers\n", "| new |\n")
