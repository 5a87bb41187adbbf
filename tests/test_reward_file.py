"""A data-set task rewarded by the user's function from a file (`task.reward: {from: score.py, name: ...}`):
called with the response and the example's fields, checked to return a number in [0, 1], refused by
`validate` with the example that broke it, and part of what a resume compares."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.config import load_suite
from gspo_bench.config.plugins import unload_plugins
from gspo_bench.config.run import config_changes, resolved_config
from gspo_bench.suite.runner import plan_runs
from gspo_bench.tasks.base import Example
from gspo_bench.tasks.reward_file import checked_reward
from tests.helpers.runs import tiny_suite

SCORE = "def compute_score(response, fields):\n    return 1.0 if response.strip() == fields['answer'] else 0.0\n"


@pytest.fixture(autouse=True)
def fresh_functions():
    unload_plugins()
    yield
    unload_plugins()


def write_suite(folder: Path, score: str, reward: dict | None = None, task: str = "jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "data.jsonl").open("w") as f:
        for i in range(30):
            f.write(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1), "level": i % 3}) + "\n")
    (folder / "score.py").write_text(score)
    params = {"path": str(folder / "data.jsonl"), "test_share": 0.3} if task == "jsonl" else {}
    data = tiny_suite(folder / "cache", task={"name": task, "params": params,
                                              "reward": reward or {"from": "score.py"}}, objectives=[{"name": "grpo"}])
    (folder / "suite.yaml").write_text(yaml.safe_dump(data))
    return folder / "suite.yaml"


def test_the_function_gets_the_response_and_the_records_fields():
    seen = []
    example = Example("2+1=", "3", meta={"prompt": "2+1=", "answer": "3", "level": 2})
    assert checked_reward(lambda r, f: seen.append((r, f)) or 0.5, "s.py:f", "3", example) == 0.5
    assert seen == [("3", {"prompt": "2+1=", "answer": "3", "level": 2})]


@pytest.mark.parametrize("value", [2, "1", float("nan"), True, None, -0.1, np.bool_(True), np.float32("inf")])
def test_a_reward_outside_0_1_or_not_a_number_names_the_example(value):
    with pytest.raises(ValueError, match=r"s\.py:f returned .* for the example with prompt '2\+1=': .*a reward is a "
                                         r"number in \[0, 1\]"):
        checked_reward(lambda r, f: value, "s.py:f", "3", Example("2+1=", "3"))


def test_a_suite_reads_the_file_relative_to_itself_and_rewards_with_it(tmp_path):
    suite = load_suite(write_suite(tmp_path, SCORE))
    assert suite.task.reward is not None and suite.task.reward.file == str(tmp_path / "score.py")
    task = suite.task.instance()
    example = task.test_examples(1)[0]
    assert task.reward(example.answer, example) == 1.0 and task.reward("no", example) == 0.0


BAD = {
    "returns 2": ("def compute_score(response, fields):\n    return 2\n", "score.py:compute_score returned 2 (int) "
                  "for the example at "),
    "returns a string": ("def compute_score(response, fields):\n    return 'yes'\n", "returned 'yes' (str)"),
    "no such function": ("def score(response, fields):\n    return 1.0\n", "score.py: defines no function 'compute_score'"),
    "syntax error": ("def compute_score(response, fields)\n    return 1.0\n", "score.py:1: syntax error: "),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_validate_refuses_a_bad_reward_in_one_line_before_any_compute(case, tmp_path):
    text, expected = BAD[case]
    result = CliRunner().invoke(app, ["validate", str(write_suite(tmp_path, text))])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert expected in " ".join(result.output.split()), result.output
    assert not (tmp_path / "cache").exists()


def test_a_generated_task_checks_its_own_answers(tmp_path):
    result = CliRunner().invoke(app, ["validate", str(write_suite(tmp_path, SCORE, task="sort"))])
    assert result.exit_code == 2 and "a reward from a file is for the data-set tasks" in result.output


def test_an_edited_reward_file_or_plugin_is_a_change_a_resume_refuses(tmp_path):
    path = write_suite(tmp_path, SCORE)
    (tmp_path / "plugin.py").write_text("from gspo_bench.objectives import get_objective, register_objective\n"
                                        "register_objective('mine', description='d', reference='r')(get_objective('grpo'))\n")
    text = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump(text | {"plugins": ["plugin.py"]}))
    planned = plan_runs(load_suite(path), tmp_path / "out")[0]
    planned.run_dir.mkdir(parents=True)
    (planned.run_dir / "config.yaml").write_text(resolved_config(planned))
    assert config_changes(planned.run_dir, planned) == []
    (tmp_path / "score.py").write_text(SCORE.replace("1.0 if", "1 if"))
    (tmp_path / "plugin.py").write_text((tmp_path / "plugin.py").read_text() + "# edited\n")
    assert config_changes(planned.run_dir, planned) == []  # this process still runs the code it loaded
    unload_plugins()  # a resume is a new process: it reads the suite, loading the files as they are now
    changes = config_changes(planned.run_dir, plan_runs(load_suite(path), tmp_path / "out")[0])
    assert [c.split(":")[0] for c in changes] == [f"run.plugins.{tmp_path / 'plugin.py'}",
                                                  f"run.plugins.{tmp_path / 'score.py'}"]


@pytest.mark.parametrize("value", [np.float32(0.5), np.float64(0.25), np.int64(1), np.int8(0), 0.75, 1])
def test_a_real_number_of_numpy_or_python_is_a_reward(value):
    assert checked_reward(lambda r, f: value, "s.py:f", "3", Example("2+1=", "3")) == float(value)


@pytest.mark.parametrize("value, problem", [
    (float("nan"), "returned nan (float) for the example with prompt '2+1=': not a finite number"),
    (np.float64("-inf"), "returned np.float64(-inf) (float64) for the example with prompt '2+1=': not a finite number"),
    (np.bool_(False), "(bool) for the example with prompt '2+1=': a reward is a number in [0, 1], not a boolean"),
    (1.5, "returned 1.5 (float) for the example with prompt '2+1=': outside [0, 1]"),
])
def test_a_value_that_is_no_reward_is_named_with_why(value, problem):
    with pytest.raises(ValueError) as err:
        checked_reward(lambda r, f: value, "s.py:f", "3", Example("2+1=", "3"))
    assert problem in str(err.value)


RAISES = {
    "a KeyError": ("def compute_score(response, fields):\n    return fields['nope']\n", "raised KeyError: 'nope'"),
    "sys.exit": ("import sys\ndef compute_score(response, fields):\n    sys.exit(3)\n", "called sys.exit(3)"),
    "a bare SystemExit": ("def compute_score(response, fields):\n    raise SystemExit\n", "called sys.exit(None)"),
}


@pytest.mark.parametrize("case", sorted(RAISES))
def test_a_reward_that_raises_or_exits_is_named_with_its_file_and_example(case, tmp_path):
    """An exception or sys.exit in the reward: one line naming the file and function, what it raised,
    the example's line in the data file and its prompt; validate exits 2, as for any bad suite."""
    text, what = RAISES[case]
    result = CliRunner().invoke(app, ["validate", str(write_suite(tmp_path, text))])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    line = " ".join(result.output.split())
    assert f"{tmp_path / 'score.py'}:compute_score {what} for the example at {tmp_path / 'data.jsonl'}:" in line, line
    assert "with prompt '" in line and "(response '" in line, line


def test_a_reward_that_changes_its_fields_changes_no_data(tmp_path):
    """The function gets a copy of the record: what it appends to a list field is gone at the next call
    and from the example."""
    folder = tmp_path / "data"
    path = write_suite(folder, "def compute_score(response, fields):\n    fields['tags'].append('seen')\n"
                               "    fields['nested']['n'] += 1\n    return float(len(fields['tags']) == 1 and "
                               "fields['nested']['n'] == 1)\n")
    with (folder / "data.jsonl").open("w") as f:
        for i in range(30):
            f.write(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1), "tags": [], "nested": {"n": 0}}) + "\n")
    task = load_suite(path).task.instance()  # validate's calls: 32 of them on these records
    example = task.test_examples(1)[0]
    assert [task.reward("x", example) for _ in range(3)] == [1.0, 1.0, 1.0]
    assert example.meta["tags"] == [] and example.meta["nested"] == {"n": 0}


def test_validate_calls_the_reward_with_an_empty_response(tmp_path):
    """A reward that breaks on an empty response alone (a model's first outputs often are) is refused
    by validate, before any compute."""
    text = "def compute_score(response, fields):\n    return float(response[0] == fields['answer'][0])\n"
    result = CliRunner().invoke(app, ["validate", str(write_suite(tmp_path, text))])
    assert result.exit_code == 2, result.output
    assert "compute_score raised IndexError: string index out of range for the example at " in \
        " ".join(result.output.split()) and "(response '')" in result.output, result.output


def test_the_data_path_and_the_reward_file_are_read_from_the_suite_files_folder(tmp_path, monkeypatch):
    """`task.params.path` and `reward.from` relative to the suite file's folder, from any working folder;
    a path that is only in the working folder is refused saying how to write it."""
    suites, work = tmp_path / "suites", tmp_path / "work"
    write_suite(suites, SCORE)
    work.mkdir()
    data = yaml.safe_load((suites / "suite.yaml").read_text())
    data["task"]["params"]["path"] = "data.jsonl"
    (suites / "suite.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(work)
    suite = load_suite(suites / "suite.yaml")
    assert suite.task.params["path"] == str(suites / "data.jsonl") and suite.task.reward is not None
    assert suite.task.reward.file == str(suites / "score.py")
    example = suite.task.instance().test_examples(1)[0]
    assert example.origin.startswith(f"{suites / 'data.jsonl'}:")
    (suites / "data.jsonl").rename(work / "data.jsonl")  # now in the working folder alone
    result = CliRunner().invoke(app, ["validate", str(suites / "suite.yaml")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert (f"task.params.path: 'data.jsonl' is in the working folder, not in the suite file's folder {suites}, which "
            "paths in a suite file are read from (as plugins: and reward.from:): write '../work/data.jsonl' or an "
            "absolute path") in " ".join(result.output.split()), result.output
    (work / "data.jsonl").unlink()  # nowhere: left as given, and the task names it
    result = CliRunner().invoke(app, ["validate", str(suites / "suite.yaml")])
    assert result.exit_code == 2 and "jsonl task: no file data.jsonl" in result.output, result.output
