"""Plugins named by a suite: a plugin's objective trains as the same code registered in the package does,
sequentially and in `--parallel` workers; a bad plugin is one line naming its file and problem, with
nothing written; an edited plugin refuses a resume; provenance records each plugin's sha256."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from analysis.checks.reproduce import compare_results
from analysis.data.load import load_results
from gspo_bench.cli import app
from gspo_bench.config.plugins import unload_plugins
from gspo_bench.objectives import list_objectives
from gspo_bench.rundir.folder import TIMING_COLUMNS
from tests.helpers.runs import tiny_suite

SAME_GRPO = ("from gspo_bench.objectives import get_objective, register_objective\n"
             "register_objective('grpo_plugin', description='GRPO, from a plugin', reference='-')(get_objective('grpo'))\n")
RAISES_AT_STEP_2 = ("from gspo_bench.objectives import get_objective, register_objective\n"
                    "calls = []\n"
                    "@register_objective('boom', description='raises on its third training minibatch', reference='-')\n"
                    "def boom(logp, old_logp, advantages, mask, weights=None):\n"
                    "    calls.append(1) if len(logp) == 4 else None  # a training minibatch (2 x 4 responses / 2)\n"
                    "    if len(calls) == 3:\n"
                    "        raise RuntimeError('boom at step 2')\n"
                    "    return get_objective('grpo')(logp, old_logp, advantages, mask, weights=weights)\n"
                    "@register_objective('nan_later', description='NaN from its third training minibatch', reference='-')\n"
                    "def nan_later(logp, old_logp, advantages, mask, weights=None):\n"
                    "    calls.append(2) if len(logp) == 4 else None\n"
                    "    loss, metrics = get_objective('grpo')(logp, old_logp, advantages, mask, weights=weights)\n"
                    "    return loss * (float('nan') if calls.count(2) >= 3 else 1.0), metrics\n")


@pytest.fixture(autouse=True)
def no_plugin_left():
    """Each test loads its plugins into a clean registry and leaves none behind (other tests list the
    built-in names)."""
    unload_plugins()
    builtin = list_objectives()
    yield
    unload_plugins()
    assert list_objectives() == builtin


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("plugin-cache")


def write_suite(folder: Path, cache: Path, plugin_text: str | None, objectives: list[str], steps: int = 2,
                **changes: dict) -> Path:
    """A tiny suite in `folder` naming the plugin file `plugin.py` (holding `plugin_text`) by a relative path."""
    folder.mkdir(parents=True, exist_ok=True)
    data = tiny_suite(cache, budget={"kind": "steps", "value": steps}, objectives=[{"name": n} for n in objectives],
                      **changes)
    if plugin_text is not None:
        (folder / "plugin.py").write_text(plugin_text)
        data["plugins"] = ["plugin.py"]
    (folder / "suite.yaml").write_text(yaml.safe_dump(data))
    return folder / "suite.yaml"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def metrics(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "metrics.parquet").drop(columns=[*TIMING_COLUMNS, "objective", "label", "arm"],
                                                         errors="ignore")


@pytest.mark.slow
def test_a_plugin_objective_trains_as_the_same_code_in_the_package(tmp_path, cache):
    """Needs training (2 steps of a 2-run tiny suite, twice): the plugin must reach the --parallel workers."""
    suite = write_suite(tmp_path / "suite", cache, SAME_GRPO, ["grpo", "grpo_plugin"])
    for out, extra in ((tmp_path / "seq", []), (tmp_path / "par", ["--parallel", "2"])):
        code, output = invoke("run", str(suite), "--out", str(out), *extra)
        assert code == 0, output
        pd.testing.assert_frame_equal(metrics(out / "tiny" / "grpo-s0"), metrics(out / "tiny" / "grpo_plugin-s0"))
    pd.testing.assert_frame_equal(metrics(tmp_path / "seq" / "tiny" / "grpo_plugin-s0"),
                                  metrics(tmp_path / "par" / "tiny" / "grpo_plugin-s0"))
    prov = json.loads((tmp_path / "par" / "tiny" / "grpo_plugin-s0" / "provenance.json").read_text())
    assert [(p["path"], p["registered"]) for p in prov["plugins"]] == [
        (str((tmp_path / "suite" / "plugin.py").resolve()), ["objective:grpo_plugin"])]
    assert len(prov["plugins"][0]["sha256"]) == 64
    runs = load_results(tmp_path / "par" / "tiny").runs.set_index("label")
    assert runs.loc["grpo_plugin", "plugin"] == "plugin.py" and runs.loc["grpo", "plugin"] == ""
    assert all(run.identical for run in compare_results(tmp_path / "seq" / "tiny", tmp_path / "par" / "tiny"))
    prov["plugins"][0]["sha256"] = "0" * 64  # as a run of an edited plugin records it
    (tmp_path / "par" / "tiny" / "grpo_plugin-s0" / "provenance.json").write_text(json.dumps(prov))
    found = {run.run: run for run in compare_results(tmp_path / "seq" / "tiny", tmp_path / "par" / "tiny")}
    assert found["grpo-s0"].identical and not found["grpo_plugin-s0"].identical
    assert found["grpo_plugin-s0"].difference.startswith("plugin plugin.py differs: sha256 ")


@pytest.mark.slow
def test_an_edited_plugin_refuses_resume_and_a_raising_loss_fails_its_run_alone(tmp_path, cache):
    """Needs training (2 steps): the failing run leaves a folder to resume."""
    suite = write_suite(tmp_path / "suite", cache, RAISES_AT_STEP_2, ["boom", "nan_later", "grpo"],
                        collapse={"nonfinite_patience": 1})
    code, output = invoke("run", str(suite), "--out", str(tmp_path / "out"))
    statuses = {run: json.loads((tmp_path / "out" / "tiny" / run / "status.json").read_text())
                for run in ("grpo-s0", "boom-s0", "nan_later-s0")}
    assert statuses["grpo-s0"]["status"] == "done"
    assert statuses["boom-s0"]["status"] == "failed" and "boom at step 2" in statuses["boom-s0"]["message"]
    assert statuses["boom-s0"]["step"] == 2
    nan = statuses["nan_later-s0"]
    assert (nan["status"], nan["step"]) == ("collapsed", 2) and "non-finite" in nan["message"], nan
    unload_plugins()
    (tmp_path / "suite" / "plugin.py").write_text(RAISES_AT_STEP_2.replace("len(calls) == 3", "len(calls) == 99"))
    code, output = invoke("run", str(suite), "--out", str(tmp_path / "out"), "--resume")
    assert code == 2 and "the suite changed since this run started (run.plugins." in output, output
    assert json.loads((tmp_path / "out" / "tiny" / "boom-s0" / "status.json").read_text())["step"] == 2  # untouched


BAD_PLUGINS = {
    "missing file": (None, "plugin.py: no such plugin file"),
    "syntax error": ("x = 1\ndef f(:\n", "plugin.py:2: syntax error: "),
    "import error": ("import numpy\nimport no_such_package_xyz\n",
                     "plugin.py:2: loading the plugin raised ModuleNotFoundError: No module named 'no_such_package_xyz'"),
    "collision": ("from gspo_bench.objectives import get_objective, register_objective\n"
                  "register_objective('gspo', description='d', reference='r')(get_objective('grpo'))\n",
                  "plugin.py: objective 'gspo' is already registered (by gspo_bench.objectives.gspo); pick another name"),
    "registers nothing": ("import torch\n", "plugin.py: registers nothing (no objective, correction, task or rollout"),
    "a loss that fails the kit": ("from gspo_bench.objectives import get_objective, register_objective\n"
                                  "@register_objective('flipped', description='d', reference='r')\n"
                                  "def flipped(logp, old_logp, advantages, mask, weights=None):\n"
                                  "    loss, metrics = get_objective('grpo')(logp, old_logp, advantages, mask)\n"
                                  "    return -loss, metrics\n",
                                  "suite.yaml: objectives.1 (flipped): fails the conformance kit: on_policy ("),
    "a loss that raises": ("from gspo_bench.objectives import register_objective\n"
                           "@register_objective('raises', description='d', reference='r')\n"
                           "def raises(logp, old_logp, advantages, mask, weights=None):\n"
                           "    raise RuntimeError('not written yet')\n",
                           "suite.yaml: objectives.1 (raises): "),
}


@pytest.mark.parametrize("case", sorted(BAD_PLUGINS))
def test_a_bad_plugin_is_one_line_naming_the_file_and_nothing_is_written(case, tmp_path):
    text, expected = BAD_PLUGINS[case]
    arms = ["grpo", *(name for name in ("flipped", "raises") if f"'{name}'" in (text or ""))]
    suite = write_suite(tmp_path / "suite", tmp_path / "cache", text or "", arms)
    if text is None:
        (tmp_path / "suite" / "plugin.py").unlink()
    for command in (["validate", str(suite)], ["run", str(suite), "--out", str(tmp_path / "out")]):
        code, output = invoke(*command)
        assert code == 2 and len(output.strip().splitlines()) == 1, output
        assert f"{tmp_path / 'suite' / expected}" in " ".join(output.split()), output
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
    assert "grpo_plugin" not in list_objectives()


def test_a_partly_loaded_plugin_takes_back_what_it_registered(tmp_path):
    """A plugin that registers one objective, then fails, leaves the registry as it found it."""
    text = SAME_GRPO + "raise RuntimeError('late')\n"
    suite = write_suite(tmp_path / "suite", tmp_path / "cache", text, ["grpo"])
    code, output = invoke("validate", str(suite))
    assert code == 2 and "plugin.py:3: loading the plugin raised RuntimeError: late" in output
    assert "grpo_plugin" not in list_objectives()


def test_ls_and_validate_see_a_plugin_file(tmp_path):
    suite = write_suite(tmp_path / "suite", tmp_path / "cache", SAME_GRPO, ["grpo_plugin"])
    code, output = invoke("validate", str(suite))
    assert code == 0 and "grpo_plugin-s0: grpo_plugin" in output, output
    unload_plugins()
    code, output = invoke("ls", "--plugin", str(tmp_path / "suite" / "plugin.py"))
    assert code == 0 and "grpo_plugin" in output and "GRPO, from a plugin" in output


def test_a_module_plugin_and_an_installed_packages_entry_point(tmp_path, monkeypatch):
    """`plugins: [my_pkg.losses]` imports the module; the entry-point group gspo_bench.plugins loads an
    installed package's module for every command, here `ls`."""
    import importlib.metadata

    package = tmp_path / "my_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "losses.py").write_text(SAME_GRPO.replace("grpo_plugin", "grpo_module"))
    (package / "installed.py").write_text(SAME_GRPO.replace("grpo_plugin", "grpo_installed"))
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = write_suite(tmp_path / "suite", tmp_path / "cache", None, ["grpo_module"])
    data = yaml.safe_load(suite.read_text())
    suite.write_text(yaml.safe_dump(data | {"plugins": ["my_pkg.losses"]}))
    code, output = invoke("validate", str(suite))
    assert code == 0 and "grpo_module-s0: grpo_module" in output, output
    suite.write_text(yaml.safe_dump(data | {"plugins": ["my_pkg.nothere"]}))
    unload_plugins()
    code, output = invoke("validate", str(suite))
    assert code == 2 and "my_pkg.nothere: no module named 'my_pkg.nothere'" in output, output
    point = importlib.metadata.EntryPoint("mine", "my_pkg.installed", "gspo_bench.plugins")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [point] if group == "gspo_bench.plugins" else [])
    unload_plugins()  # the entry points are read once per process
    code, output = invoke("ls")
    assert code == 0 and "grpo_installed" in output and "grpo_module" not in output


def test_probe_sees_a_plugin_objective(tmp_path):
    (tmp_path / "plugin.py").write_text(SAME_GRPO)
    code, output = invoke("probe", "--objectives", "grpo,grpo_plugin", "--plugin", str(tmp_path / "plugin.py"),
                          "--prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--minibatches", "1")
    assert code == 0, output
    rows = {line.split("│")[1].strip(): line.split("│")[2:] for line in output.splitlines() if line.count("│") > 3}
    assert rows["grpo_plugin"][:-2] == rows["grpo"][:-2]  # the same code, the same weights: the same step (time aside)


def test_a_run_from_before_plugins_resumes_without_a_change():
    """config.yaml's of runs started before `plugins:` and `task.reward` existed hold neither: their
    defaults are no change of settings."""
    from gspo_bench.train.setup import settings_changes

    now = {"suite": {"name": "x", "plugins": [], "task": {"name": "sort", "reward": None}}}
    assert settings_changes({"suite": {"name": "x", "task": {"name": "sort"}}}, now) == []
    assert settings_changes({"suite": {"name": "x", "task": {"name": "sort"}}},
                            now | {"suite": now["suite"] | {"plugins": ["/a/xpo.py"]}}) == [
        "suite.plugins: None -> ['/a/xpo.py']"]


def test_a_plugin_task_and_correction_are_named_like_built_in_ones(tmp_path):
    text = ("from gspo_bench.objectives.corrections import get_correction, register_correction\n"
            "from gspo_bench.tasks import make_task\nfrom gspo_bench.tasks.registry import register_task\n"
            "@register_task('my_sort', 'sort, from a plugin')\n"
            "def my_sort(max_len: int = 3):\n"
            "    return make_task('sort', max_len=max_len)\n"
            "register_correction('my_tis', description='d', reference='r')(get_correction('tis'))\n")
    suite = write_suite(tmp_path / "suite", tmp_path / "cache", text, ["grpo"])
    data = yaml.safe_load(suite.read_text())
    data["task"] = {"name": "my_sort", "params": {"max_len": 3}}
    data["objectives"] = [{"name": "grpo", "correction": {"kind": "my_tis"}}]
    suite.write_text(yaml.safe_dump(data))
    code, output = invoke("validate", str(suite))
    assert code == 0 and "grpo-s0: grpo" in output, output
