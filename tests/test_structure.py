"""What the code base promises about its own shape: import boundaries, and functions short enough
to read whole (the loop's `train_run` in well under 100 lines)."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import analysis

ROOT = Path(__file__).resolve().parent.parent


def imported_after(code: str) -> set[str]:
    """Top-level module names loaded in a fresh interpreter after running `code`."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(done.stdout.split())


def test_every_analysis_module_imports_without_torch():
    modules = sorted(f"analysis.{m.name}" for m in pkgutil.iter_modules(analysis.__path__))
    assert {"analysis.load", "analysis.regress", "analysis.report", "analysis.figures", "analysis.stats"} <= set(modules)
    loaded = imported_after("\n".join(f"import {m}" for m in modules))
    assert "torch" not in loaded and "transformers" not in loaded


def test_objectives_and_routing_import_without_transformers():
    loaded = imported_after("import gspo_bench.objectives, gspo_bench.moe, gspo_bench.objectives.kl")
    assert "transformers" not in loaded and "matplotlib" not in loaded


# The lowest layers and what each may import of gspo_bench (besides third-party packages): models
# (the tiny MoEs, loading, forwards, padding) at the bottom, routing above them, objectives on their
# own, and the data-parallel collectives on torch alone (rollout/ gathers rollouts with them).
LAYERS = {
    "gspo_bench.models": {"gspo_bench.models"},
    "gspo_bench.moe": {"gspo_bench.moe", "gspo_bench.models"},
    "gspo_bench.objectives": {"gspo_bench.objectives"},
    "gspo_bench.distributed": set(),
}


def gspo_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every gspo_bench module `path` imports, at the top or inside a function;
    `from gspo_bench import x` counts as gspo_bench.x, relative imports are resolved."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
            found += [(node.lineno, f"{base}.{alias.name}" if base == "gspo_bench" else base) for alias in node.names]
    return [(line, module) for line, module in found if module == "gspo_bench" or module.startswith("gspo_bench.")]


def layer_violations(package: str, allowed: set[str]) -> list[str]:
    bad = []
    where = ROOT / package.replace(".", "/")
    for path in sorted(where.rglob("*.py")) if where.is_dir() else [where.with_suffix(".py")]:
        for line, module in gspo_imports(path):
            if not any(module == a or module.startswith(f"{a}.") for a in allowed):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


def test_the_lowest_layers_import_nothing_above_them():
    assert {p: layer_violations(p, allowed) for p, allowed in LAYERS.items()} == {p: [] for p in LAYERS}


def test_the_layer_check_sees_every_kind_of_import(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "gspo_bench" / "models").mkdir(parents=True)
    (tmp_path / "gspo_bench" / "models" / "bad.py").write_text(
        "import gspo_bench.models.tiny\nfrom gspo_bench import rollout\nfrom ..train import loop\n"
        "def f():\n    from gspo_bench.distributed import World\n")
    assert layer_violations("gspo_bench.models", LAYERS["gspo_bench.models"]) == [
        "gspo_bench/models/bad.py:2 imports gspo_bench.rollout", "gspo_bench/models/bad.py:3 imports gspo_bench.train",
        "gspo_bench/models/bad.py:5 imports gspo_bench.distributed"]


def test_the_suite_schema_imports_without_torch():
    """config.py is the schema (pydantic, yaml); the preflight probes (devices, checkpoints, lm-eval)
    live in preflight.py and may import what they probe."""
    loaded = imported_after("import gspo_bench.config")
    assert not loaded & {"torch", "transformers", "lm_eval", "datasets"}, loaded
    assert "torch" in imported_after("import gspo_bench.config\ngspo_bench.config.load_suite('experiments/quickstart.yaml')")


def test_importing_the_package_sets_no_process_state():
    # the libraries' own import-time settings first (scikit-learn, which transformers' generation imports
    # where it is installed, sets KMP_* and TORCHINDUCTOR_CACHE_DIR): only what the package adds counts
    code = ("import os, torch, transformers.generation.utils; before = dict(os.environ)\n"
            "import gspo_bench.train.loop, gspo_bench.suite, gspo_bench.evaluation, gspo_bench.cli, analysis.report\n"
            "import matplotlib\n"
            "changed = {k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)}\n"
            "assert not changed, changed\n"
            "assert matplotlib.rcParams._get_backend_or_none() is None, 'a matplotlib backend was chosen'\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "MPLBACKEND"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)


def function_lengths(*packages: str) -> dict[str, int]:
    lengths = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lengths[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_no_function_of_the_package_is_longer_than_60_lines():
    long = {name: n for name, n in function_lengths("gspo_bench", "analysis").items() if n > 60}
    assert not long, long


def test_train_run_reads_in_well_under_100_lines():
    lengths = function_lengths("gspo_bench/train")
    (train_run,) = [n for name, n in lengths.items() if name.endswith(" train_run")]
    assert train_run < 60
