"""The chain task: long step-by-step responses, a per-step reward and step verdicts for credit."""

from __future__ import annotations

import json
import random

import pytest
import torch

from gspo_bench.models.tokenizer import UNK_ID, build_char_tokenizer
from gspo_bench.tasks import Example, generated_tasks, in_test_split, make_task, task_params
from gspo_bench.tasks.chain import ChainProblems, chain_reward, step_verdicts
from gspo_bench.train.credit import step_advantages

# 7 +3 -> 10, -5 -> 5, +8 -> 13, -4 -> 9 (worked by hand)
EXAMPLE = Example(prompt="7:+3-5+8-4=", answer="7+3=10;10-5=5;5+8=13;13-4=9",
                  meta={"start": 7, "ops": [("+", 3), ("-", 5), ("+", 8), ("-", 4)], "values": [10, 5, 13, 9]})


def reward(response: str, partial: bool = True) -> float:
    return chain_reward(response, EXAMPLE, partial)


def test_the_reference_answer_scores_one():
    assert reward(EXAMPLE.answer) == 1.0
    assert reward(EXAMPLE.answer + ";") == 1.0  # a final ";" is no step
    task = make_task("chain")
    rng = random.Random(0)
    for ex in [task.train_example(rng) for _ in range(20)] + task.test_examples(5):
        assert task.reward(ex.answer, ex) == 1.0


def test_one_wrong_step_costs_one_step_and_the_next_continues_from_the_written_value():
    # step 2 states 6 (10-5 is 5); step 3 continues from its own 6 (right), step 4 from 14 (right)
    assert reward("7+3=10;10-5=6;6+8=14;14-4=10") == 3 / 4
    # step 3 continues from the reference 5, not from the 6 the response wrote: wrong too
    assert reward("7+3=10;10-5=6;5+8=13;13-4=9") == 2 / 4
    # right arithmetic but not the prompt's operation (+5 for -5); step 3 goes on from 15
    assert reward("7+3=10;10+5=15;15+8=23;23-4=19") == 3 / 4
    # not the prompt's operand (-4 for -5)
    assert reward("7+3=10;10-4=6;6+8=14;14-4=10") == 3 / 4
    # the first step must start from the prompt's start
    assert reward("8+3=11;11-5=6;6+8=14;14-4=10") == 3 / 4


def test_a_step_that_does_not_parse_is_wrong_and_the_next_is_judged_on_the_reference_value():
    assert reward("7+3=10;ten;5+8=13;13-4=9") == 3 / 4
    assert reward("7+3=10;10-5=05;5+8=13;13-4=9") == 3 / 4  # no leading zeros
    assert reward("7 + 3 = 10;10-5=5;5+8=13;13-4=9") == 3 / 4  # no spaces inside a step
    assert reward("") == 0.0
    assert reward("9") == 0.0


def test_truncated_and_overlong_responses():
    assert reward("7+3=10;10-5=5;5+8") == 2 / 4
    assert reward("7+3=10;10-5=5;5+8=1") == 2 / 4  # cut inside the last number
    assert reward("7+3=10;10-5=5;") == 2 / 4
    assert reward(EXAMPLE.answer + ";9+1=10") == 4 / 5  # a step beyond the n-th counts as wrong
    assert reward(EXAMPLE.answer + ";9+1=10;10+1=11") == 4 / 6


def test_all_or_nothing_reward():
    assert reward(EXAMPLE.answer, partial=False) == 1.0
    assert reward("7+3=10;10-5=6;6+8=14;14-4=10", partial=False) == 0.0
    assert reward("7+3=10;10-5=5;5+8=13", partial=False) == 0.0
    assert reward(EXAMPLE.answer + ";9+1=10", partial=False) == 0.0
    task = make_task("chain", steps=4, partial=False)
    assert task.reward("7+3=10;10-5=6;6+8=14;14-4=10", EXAMPLE) == 0.0
    assert make_task("chain", steps=4).reward("7+3=10;10-5=6;6+8=14;14-4=10", EXAMPLE) == 3 / 4


def test_step_spans_cover_each_step_with_its_separator_and_flag_the_wrong_one():
    response = "7+3=10;10-5=6;6+8=14;14-4=1"
    spans = step_verdicts(response, EXAMPLE)
    assert spans == [(0, 7, True), (7, 14, False), (14, 21, True), (21, 27, False)]
    assert [response[a:b] for a, b, _ in spans] == ["7+3=10;", "10-5=6;", "6+8=14;", "14-4=1"]
    assert step_verdicts(EXAMPLE.answer, EXAMPLE) == [(0, 7, True), (7, 14, True), (14, 21, True), (21, 27, True)]
    assert make_task("chain").steps is step_verdicts


def test_verdicts_survive_a_json_round_trip_of_the_example():
    # the lm-eval path writes meta as JSON: the operations come back as lists
    again = Example(EXAMPLE.prompt, EXAMPLE.answer, json.loads(json.dumps(EXAMPLE.meta)))
    assert again.meta["ops"][1] == ["-", 5]
    for response in (EXAMPLE.answer, "7+3=10;10-5=6;6+8=14;14-4=10"):
        assert step_verdicts(response, again) == step_verdicts(response, EXAMPLE)
    assert chain_reward(EXAMPLE.answer, again) == 1.0


def test_step_credit_lowers_the_advantage_of_the_wrong_steps_tokens_only():
    tokenizer = build_char_tokenizer()
    response = "7+3=10;10-5=6;6+8=14;14-4=10"
    ids = torch.tensor([tokenizer.encode(response)])  # one token per character
    out = step_advantages(torch.tensor([1.0]), ids, torch.ones_like(ids), [response], [EXAMPLE],
                          step_verdicts, tokenizer, penalty=0.5)
    expected = torch.ones(1, len(response))
    expected[0, 7:14] = 0.5  # "10-5=6;"
    torch.testing.assert_close(out, expected)


def test_default_responses_are_long_and_in_the_tokenizer_alphabet():
    tokenizer = build_char_tokenizer()
    task = make_task("chain")
    rng = random.Random(0)
    examples = [task.train_example(rng) for _ in range(50)]
    lengths = [len(ex.answer) for ex in examples]
    assert 150 <= min(lengths) and max(lengths) <= 240  # hundreds of tokens; max_new_tokens 240 (+ </s>: 241) fits
    for ex in examples:
        assert UNK_ID not in tokenizer.encode(ex.prompt + ex.answer)
        assert len(ex.meta["ops"]) == 30
        assert all(0 <= v <= 99 for v in [ex.meta["start"], *ex.meta["values"]])


def test_generated_chains_keep_values_in_range_and_follow_the_prompt():
    make = ChainProblems(steps=12, max_operand=5, max_value=10)
    rng = random.Random(4)
    for _ in range(100):
        ex = make(rng)
        current = ex.meta["start"]
        assert ex.prompt == f"{current}:{''.join(op + str(b) for op, b in ex.meta['ops'])}="
        for (op, b), value in zip(ex.meta["ops"], ex.meta["values"], strict=True):
            assert 1 <= b <= 5 and value == (current + b if op == "+" else current - b) and 0 <= value <= 10
            current = value
        assert ex.answer.split(";")[-1].endswith(f"={current}")


def test_splits_are_disjoint_and_the_test_set_is_deterministic():
    task = make_task("chain", steps=8)
    rng = random.Random(0)
    train = {task.train_example(rng).prompt for _ in range(300)}
    test = task.test_examples(50)
    prompts = {ex.prompt for ex in test}
    assert len(prompts) == 50 and not train & prompts
    assert all(in_test_split(p) for p in prompts) and not any(in_test_split(p) for p in train)
    assert make_task("chain", steps=8).test_examples(50) == test
    assert make_task("chain", steps=8, seed=1).test_examples(50) != test


def test_registered_with_its_params():
    assert "chain" in generated_tasks()
    assert task_params("chain") == {"steps": 30, "max_operand": 9, "max_value": 99, "partial": True, "seed": 0}


@pytest.mark.parametrize("params, message", [
    ({"steps": 0}, "steps >= 1"),
    ({"max_operand": 0}, "max_operand >= 1"),
    ({"max_operand": 9, "max_value": 17}, "max_value >= 2 \\* max_operand"),
    ({"partial": "yes"}, "partial must be true or false"),
    ({"step": 3}, "valid"),
])
def test_bad_params_are_a_clear_error(params, message):
    with pytest.raises(ValueError, match=message):
        make_task("chain", **params)
