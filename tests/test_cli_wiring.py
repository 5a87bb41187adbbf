"""The command line wires; the library decides: `gspo_bench.suite.session` loads, checks and plans a suite
and maps its runs' outcomes to an exit code, and `cli.py` holds no module state it changes at run time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from gspo_bench.suite.session import Session, exit_code, plan_session
from tests.helpers.runs import tiny_suite

ROOT = Path(__file__).resolve().parent.parent
MUTATING_METHODS = {"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "add",
                    "discard", "remove", "sort", "reverse"}


def module_state_changes(source: str) -> list[str]:
    """Where a function of this module source changes module-level state: a `global`, an assignment
    to a subscript or attribute of a module-level name, or a mutating method called on one."""
    tree = ast.parse(source)
    module_names = {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(target, ast.Name)}

    def root_name(node: ast.AST) -> str | None:
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    found = []
    for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        local = {a.arg for a in func.args.args + func.args.kwonlyargs}
        for node in ast.walk(func):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                found.append(f"{func.name}: global {', '.join(node.names)}")
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else
                       node.targets if isinstance(node, ast.Delete) else [])
            for target in targets:
                name = root_name(target) if isinstance(target, (ast.Subscript, ast.Attribute)) else None
                if name in module_names and name not in local:
                    found.append(f"{func.name}: assigns into {name}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in MUTATING_METHODS and root_name(node.func.value) in module_names - local):
                found.append(f"{func.name}: {root_name(node.func.value)}.{node.func.attr}()")
    return found


def test_cli_changes_no_module_state_at_run_time():
    source = (ROOT / "gspo_bench" / "cli.py").read_text()
    assert module_state_changes(source) == []


@pytest.mark.parametrize("body", ["global FLAG\n    FLAG = 1", 'STATE["on"] = True', "STATE.on = True",
                                  "STATE['n'] += 1", "STATE.update(on=True)", "ITEMS.append(1)", "del STATE['on']"])
def test_the_state_check_sees_every_kind_of_change(body):
    source = f"FLAG = 0\nSTATE = {{}}\nITEMS = []\n\ndef callback():\n    {body}\n"
    assert len(module_state_changes(source)) == 1


def test_the_state_check_allows_locals_and_reading():
    source = "STATE = {}\n\ndef f(STATE):\n    STATE['a'] = 1\n\ndef g():\n    x = {}\n    x['a'] = STATE.get('a')\n"
    assert module_state_changes(source) == []


def outcomes(*statuses: str) -> list[tuple[str, dict]]:
    return [(f"run{i}", {"status": s, "step": 0}) for i, s in enumerate(statuses)]


@pytest.mark.parametrize("statuses, code", [
    (("done", "done"), 0),
    ((), 0),
    (("done", "failed"), 1),
    (("failed", "done", "refused"), 2),  # a refused run (a user error) outranks a failure
    (("refused",), 2),
])
def test_exit_code_of_a_suite(statuses, code):
    assert exit_code(outcomes(*statuses)) == code


def test_plan_session_loads_overrides_plans_and_raises_library_errors(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_suite(tmp_path / "cache")))
    session = plan_session(path, ["train.lr=0.002"], out=tmp_path / "out", only=["gspo"], seeds=[3, 4])
    assert isinstance(session, Session) and session.root == tmp_path / "out"
    assert session.suite.train.lr == 0.002
    assert [run.name for run in session.todo] == ["gspo-s3", "gspo-s4"]
    assert all(run.overrides == {"train.lr": 0.002} for run in session.todo)
    with pytest.raises(ValueError, match="--only nope: no such label"):
        plan_session(path, None, out=tmp_path / "out", only=["nope"])
    (session.todo[0].run_dir).mkdir(parents=True)
    (session.todo[0].run_dir / "status.json").write_text('{"status": "done", "step": 3}')
    with pytest.raises(FileExistsError, match="use --resume"):
        plan_session(path, None, out=tmp_path / "out", only=["gspo"], seeds=[3])
    assert plan_session(path, None, out=tmp_path / "out", only=["gspo"], seeds=[3], resume=True).todo == []
