"""Plugins named by a suite: a plugin's objective trains as the same code registered in the package does,
sequentially and in `--parallel` workers; a bad plugin is one line naming its file and problem, with
nothing written; an edited plugin refuses a resume; provenance records each plugin's sha256."""

from __future__ import annotations

import json
import signal
import time
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
    from gspo_bench.config.changes import settings_changes

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


def payload(marker: Path, registers: str = "grpo_plugin") -> str:
    """A plugin that writes `marker` when it runs (a payload slipped into a results folder)."""
    return f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n" + SAME_GRPO.replace(
        "grpo_plugin", registers)


def fake_installed(monkeypatch, *points: tuple[str, str]) -> None:
    """Installed packages offering the entry points (name, value) of group gspo_bench.plugins."""
    import importlib.metadata

    found = [importlib.metadata.EntryPoint(name, value, "gspo_bench.plugins") for name, value in points]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: found if group == "gspo_bench.plugins" else [])
    unload_plugins()  # the entry points are read once per process


def test_the_commands_that_read_results_run_no_plugin_code(tmp_path, monkeypatch):
    """report, figures, regress, reproduce and import load no plugin: not the ones a results folder's
    suite.yaml names (by a path relative to the working folder, absolute, deleted, or two files that
    register one name), nor an installed entry point (one that writes a marker, one that raises). What
    the report needs of a plugin is in the run records. `ls` then shows the payloads do run when loaded."""
    import sys

    from tests.helpers.reports import synth

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran.txt"
    (tmp_path / "payload.py").write_text(payload(marker))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "payload.py").write_text(payload(marker))  # the same name from another file
    pkg = tmp_path / "site" / "evil_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "writes.py").write_text(payload(marker, "grpo_installed"))
    (pkg / "raises.py").write_text("raise RuntimeError('a broken installed plugin')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    fake_installed(monkeypatch, ("writes", "evil_pkg.writes"), ("raises", "evil_pkg.raises:thing"))
    suite = synth(tmp_path / "out", {"grpo": [0.0, 0.0, 0.0], "gspo": [0.1, 0.1, 0.1]})
    (suite / "suite.yaml").write_text(yaml.safe_dump(
        {"name": "synth", "plugins": ["payload.py", str(tmp_path / "other" / "payload.py"), "deleted.py"]}))
    (tmp_path / "log.jsonl").write_text("".join(
        json.dumps({"step": s, "data": {"critic/score/mean": 0.1 * s, "perf/total_num_tokens": 100.0}}) + "\n"
        for s in (1, 2, 3)))
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump({
        "name": "imported", "mapping": "verl", "compute": {"flops_per_token": 1.0e6},
        "runs": [{"arm": "grpo", "seed": 0, "files": ["log.jsonl"]}]}))
    for command in (["report", str(tmp_path / "out")], ["figures", str(suite)], ["reproduce", str(suite), str(suite)],
                    ["regress", str(suite), "--baseline", str(suite)], ["import", "plan.yaml", "--out", "imported"]):
        code, output = invoke(*command)
        compared = command[0] == "regress" and code == 1 and "regression(s)" in output  # synthetic runs' kernels
        assert code == 0 or compared, (command, output)
        assert not marker.exists(), command
        assert not [m for m in sys.modules if m.startswith("gspo_bench_plugin_") or m.startswith("evil_pkg")], command
    assert (tmp_path / "out" / "report" / "report.md").is_file()
    code, output = invoke("ls", "--plugin", "payload.py")  # a command that loads plugins runs the installed ones
    assert code == 2 and "evil_pkg/raises.py:1: loading the plugin raised RuntimeError: a broken installed plugin; " \
        "installed plugin raises = evil_pkg.raises:thing (entry point group gspo_bench.plugins)" in output, output
    assert not marker.exists()  # the broken one comes first (by name: raises < writes) and stops the load
    fake_installed(monkeypatch, ("writes", "evil_pkg.writes"))
    code, output = invoke("ls", "--plugin", "payload.py", "--plugin", "other/payload.py")
    assert code == 2 and f"other/payload.py: objective 'grpo_plugin' is already registered (by {tmp_path / 'payload.py'})" \
        in " ".join(output.split()), output  # named by the plugin that registered it, not by grpo's module
    assert marker.read_text() == "ran"


CHAIN_PLUGIN = ("from gspo_bench.tasks import make_task\nfrom gspo_bench.tasks.registry import register_task\n"
                "@register_task('my_chain', 'chain, from a plugin')\n"
                "def my_chain(steps: int = 2):\n"
                "    return make_task('chain', steps=steps)\n")


def test_a_plugin_tasks_baseline_is_recorded_by_its_run_and_read_back_without_the_plugin(tmp_path):
    """The run records its task's chance baseline (provenance.json's `task_baseline`); the analysis reads
    it there, with no plugin loaded, and builds only the package's own tasks for runs from before."""
    from analysis.evidence.learning import baseline
    from gspo_bench.config import load_suite
    from gspo_bench.tasks import task_baseline
    from gspo_bench.train.setup import recorded_task_baseline
    from tests.helpers.results import make_run

    suite_path = write_suite(tmp_path / "suite", tmp_path / "cache", CHAIN_PLUGIN, ["grpo"])
    data = yaml.safe_load(suite_path.read_text())
    suite_path.write_text(yaml.safe_dump(data | {"task": {"name": "my_chain", "params": {"steps": 3}}}))
    record = recorded_task_baseline(load_suite(suite_path))
    chain = task_baseline("chain", {"steps": 3})
    assert record == {"mean": chain.mean, "std": chain.std, "samples": 4000, "policy": chain.policy}
    assert 0 < record["mean"] < 0.5
    unload_plugins()
    for seed in (0, 1):
        run = make_run(tmp_path / "out", "grpo", seed)
        config = yaml.safe_load((run.path / "config.yaml").read_text())
        config["suite"]["task"] = {"name": "my_chain", "params": {"steps": 3}}
        (run.path / "config.yaml").write_text(yaml.safe_dump(config))
        prov = json.loads((run.path / "provenance.json").read_text())
        (run.path / "provenance.json").write_text(json.dumps(prov | {"task_baseline": record}))
    found = baseline(load_results(tmp_path / "out" / "synth"))
    assert (found.mean, found.std, found.text) == (record["mean"], record["std"], chain.policy)
    for seed in (0, 1):  # runs from before the record: a plugin's task is never built, the package's is
        path = tmp_path / "out" / "synth" / f"grpo-s{seed}" / "provenance.json"
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "task_baseline"}))
    assert baseline(load_results(tmp_path / "out" / "synth")) is None
    for seed in (0, 1):
        path = tmp_path / "out" / "synth" / f"grpo-s{seed}" / "config.yaml"
        path.write_text(path.read_text().replace("my_chain", "chain"))
    assert baseline(load_results(tmp_path / "out" / "synth")).mean == chain.mean


def sha256_of(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def test_a_plugins_recorded_sha256_is_of_the_code_that_ran(tmp_path, monkeypatch):
    """A file edited while it loads (here: by itself) or after (mid-suite) records the sha256 of the bytes
    that were executed, in provenance and config.yaml's `run.plugins` alike; the same for a module plugin
    and a reward file."""
    from gspo_bench.config import load_suite
    from gspo_bench.config.plugins import load_plugins
    from gspo_bench.config.run import code_hashes

    edits_itself = SAME_GRPO + "from pathlib import Path\nPath(__file__).write_text('# edited while it loaded\\n')\n"
    suite_path = write_suite(tmp_path / "suite", tmp_path / "cache", edits_itself, ["grpo_plugin"])
    plugin = tmp_path / "suite" / "plugin.py"
    suite = load_suite(suite_path)
    assert plugin.read_text() == "# edited while it loaded\n"
    [record] = [p.record() for p in load_plugins(suite.plugins)]
    assert record["sha256"] == sha256_of(edits_itself)
    assert code_hashes(suite) == {str(plugin.resolve()): sha256_of(edits_itself)}
    plugin.write_text(SAME_GRPO)  # edited mid-suite: this process still runs the code it loaded
    assert code_hashes(suite) == {str(plugin.resolve()): sha256_of(edits_itself)}
    unload_plugins()
    (tmp_path / "my_mod").mkdir()
    (tmp_path / "my_mod" / "__init__.py").write_text("")
    module_text = edits_itself.replace("grpo_plugin", "grpo_module")
    (tmp_path / "my_mod" / "edits.py").write_text(module_text)
    monkeypatch.syspath_prepend(str(tmp_path))
    [module] = load_plugins(["my_mod.edits"])
    assert (module.sha256, module.path) == (sha256_of(module_text), str(tmp_path / "my_mod" / "edits.py"))
    import my_mod.edits  # noqa: F401  (importable as a module: the plugin is that module)

    from gspo_bench.config.plugins import function_sha256, load_function

    reward = "def score(response, fields):\n    return 1.0\nopen(__file__, 'w').write('# gone\\n')\n"
    (tmp_path / "score.py").write_text(reward)
    assert load_function(str(tmp_path / "score.py"), "score")("x", {}) == 1.0
    assert function_sha256(str(tmp_path / "score.py"), "score") == sha256_of(reward)


TAMPERING = {
    "replaces an entry through the table": (
        "from gspo_bench.objectives.registry import _REGISTRY\n"
        "_REGISTRY._entries['grpo'] = _REGISTRY._entries['gspo']\n", "objective 'grpo'"),
    "removes an entry through the mapping face": (
        "from gspo_bench.tasks.registry import _TASKS\ndel _TASKS['sort']\n", "task 'sort'"),
    "replaces a registry": (
        "from gspo_bench.registry import KINDS, Registry\nRegistry('correction')\n", "the correction registry"),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_a_plugin_that_changes_what_was_registered_before_it_is_refused_and_undone(case, tmp_path):
    """A plugin adds names; one that replaces or removes an entry registered before it (a built-in) or a
    registry is refused naming its file and what it changed, and every registry is as it was before it."""
    from gspo_bench.objectives import get_objective
    from gspo_bench.registry import KINDS
    from gspo_bench.tasks import list_tasks

    text, changed = TAMPERING[case]
    grpo, tasks, registries = get_objective("grpo"), list_tasks(), dict(KINDS)
    (tmp_path / "plugin.py").write_text(SAME_GRPO + text)
    code, output = invoke("ls", "--plugin", str(tmp_path / "plugin.py"))
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert f"{tmp_path / 'plugin.py'}: replaces or removes {changed}, registered before it: a plugin adds names of " \
        "its own" in " ".join(output.split()), output
    assert get_objective("grpo") is grpo and list_tasks() == tasks and KINDS == registries
    assert "grpo_plugin" not in list_objectives()


def test_the_installed_plugins_load_for_a_suite_without_plugins(tmp_path, monkeypatch):
    """Every command that loads plugins loads the installed packages' ones, whether or not the suite has a
    `plugins:` key: reading a suite file and validating a suite's data alike; a run records them."""
    from gspo_bench.config import parse_suite
    from gspo_bench.config.plugins import load_plugins

    (tmp_path / "inst_pkg").mkdir()
    (tmp_path / "inst_pkg" / "__init__.py").write_text("")
    (tmp_path / "inst_pkg" / "losses.py").write_text(SAME_GRPO.replace("grpo_plugin", "grpo_installed"))
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_installed(monkeypatch, ("mine", "inst_pkg.losses"))
    suite = write_suite(tmp_path / "suite", tmp_path / "cache", None, ["grpo_installed"])
    assert "plugins" not in yaml.safe_load(suite.read_text())
    code, output = invoke("validate", str(suite))
    assert code == 0 and "grpo_installed-s0: grpo_installed" in output, output
    unload_plugins()
    parse_suite(tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo_installed"}]))
    assert [(p.name, p.registered) for p in load_plugins([])] == [("inst_pkg.losses", ("objective:grpo_installed",))]
    (tmp_path / "inst_pkg" / "broken.py").write_text("import no_such_package_xyz\n")
    fake_installed(monkeypatch, ("mine", "inst_pkg.losses"), ("zz", "inst_pkg.broken"))
    code, output = invoke("validate", str(suite))  # one line naming the suite file, the plugin and the entry point
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert f"{suite}: plugins: {tmp_path / 'inst_pkg' / 'broken.py'}:1: loading the plugin raised ModuleNotFoundError: " \
        "No module named 'no_such_package_xyz'; installed plugin zz = inst_pkg.broken (entry point group " \
        "gspo_bench.plugins)" in " ".join(output.split()), output


def test_an_entry_point_of_a_module_and_attribute(tmp_path, monkeypatch):
    """`my_pkg.losses:attr` imports the module (its import registers) and requires the attribute, as Python
    resolves an entry point; a missing one is one line naming the entry point."""
    (tmp_path / "ep_pkg").mkdir()
    (tmp_path / "ep_pkg" / "__init__.py").write_text("")
    (tmp_path / "ep_pkg" / "losses.py").write_text(SAME_GRPO.replace("grpo_plugin", "grpo_ep") + "class Box:\n    x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_installed(monkeypatch, ("mine", "ep_pkg.losses:Box.x"))
    code, output = invoke("ls")
    assert code == 0 and "grpo_ep" in output, output
    fake_installed(monkeypatch, ("mine", "ep_pkg.losses:Box.y"))
    code, output = invoke("ls")
    assert code == 2 and f"{tmp_path / 'ep_pkg' / 'losses.py'}: no attribute 'Box.y'; installed plugin mine = " \
        "ep_pkg.losses:Box.y (entry point group gspo_bench.plugins): name an attribute the module defines, or the " \
        "module alone" in " ".join(output.split()), output


def test_two_plugin_files_of_one_name_are_two_modules(tmp_path):
    """a/xpo.py and b/xpo.py load side by side: neither shadows the other's module (their functions pickle
    back to themselves, as a --parallel worker needs)."""
    import pickle
    import sys

    from gspo_bench.config.plugins import load_plugins
    from gspo_bench.objectives import get_objective

    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "xpo.py").write_text(
            "from gspo_bench.objectives import get_objective, register_objective\n"
            f"@register_objective('xpo_{folder}', description='d', reference='r')\n"
            f"def xpo_{folder}(logp, old_logp, advantages, mask, weights=None):\n"
            "    return get_objective('grpo')(logp, old_logp, advantages, mask, weights=weights)\n")
    a, b = load_plugins(["a/xpo.py", "b/xpo.py"], base=tmp_path)
    assert (a.registered, b.registered) == (("objective:xpo_a",), ("objective:xpo_b",))
    for name in ("xpo_a", "xpo_b"):
        fn = get_objective(name)
        assert sys.modules[fn.__module__].__file__ == str(tmp_path / name[-1] / "xpo.py")
        assert pickle.loads(pickle.dumps(fn)) is fn


def test_a_reward_name_that_is_not_callable_is_refused(tmp_path):
    from gspo_bench.config.plugins import PluginError, load_function

    (tmp_path / "score.py").write_text("compute_score = 0.5\n")
    with pytest.raises(PluginError) as err:
        load_function(str(tmp_path / "score.py"), "compute_score")
    assert str(err.value) == f"{tmp_path / 'score.py'}: defines no function 'compute_score' (not callable)"
    with pytest.raises(PluginError, match=r"score.py: defines no function 'other'$"):
        load_function(str(tmp_path / "score.py"), "other")


def test_a_plugin_of_a_correction_alone_is_recorded_and_taken_back(tmp_path):
    """In a fresh process too (a command's), where nothing imported the corrections' registry before."""
    import subprocess
    import sys

    from gspo_bench.config.plugins import load_plugins
    from gspo_bench.objectives.corrections import list_corrections

    (tmp_path / "tis.py").write_text(
        "from gspo_bench.objectives.corrections import get_correction, register_correction\n"
        "register_correction('my_tis', description='d', reference='r')(get_correction('tis'))\n")
    fresh = subprocess.run([sys.executable, "-c", "from gspo_bench.config.plugins import load_plugins; "
                            "print(load_plugins(['tis.py'])[0].registered)"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert fresh.stdout == "('correction:my_tis',)\n", fresh.stderr[-2000:]
    [plugin] = load_plugins(["tis.py"], base=tmp_path)
    assert plugin.registered == ("correction:my_tis",) and "my_tis" in list_corrections()
    unload_plugins()
    assert "my_tis" not in list_corrections()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="the time limit is SIGALRM's (POSIX)")
def test_a_plugin_that_never_finishes_importing_is_stopped_at_its_time_limit(tmp_path, monkeypatch):
    """A plugin that registers, then loops at import: `validate` stops it at GSPO_BENCH_IMPORT_TIMEOUT with
    one line naming the file and the line it was at, and takes back what it registered; a limit that
    is not a positive number is refused naming the variable."""
    text = SAME_GRPO + "n = 0\nwhile True:\n    n += 1\n"
    suite = write_suite(tmp_path / "suite", tmp_path / "cache", text, ["grpo"])
    monkeypatch.setenv("GSPO_BENCH_IMPORT_TIMEOUT", "0.3")
    start = time.monotonic()
    code, output = invoke("validate", str(suite))
    assert time.monotonic() - start < 60
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    line = " ".join(output.split())
    assert f"plugins: {tmp_path / 'suite' / 'plugin.py'}:" in line and "importing it ran over 0.3 s (a loop or a wait " \
        "at import? a plugin's import defines and registers; GSPO_BENCH_IMPORT_TIMEOUT=SECONDS raises the limit)" in line
    assert int(line.split("plugin.py:")[1].split(":")[0]) in (4, 5)  # in the loop
    assert "grpo_plugin" not in list_objectives() and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    monkeypatch.setenv("GSPO_BENCH_IMPORT_TIMEOUT", "-1")
    code, output = invoke("validate", str(suite))
    assert code == 2 and "GSPO_BENCH_IMPORT_TIMEOUT='-1': expected a positive number of seconds" in output, output


def test_a_plugin_edited_between_planning_and_a_worker_opening_the_run_is_refused(tmp_path):
    """The run record carries the hashes of the code the planner loaded; a worker process (--parallel, Ray)
    loads the plugin again from its file, and a file edited meanwhile would run code the record does not
    name: open_run refuses it (`code_edited`), naming the file."""
    from gspo_bench.config import load_suite
    from gspo_bench.config.load import load_suite_plugins
    from gspo_bench.config.run import code_edited
    from gspo_bench.suite import plan_runs
    from gspo_bench.train.setup import open_run

    suite_path = write_suite(tmp_path / "suite", tmp_path / "cache", SAME_GRPO, ["grpo_plugin"])
    plugin = tmp_path / "suite" / "plugin.py"
    spec = plan_runs(load_suite(suite_path), tmp_path / "out")[0].with_weights(tmp_path / "no-weights")
    assert spec.code == {str(plugin.resolve()): sha256_of(SAME_GRPO)}
    assert code_edited(spec) is None
    plugin.write_text(SAME_GRPO + "# edited after planning\n")
    unload_plugins()  # as a worker process starts: nothing loaded
    load_suite_plugins(spec.suite.plugins, spec.suite.name)
    assert f"{plugin.resolve()} changed since the suite was planned" in (code_edited(spec) or "")
    with pytest.raises(ValueError, match="changed since the suite was planned"):
        open_run(spec, resume=False)
    assert not (tmp_path / "out").exists()  # refused before the run folder is touched
