from __future__ import annotations

import json
import random

import pandas as pd
import pytest

from gspo_bench.tasks import Example, in_test_split, list_tasks, make_task, task_spec
from gspo_bench.tasks.countdown import check_steps
from gspo_bench.tasks.safe_eval import InvalidExpression, evaluate
from tests.helpers.contracts import package_tasks, parametrized

TASKS = package_tasks()  # the contract runs on every registered task: the registry, not a list


def qa_records(n: int = 60) -> list[dict]:
    return [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(n)]


def jsonl_params(folder) -> dict:
    path = folder / "qa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in qa_records()) + "\n")
    return {"path": str(path), "test_share": 0.2}


def hf_dataset_params(folder) -> dict:
    path = folder / "qa.parquet"
    pd.DataFrame(qa_records()).to_parquet(path)
    return {"path": str(path), "test_split": None, "test_share": 0.2, "prompt_field": "prompt"}


# a task built from the user's data has no default instance: its params for the contract, from a small file
DATA_PARAMS = {"jsonl": jsonl_params, "hf_dataset": hf_dataset_params}


def contract_task(name, folder):
    """Task `name` as the contract builds it: with its default params, or (a task built from the user's
    data) from a small question/answer file in `folder`."""
    if not task_spec(name).needs_params:
        return make_task(name)
    assert name in DATA_PARAMS, f"task {name!r} is built from the user's data: give the contract its params in DATA_PARAMS"
    return make_task(name, **DATA_PARAMS[name](folder))


def test_registry_lists_the_tasks():
    assert {"arithmetic", "chain", "countdown", "sort", "jsonl", "hf_dataset"} <= set(list_tasks())
    with pytest.raises(ValueError, match="valid"):
        make_task("sort", maxlen=3)
    with pytest.raises(LookupError, match="valid tasks"):
        make_task("sorting")


@pytest.mark.parametrize("name", TASKS)
def test_generators_are_deterministic_with_disjoint_splits(name, tmp_path):
    task = contract_task(name, tmp_path)
    a = [task.train_example(random.Random(3)) for _ in range(5)]
    b = [task.train_example(random.Random(3)) for _ in range(5)]
    assert a == b
    rng = random.Random(0)
    train = {task.train_example(rng).prompt for _ in range(500)}
    test = {ex.prompt for ex in task.test_examples(40)}
    assert test and len(test) == len(task.test_examples(40)) and not train & test
    if not task_spec(name).needs_params:  # a generated task's split is the prompt hash's (tasks.base)
        assert len(test) == 40 and all(in_test_split(p) for p in test) and not any(in_test_split(p) for p in train)
    assert task.test_examples(40) == task.test_examples(40)


@pytest.mark.parametrize("name", TASKS)
def test_reference_answers_score_one_and_wrong_ones_less(name, tmp_path):
    task = contract_task(name, tmp_path)
    rng = random.Random(1)
    for _ in range(50):
        ex = task.train_example(rng)
        assert task.reward(ex.answer, ex) == 1.0
        assert 0.0 <= task.reward(ex.answer + "9", ex) < 1.0  # a task may give partial credit (chain's steps)
        assert task.reward("", ex) == 0.0
        assert 0.0 <= task.reward("1+2=3", ex) <= 1.0


@pytest.mark.parametrize("name, params", [("arithmetic", {}), ("countdown", {}), ("sort", {}),
                                          ("chain", {"partial": False})])
def test_all_or_nothing_rewards_give_a_wrong_answer_zero(name, params):
    task = make_task(name, **params)
    rng = random.Random(1)
    for _ in range(50):
        ex = task.train_example(rng)
        assert task.reward(ex.answer, ex) == 1.0 and task.reward(ex.answer + "9", ex) == 0.0


def test_the_task_contract_runs_on_every_registered_task():
    """A task registered later is in the contract tests without an edit here; a list of tasks put back in
    place of the registry, or a task built from data without its contract params, fails here."""
    contract = parametrized(globals())
    assert set(contract) == {"test_generators_are_deterministic_with_disjoint_splits",
                             "test_reference_answers_score_one_and_wrong_ones_less"}
    assert all(names == package_tasks() for names in contract.values()), contract
    assert set(DATA_PARAMS) == {name for name in package_tasks() if task_spec(name).needs_params}


def test_arithmetic_and_sort_small_cases():
    ex = Example("47+385=", "432")
    assert make_task("arithmetic", digits=3).reward(" 432 ", ex) == 1.0
    assert make_task("arithmetic", digits=3).reward("431", ex) == 0.0
    sort = make_task("sort", min_len=5, max_len=5)
    ex = sort.train_example(random.Random(0))
    assert ex.meta["length"] == 5 and ex.answer == ",".join(sorted(ex.answer.split(",")))
    long = make_task("sort", min_len=8, max_len=8).train_example(random.Random(0))
    assert len(long.answer) > len(ex.answer)  # response length grows with the list


def test_countdown_rewards_steps_and_expressions():
    ex = Example("24:4,7,3,9=", "4+7=11,11*3=33,33-9=24", meta={"target": 24, "numbers": [4, 7, 3, 9]})
    task = make_task("countdown", count=4)
    assert task.reward("4+7=11,11*3=33,33-9=24", ex) == 1.0
    assert task.reward("(4+7)*3-9", ex) == 1.0  # a bare expression
    assert task.reward("9*3=27,27-7=20,20+4=24", ex) == 1.0  # another valid route
    assert task.reward("4+7=12,12*2=24", ex) == 0.0  # wrong arithmetic, unavailable number
    assert task.reward("4+7=11,11*3=33,33-9=24,24*1=24", ex) == 0.0  # 1 was never given
    assert task.reward("4*3=12,12+12=24", ex) == 0.0  # 12 produced once, used twice
    assert task.reward("4+4=8,8*3=24", ex) == 0.0  # 4 given once
    assert check_steps("9-7=2,4*3=12,12*2=24", [4, 7, 3, 9], 24)


@pytest.mark.parametrize(
    "text",
    ["__import__('os').system('true')", "a+1", "2**100", "open('x')", "[1,2]", "1 if 1 else 2", "(1).real", "-3",
     "1e3", "True+1", "9" * 70],
)
def test_safe_evaluator_refuses_everything_but_arithmetic(text):
    with pytest.raises(InvalidExpression):
        evaluate(text)


def test_safe_evaluator_is_exact():
    value, used = evaluate("(7-1)/4*2")
    assert value == 3 and used == [7, 1, 4, 2]
    with pytest.raises(InvalidExpression, match="zero"):
        evaluate("3/(2-2)")


def test_jsonl_task_reads_splits_and_verifies_math(tmp_path):
    path = tmp_path / "math.jsonl"
    records = [{"prompt": f"What is {i}/2?", "answer": f"\\frac{{{i}}}{{2}}"} for i in range(1, 60)]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    task = make_task("jsonl", path=str(path), test_share=0.2)
    test = task.test_examples(100)
    train = {task.train_example(random.Random(i)).prompt for i in range(200)}
    assert test and not train & {ex.prompt for ex in test}
    ex = Example("What is 3/2?", "\\frac{3}{2}")
    assert task.reward("The answer is $1.5$", ex) == 1.0
    assert task.reward("\\boxed{\\frac{3}{2}}", ex) == 1.0
    assert task.reward("2", ex) == 0.0
    assert task.reward("}}}{{", ex) == 0.0


@pytest.mark.parametrize(
    "line, message",
    [("{not json", "not valid JSON"), ("[1, 2]", "expected a JSON object"), ('{"prompt": "x"}', "'answer' missing")],
)
def test_jsonl_malformed_line_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "1+1", "answer": "2"}\n' + line + "\n")
    with pytest.raises(ValueError, match=rf"bad.jsonl:2: .*{message}"):
        make_task("jsonl", path=str(path))
