"""Countdown: reach a target from given numbers, showing the steps:

    prompt  "24:4,7,3,9="      (target, then the numbers)
    answer  "4+7=11,11*3=33,33-9=24"

Each step combines two available numbers (given ones, each at most once, or earlier results) with
+ - * / and states the result; the answer is right when every step is exact and the last result
is the target. A bare expression ("(4+7)*3-9") is accepted too. Everything is checked by a safe
evaluator over exact fractions: no `eval` of model text.

Chance baseline (`random_steps`): exact, well-formed steps that combine a random 2..count of the
given numbers in random order with random + - * (as the generator does), right only when they happen
to reach the target.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from gspo_bench.tasks.base import Example, GeneratedTask
from gspo_bench.tasks.registry import register_task
from gspo_bench.tasks.safe_eval import InvalidExpression, evaluate

MAX_STEPS = 8
MAX_COUNT = MAX_STEPS + 1  # numbers a problem gives: its answer has count - 1 steps, and at most MAX_STEPS are read


def check_steps(response: str, numbers: list[int], target: int) -> bool:
    """True if `response` is a chain of exact steps over the available numbers ending at `target`."""
    pool = Counter(Fraction(n) for n in numbers)
    pieces = response.strip().split(",")
    if not pieces or len(pieces) > MAX_STEPS:
        return False
    result = None
    for piece in pieces:
        left, sep, right = piece.partition("=")
        if not sep:
            return False
        try:
            value, used = evaluate(left)
            stated, stated_used = evaluate(right)
        except InvalidExpression:
            return False
        if len(used) != 2 or len(stated_used) != 1 or value != stated:
            return False
        operands = Counter(Fraction(n) for n in used)
        if operands - pool:
            return False
        pool = pool - operands + Counter([value])
        result = value
    return result == Fraction(target)


def step_verdicts(response: str, example: Example) -> list[tuple[int, int, bool]]:
    """(start, end, right) character spans of the steps of `response`, each step with the "," after it.

    A step is right when it parses, combines two numbers still available (given ones, each once, or
    earlier results) and states its exact value; a wrong step's stated value still becomes available,
    so later steps are judged on their own. A bare expression is one step: right iff it is the answer.
    """
    numbers, target = example.meta["numbers"], example.meta["target"]
    if "=" not in response:
        return [(0, len(response), check_expression(response.strip(), numbers, target))]
    pool, spans, start = Counter(Fraction(n) for n in numbers), [], 0
    for piece in response.split(","):
        end = min(start + len(piece) + 1, len(response))
        left, _, right = piece.partition("=")
        try:
            value, used = evaluate(left)
            stated, stated_used = evaluate(right)
            ok = len(used) == 2 and len(stated_used) == 1 and value == stated
            operands = Counter(Fraction(n) for n in used)
            ok = ok and not (operands - pool)
            pool = pool - operands + Counter([stated])
        except InvalidExpression:
            ok = False
        spans.append((start, end, ok))
        start = end
    return spans


def check_expression(response: str, numbers: list[int], target: int) -> bool:
    try:
        value, used = evaluate(response)
    except InvalidExpression:
        return False
    return not (Counter(used) - Counter(numbers)) and value == Fraction(target)


def random_combination(numbers: list[int], rng: random.Random) -> tuple[int, list[str]]:
    """A random 2..len(numbers) of `numbers` in random order, combined left to right with random + - *
    (the larger number first for -): the value reached and the steps written."""
    order = rng.sample(numbers, rng.randint(2, len(numbers)))
    current, steps = order[0], []
    for n in order[1:]:
        op = rng.choice("+-*")
        a, b = (current, n) if op != "-" or current >= n else (n, current)
        value = a + b if op == "+" else a - b if op == "-" else a * b
        steps.append(f"{a}{op}{b}={value}")
        current = value
    return current, steps


def random_steps(example: Example, rng: random.Random) -> str:
    """The countdown task's chance baseline: exact steps over a random combination of the given numbers."""
    return ",".join(random_combination(example.meta["numbers"], rng)[1])


@dataclass(frozen=True)
class CountdownProblems:
    count: int = 3  # numbers given
    max_number: int = 9
    max_target: int = 99

    def __post_init__(self) -> None:
        if self.count < 2 or self.max_number < 1 or self.max_target < 1:
            raise ValueError("countdown: need count >= 2, max_number >= 1, max_target >= 1")
        if self.count > MAX_COUNT:  # (more numbers also rarely end at a small target: drawing a problem would not end)
            raise ValueError(f"countdown: count must be at most {MAX_COUNT} (got {self.count})")

    def __call__(self, rng: random.Random) -> Example:
        while True:
            numbers = [rng.randint(1, self.max_number) for _ in range(self.count)]
            current, steps = random_combination(numbers, rng)
            if 1 <= current <= self.max_target:
                prompt = f"{current}:{','.join(map(str, numbers))}="
                return Example(prompt=prompt, answer=",".join(steps), meta={"target": current, "numbers": numbers})



def countdown_reward(response: str, example: Example) -> float:
    """1 if the steps (or a bare expression) reach the target using each given number at most once."""
    numbers, target = example.meta["numbers"], example.meta["target"]
    text = response.strip()
    ok = check_steps(text, numbers, target) if "=" in text else check_expression(text, numbers, target)
    return 1.0 if ok else 0.0


@register_task("countdown", "reach a target from given numbers with + - * /, step by step; safe evaluator")
def make_countdown(count: int = 3, max_number: int = 9, max_target: int = 99, seed: int = 0) -> GeneratedTask:
    return GeneratedTask("countdown", CountdownProblems(count, max_number, max_target), countdown_reward, seed,
                         steps=step_verdicts, baseline_policy=random_steps,
                         baseline_text="exact steps combining the given numbers in random order with random + - *")
