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


def analysis_modules() -> list[str]:
    """Every module of the analysis package, its rooms' modules included."""
    return sorted(m.name for m in pkgutil.walk_packages(analysis.__path__, "analysis."))


def test_every_analysis_module_imports_without_torch():
    modules = analysis_modules()
    assert {"analysis.data.load", "analysis.checks.regress", "analysis.report.writer", "analysis.figures.style",
            "analysis.stats.library"} <= set(modules)
    loaded = imported_after("\n".join(f"import {m}" for m in modules))
    assert "torch" not in loaded and "transformers" not in loaded


def test_objectives_and_routing_import_without_transformers():
    loaded = imported_after("import gspo_bench.objectives, gspo_bench.moe, gspo_bench.objectives.kl")
    assert "transformers" not in loaded and "matplotlib" not in loaded


# The architecture (docs/architecture.md), bottom to top. A package may import its own layer and the
# layers below it, never one above. Inside the library, finer rules: models at the bottom, routing
# above them, objectives and tasks on their own (the conformance kit runs a user's loss under the runtime's
# time limit), rollout engines over all of them.
ARCHITECTURE: list[tuple[str, set[str]]] = [
    ("registry", {"gspo_bench.registry"}),
    ("runtime", {"gspo_bench.runtime"}),
    ("run folder", {"gspo_bench.rundir"}),
    ("library", {"gspo_bench.models", "gspo_bench.moe", "gspo_bench.objectives", "gspo_bench.tasks",
                 "gspo_bench.rollout"}),
    ("suite schema", {"gspo_bench.config"}),
    ("imports", {"gspo_bench.imports"}),
    ("one run", {"gspo_bench.train"}),
    ("suites", {"gspo_bench.suite"}),
    ("analysis", {"analysis"}),
    ("command line", {"gspo_bench.cli"}),
]
LIBRARY = {
    "gspo_bench.models": {"gspo_bench.models"},
    "gspo_bench.moe": {"gspo_bench.moe", "gspo_bench.models"},
    "gspo_bench.objectives": {"gspo_bench.objectives", "gspo_bench.registry", "gspo_bench.runtime"},
    "gspo_bench.tasks": {"gspo_bench.tasks", "gspo_bench.registry"},
    "gspo_bench.rollout": {"gspo_bench.rollout", "gspo_bench.models", "gspo_bench.moe", "gspo_bench.objectives",
                           "gspo_bench.runtime", "gspo_bench.registry"},
}


def allowed_below(layer: int) -> set[str]:
    """What the packages of ARCHITECTURE[layer] may import: their layer and every layer below."""
    return set().union(*(packages for _, packages in ARCHITECTURE[: layer + 1]))


# analysis reads run folders, task baselines and suite files (their schema and YAML reader, which import no
# torch: test_the_suite_schema_imports_without_torch), never torch (see the test above)
LAYERS = {package: allowed_below(i) for i, (_, packages) in enumerate(ARCHITECTURE) for package in packages}
LAYERS["analysis"] = {"analysis", "gspo_bench.rundir", "gspo_bench.tasks", "gspo_bench.config"}
# other libraries' logs -> run folders: the run folder's schema and the suite schema (a declared family), no torch
LAYERS["gspo_bench.imports"] = {"gspo_bench.imports", "gspo_bench.rundir", "gspo_bench.config"}
LAYERS.update(LIBRARY)
LAYERS["gspo_bench.runtime"] = {"gspo_bench.runtime"}
LAYERS["gspo_bench.registry"] = {"gspo_bench.registry"}


def gspo_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every gspo_bench module `path` imports, at the top or inside a function;
    `from package import x` counts as package.x where x is a module or gspo_bench's own name,
    relative imports are resolved."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
            found += [(node.lineno, f"{base}.{alias.name}" if base == "gspo_bench" or is_module(f"{base}.{alias.name}")
                       else base) for alias in node.names]
    return [(line, module) for line, module in found if module == "gspo_bench" or module.startswith("gspo_bench.")]


def is_module(name: str) -> bool:
    where = ROOT / name.replace(".", "/")
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def layer_violations(package: str, allowed: set[str]) -> list[str]:
    bad = []
    where = ROOT / package.replace(".", "/")
    for path in sorted(where.rglob("*.py")) if where.is_dir() else [where.with_suffix(".py")]:
        for line, module in gspo_imports(path):
            if module == "gspo_bench.__version__":  # the package's face, readable from anywhere
                continue
            if not any(module == a or module.startswith(f"{a}.") for a in allowed):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


def test_no_import_points_up_a_layer():
    assert {p: layer_violations(p, allowed) for p, allowed in LAYERS.items()} == {p: [] for p in LAYERS}


def test_every_module_of_the_package_sits_in_a_layer():
    """The top of gspo_bench/ holds packages and the command line; each of them has its layer."""
    top = {f"gspo_bench.{p.stem}" for p in (ROOT / "gspo_bench").iterdir()
           if (p.is_dir() and (p / "__init__.py").is_file()) or (p.suffix == ".py" and p.stem != "__init__")}
    assert top == {package for _, packages in ARCHITECTURE for package in packages if package != "analysis"}


def import_graph(*packages: str) -> dict[str, set[str]]:
    """module -> the modules of `packages` it imports (at the top or inside a function)."""
    graph: dict[str, set[str]] = {}
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for package in packages for p in (ROOT / package).rglob("*.py")}
    for name, path in modules.items():
        targets = set()
        for _, module in gspo_imports(path) + analysis_imports(path):
            while module and module not in modules:
                module = module.rpartition(".")[0]
            if module and module != name:
                targets.add(module)
        graph[name] = targets
    return graph


def analysis_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every analysis module `path` imports; `from analysis.room import m` counts as
    analysis.room.m where m is a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("analysis")]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("analysis"):
            found += [(node.lineno, f"{node.module}.{alias.name}" if is_module(f"{node.module}.{alias.name}")
                       else node.module) for alias in node.names]
    return found


# The analysis's rooms (docs/architecture.md), bottom to top: arrays to estimates; results folders to tidy
# tables; judgements on runs and arms; figures; words, tables and the writer; checks against references.
# A room's module may import its own room and the rooms below it, never one above; stats imports nothing
# of the analysis. The package's face (analysis/__init__.py) names the entry points of any room.
ROOMS = ["analysis.stats", "analysis.data", "analysis.evidence", "analysis.figures", "analysis.report",
         "analysis.checks"]
LOOSE = 2  # at most this many modules beside the rooms


def room_of(module: str) -> str | None:
    return next((room for room in ROOMS if module == room or module.startswith(f"{room}.")), None)


def room_violations(root: Path) -> list[str]:
    """`path:line imports module` for each import of an analysis room above the importing module's room
    (or of any other analysis module from stats)."""
    bad = []
    for path in sorted((root / "analysis").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        room = room_of(module)
        if room is None:
            continue
        allowed = ROOMS[: ROOMS.index(room) + 1]
        for line, target in analysis_imports(path):
            if room == "analysis.stats" and room_of(target) != room or room_of(target) not in allowed:
                bad.append(f"{path.relative_to(root)}:{line} imports {target}")
    return bad


def test_the_analysis_is_six_rooms_and_no_import_points_up_a_room():
    rooms = {f"analysis.{p.name}" for p in (ROOT / "analysis").iterdir() if (p / "__init__.py").is_file()}
    loose = [p.name for p in (ROOT / "analysis").glob("*.py") if p.name != "__init__.py"]
    assert rooms == set(ROOMS) and len(loose) <= LOOSE, (rooms, loose)
    assert room_violations(ROOT) == []


def test_the_room_check_sees_an_arrow_up_and_stats_importing_the_analysis(tmp_path):
    for room in ("stats", "data", "figures"):
        (tmp_path / "analysis" / room).mkdir(parents=True)
        (tmp_path / "analysis" / room / "__init__.py").write_text("")
    (tmp_path / "analysis" / "data" / "up.py").write_text("from analysis.figures.style import palette\n"
                                                         "from analysis.stats import metrics\n")
    (tmp_path / "analysis" / "stats" / "low.py").write_text("def f():\n    from analysis.data.load import Results\n")
    assert room_violations(tmp_path) == ["analysis/data/up.py:1 imports analysis.figures.style",
                                         "analysis/stats/low.py:2 imports analysis.data.load"]


def private_imports(*packages: str) -> list[str]:
    """`path:line name` for each module-private name (`_x`, not `__x__`) one module of `packages` takes
    from another: `from module import _x`, or `module._x` through an imported module."""
    bad = []
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            bad += [f"{path.relative_to(ROOT)}:{line} {name}" for line, name in private_names(path)]
    return bad


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def private_names(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PROJECT):
            found += [(node.lineno, alias.name) for alias in node.names if is_private(alias.name)]
            modules |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            modules |= {alias.asname for alias in node.names if alias.asname and alias.name.split(".")[0] in PROJECT}
    return found + [(node.lineno, f"{node.value.id}.{node.attr}") for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules and is_private(node.attr)]


PROJECT = {"gspo_bench", "analysis"}


def test_no_module_private_name_is_imported_across_modules():
    assert private_imports("gspo_bench", "analysis") == []


def test_the_private_import_check_sees_both_ways_in(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "a.py").write_text("from analysis.figures.style import _ax, palette\n"
                                               "from analysis.figures import curves as F\n"
                                               "from gspo_bench import __version__\nF._fill(1)\nF.band(2)\n")
    assert private_imports("analysis") == ["analysis/a.py:1 _ax", "analysis/a.py:4 F._fill"]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle():
    assert circles(import_graph("gspo_bench", "analysis")) == []


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_layer_check_sees_every_kind_of_import(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "gspo_bench" / "models").mkdir(parents=True)
    (tmp_path / "gspo_bench" / "models" / "bad.py").write_text(
        "import gspo_bench.models.tiny\nfrom gspo_bench import rollout\nfrom ..train import loop\n"
        "def f():\n    from gspo_bench.runtime.distributed import World\n")
    assert layer_violations("gspo_bench.models", LAYERS["gspo_bench.models"]) == [
        "gspo_bench/models/bad.py:2 imports gspo_bench.rollout", "gspo_bench/models/bad.py:3 imports gspo_bench.train",
        "gspo_bench/models/bad.py:5 imports gspo_bench.runtime.distributed"]


def test_the_suite_schema_imports_without_torch():
    """gspo_bench.config is the schema (pydantic, yaml); the preflight probes (devices, checkpoints,
    lm-eval) live in gspo_bench.suite.preflight and may import what they probe."""
    loaded = imported_after("import gspo_bench.config")
    assert not loaded & {"torch", "transformers", "lm_eval", "datasets"}, loaded
    assert "torch" in imported_after("import gspo_bench.config\ngspo_bench.config.load_suite('experiments/quickstart.yaml')")


def test_importing_the_package_sets_no_process_state():
    # the libraries' own import-time settings first (scikit-learn, which transformers' generation imports
    # where it is installed, sets KMP_* and TORCHINDUCTOR_CACHE_DIR): only what the package adds counts
    code = ("import os, torch, transformers.generation.utils; before = dict(os.environ)\n"
            "import gspo_bench.train.loop, gspo_bench.suite.runner, gspo_bench.train.evaluation, gspo_bench.cli, analysis.report.writer\n"
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


def imports_of_tests(path: Path) -> list[str]:
    """`file:line what` for each import of a test file (a module named test_*, or tests.test_*) and each
    sys.path edit in `path`: shared builders live in tests/helpers, imported as `tests.helpers...`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(
            node, ast.ImportFrom) else []
        found += [f"{path.name}:{node.lineno} imports {n}" for n in names
                  if n.split(".")[-1].startswith("test_") or n.startswith("tests.test_")]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                ast.unparse(node.value) == "sys.path" and node.attr in ("insert", "append", "extend"):
            found.append(f"{path.name}:{node.lineno} edits sys.path")
    return found


CLI_DRIVERS = ("check_fsdp_rank.py",  # runs `gspo-bench run` on each torchrun rank: the command line is its job
               "where_time_goes.py")  # times `gspo-bench run` in its own process: the command line is what it measures


def experiment_problems(path: Path) -> list[str]:
    """`file:line what` for each import of the tests or of the command line in an experiment script:
    experiments use the library (gspo_bench, analysis) only, the command line where running it is their
    job (CLI_DRIVERS)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(
            node, ast.ImportFrom) else []
        found += [f"{path.name}:{node.lineno} imports {n}" for n in names
                  if n.split(".")[0] in ("tests", "conftest") or n.startswith("test_") or n == "gspo_bench.cli"
                  or (n == "gspo_bench" and any(a.name == "cli" for a in getattr(node, "names", [])))]
    return found


def test_no_test_file_imports_another_and_none_edits_sys_path():
    files = sorted((ROOT / "tests").rglob("*.py"))
    assert len(files) > 60
    assert [p for path in files for p in imports_of_tests(path)] == []


def test_experiments_import_the_library_only():
    files = sorted((ROOT / "experiments").rglob("*.py"))
    assert len(files) > 10
    assert [p for path in files if path.name not in CLI_DRIVERS for p in experiment_problems(path)] == []


def test_the_test_import_checks_see_what_they_refuse(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nfrom test_harness import tiny_suite\nimport tests.test_moe\n"
                   "sys.path.insert(0, '.')\nfrom tests.helpers.runs import run_suite\nfrom gspo_bench import cli\n")
    assert imports_of_tests(bad) == ["bad.py:2 imports test_harness", "bad.py:3 imports tests.test_moe",
                                       "bad.py:4 edits sys.path"]
    assert experiment_problems(bad) == ["bad.py:2 imports test_harness", "bad.py:3 imports tests.test_moe",
                                        "bad.py:5 imports tests.helpers.runs", "bad.py:6 imports gspo_bench"]


def test_every_test_file_is_in_the_testing_docs_table():
    """docs/testing.md maps features to test files: a file renamed or added is named there."""
    docs = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    table = docs.split("## Which test guards what")[1].split("\n## ")[0]
    assert [p.name for p in sorted((ROOT / "tests").glob("test_*.py")) if f"`{p.name}`" not in table] == []


LOADER = "load_plugins"  # gspo_bench.config.plugins: the one function that loads plugins
VALIDATORS = {"model_validator", "field_validator"}


def loader_calls(root: Path, name: str = LOADER) -> list[tuple[str, str | None]]:
    """(`path:line`, the pydantic validator it sits in, or None) for each call of function `name` in
    the package under `root` (`name(...)` or `module.name(...)`)."""
    found = []
    for path in sorted((root / "gspo_bench").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        validators = {id(node): node.name for node in ast.walk(tree)
                      if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                      and any(decorator_name(d) in VALIDATORS for d in node.decorator_list)}
        inside = {id(call): validators[id(fn)] for fn in ast.walk(tree) if id(fn) in validators
                  for call in ast.walk(fn)}
        found += [(f"{path.relative_to(root)}:{node.lineno}", inside.get(id(node))) for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and called_name(node.func) == name]
    return sorted(found)


def decorator_name(node: ast.expr) -> str:
    """`model_validator` for @model_validator(mode=...), @pydantic.model_validator, @model_validator."""
    return called_name(node.func if isinstance(node, ast.Call) else node)


def called_name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def test_plugins_load_from_at_most_two_places_and_never_inside_a_validator():
    calls = loader_calls(ROOT)
    assert calls, "no call of the plugin loader found: was it renamed? (LOADER)"
    assert len(calls) <= 2, calls
    assert [(where, validator) for where, validator in calls if validator is not None] == []


def test_the_loader_count_sees_calls_and_validators(tmp_path):
    (tmp_path / "gspo_bench").mkdir()
    (tmp_path / "gspo_bench" / "a.py").write_text(
        "from pydantic import model_validator\nfrom gspo_bench.config import plugins\n"
        "class S:\n    @model_validator(mode='before')\n    @classmethod\n    def _first(cls, data):\n"
        "        plugins.load_plugins([])\n        return data\n"
        "def f():\n    load_plugins(['x.py'])\n    load_plugins_or_fail([])\n")
    assert loader_calls(tmp_path) == [("gspo_bench/a.py:10", None), ("gspo_bench/a.py:7", "_first")]


# A room's face: the names the rooms above use, in its __init__.py. A module outside the room imports
# `room`, never `room.submodule` (inside a room, modules import each other directly).
FACED_ROOMS = ["gspo_bench.train", "gspo_bench.suite", "analysis"]


def reaches_past_faces(root: Path) -> list[str]:
    """`path:line imports module` for each import of a faced room's submodule from outside that room."""
    bad = []
    for folder in ("gspo_bench", "analysis"):
        for path in sorted((root / folder).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                    node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                for name in names:
                    room = next((r for r in FACED_ROOMS if name.startswith(f"{r}.")), None)
                    if room is not None and not (module == room or module.startswith(f"{room}.")):
                        bad.append(f"{path.relative_to(root)}:{node.lineno} imports {name}")
    return bad


def test_no_module_reaches_past_another_rooms_face():
    assert reaches_past_faces(ROOT) == []


def test_every_name_a_face_offers_is_there():
    import importlib

    for room in FACED_ROOMS:
        face = importlib.import_module(room)
        assert face.__all__ and all(getattr(face, name) is not None for name in face.__all__), room
        assert sorted(face.__all__) == sorted(face.FACE), room


def test_the_face_check_sees_a_reach_past_the_face(tmp_path):
    (tmp_path / "gspo_bench" / "suite").mkdir(parents=True)
    (tmp_path / "analysis").mkdir()
    (tmp_path / "gspo_bench" / "suite" / "a.py").write_text(
        "from gspo_bench.train.loop import train_run\nfrom gspo_bench.suite.launch import run_one\n"
        "from gspo_bench.train import RunSpec\n")
    (tmp_path / "gspo_bench" / "cli.py").write_text("def f():\n    import gspo_bench.suite.session\n"
                                                   "    from analysis.stats.library import x\n")
    assert reaches_past_faces(tmp_path) == ["gspo_bench/cli.py:2 imports gspo_bench.suite.session",
                                            "gspo_bench/cli.py:3 imports analysis.stats.library",
                                            "gspo_bench/suite/a.py:1 imports gspo_bench.train.loop"]


CLI_MAX_LINES = 600  # the command line parses options and prints; the work lives in the rooms below it
RESOLVERS = {"seed_for", "code_hashes", "resolved_config", "plugins_loaded", "function_sha256", "settings_changes"}


def test_the_command_line_stays_thin():
    assert len((ROOT / "gspo_bench" / "cli.py").read_text(encoding="utf-8").splitlines()) < CLI_MAX_LINES


def resolving_calls(folder: Path) -> list[str]:
    """`path:line name` for each call in `folder` of a function that resolves a run's settings (RESOLVERS)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in RESOLVERS:
                    found.append(f"{path.name}:{node.lineno} {name}")
    return found


def test_a_run_is_resolved_once_and_train_only_reads_its_record():
    """The planner fills one RunSpec per run (gspo_bench.config.run: lr, warm-start seed, code hashes, config);
    gspo_bench/train reads it and resolves none of it again."""
    assert resolving_calls(ROOT / "gspo_bench" / "train") == []


def test_the_resolver_check_sees_a_call(tmp_path):
    (tmp_path / "a.py").write_text("def f(spec):\n    return spec.suite.warm_start.seed_for(spec.seed)\n")
    assert resolving_calls(tmp_path) == ["a.py:2 seed_for"]


# analysis/report stands on at most REPORT_FLOORS floors: a module stands one floor above the highest module
# of the room it imports (at the top or inside a function); the ground floor imports no module of the room.
REPORT_FLOORS = 5


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's floor in `graph` (module -> the modules it imports; no circle): 1 where it imports none
    of them, else one above the highest it imports."""
    found: dict[str, int] = {}

    def floor(module: str) -> int:
        if module not in found:
            found[module] = 1 + max((floor(target) for target in graph[module] if target in graph), default=0)
        return found[module]

    return {module: floor(module) for module in sorted(graph)}


def test_the_report_room_stands_on_at_most_five_floors():
    found = floors(import_graph("analysis/report"))
    assert max(found.values()) <= REPORT_FLOORS, sorted(found.items(), key=lambda item: -item[1])


def test_the_floor_count_sees_a_chain_of_six(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    room = tmp_path / "analysis" / "report"
    room.mkdir(parents=True)
    (room / "__init__.py").write_text("")
    (room / "m1.py").write_text("import analysis.data.load\n")
    (room / "m2.py").write_text("from analysis.report import m1\n")
    (room / "m3.py").write_text("def f():\n    from analysis.report.m2 import g\n")
    (room / "m4.py").write_text("import analysis.report.m3\n")
    (room / "m5.py").write_text("from analysis.report.m4 import x\nfrom analysis.report import m1\n")
    (room / "m6.py").write_text("from analysis.report import m5, m2\n")
    assert floors(import_graph("analysis/report")) == {
        "analysis.report": 1, **{f"analysis.report.m{i}": i for i in range(1, 7)}}
