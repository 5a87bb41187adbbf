"""Chain: apply a list of + and - operations to a start number, writing every step:

    prompt  "7:+3-5+8="        (the start, then the operations in order)
    answer  "7+3=10;10-5=5;5+8=13"

A long-response task: with the default 30 operations the answer is about 200 characters (tokens,
for the character tokenizer). Every value stays within 0..max_value (the generator picks + or -
so that it does), so a tiny model needs only small additions and subtractions.

Step i is right when it reads "a{op}b=c" with a the value the response itself wrote last (the
start for the first step), op and b the prompt's i-th operation, and c = a op b. A response that
goes wrong and then carries on correctly from its own wrong value loses only the wrong step. The
reward (`partial`, the default) is the share of right steps among max(n, steps written): a missing
step and a step beyond the n-th count as wrong, so only the reference chain scores 1, and a
response scores 1 only if its last value is the final answer. With `partial: false` the reward is
1 when every step is right and 0 otherwise.

Chance baseline (`random_operations`): a policy that writes n well-formed, arithmetically right steps
from the start, each with an operation drawn uniformly from those that keep its own value in
0..max_value. A step is right with probability 1/6 to 1/3 (max_operand 3): about 0.169 (std 0.070 per
response) for `{steps: 30, max_operand: 3, max_value: 9}`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from gspo_bench.tasks.base import Example, GeneratedTask
from gspo_bench.tasks.registry import register_task

STEP = re.compile(r"\s*(0|[1-9]\d*)([+-])(0|[1-9]\d*)=(0|[1-9]\d*)\s*")  # "a+b=c", plain decimals
SEPARATOR = ";"
MAX_STEPS = 10_000  # operations a problem may have (its answer is about 8 characters a step)


def _pieces(response: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of each ";"-separated piece, the span with the ";" after it; a blank
    piece at the end (after a final ";") is no step."""
    out, start = [], 0
    for text in response.split(SEPARATOR):
        end = min(start + len(text) + 1, len(response))
        out.append((start, end, text))
        start = end
    if out and not out[-1][2].strip():
        out.pop()
    return out


def step_verdicts(response: str, example: Example) -> list[tuple[int, int, bool]]:
    """(start, end, right) character spans of the steps of `response`, each with the ";" after it.

    Step i must continue from the value the previous step stated; after a step that does not parse
    (it states no value) the next is judged against the reference value at that point."""
    ops, values = example.meta["ops"], example.meta["values"]
    spans, previous = [], example.meta["start"]
    for i, (start, end, text) in enumerate(_pieces(response)):
        match = STEP.fullmatch(text)
        if i >= len(ops) or match is None:
            spans.append((start, end, False))
            previous = values[i] if i < len(values) else None
            continue
        a, op, b, c = int(match[1]), match[2], int(match[3]), int(match[4])
        value = a + b if op == "+" else a - b
        spans.append((start, end, a == previous and (op, b) == tuple(ops[i]) and c == value))
        previous = c
    return spans


def chain_reward(response: str, example: Example, partial: bool = True) -> float:
    """Share of right steps among max(n, steps written) (`partial`), else 1 iff all n steps are right."""
    n = len(example.meta["ops"])
    verdicts = [right for _, _, right in step_verdicts(response, example)]
    right = sum(verdicts)
    if not partial:
        return 1.0 if right == n == len(verdicts) else 0.0
    return right / max(n, len(verdicts))


@dataclass(frozen=True)
class ChainProblems:
    steps: int = 30  # operations per problem
    max_operand: int = 9
    max_value: int = 99  # every value of the chain is in 0..max_value

    def __post_init__(self) -> None:
        if self.steps < 1 or self.max_operand < 1:
            raise ValueError(f"chain: need steps >= 1 and max_operand >= 1 (got {self.steps}, {self.max_operand})")
        if self.steps > MAX_STEPS:
            raise ValueError(f"chain: steps must be at most {MAX_STEPS} (got {self.steps}): the answer writes every step")
        if self.max_value < 2 * self.max_operand:
            raise ValueError(f"chain: need max_value >= 2 * max_operand, so that + or - always stays in "
                             f"0..max_value (got max_value {self.max_value}, max_operand {self.max_operand})")

    def __call__(self, rng: random.Random) -> Example:
        current = rng.randint(0, self.max_value)
        start, ops, values, lines = current, [], [], []
        for _ in range(self.steps):
            b = rng.randint(1, self.max_operand)
            allowed = [op for op, v in (("+", current + b), ("-", current - b)) if 0 <= v <= self.max_value]
            op = rng.choice(allowed)
            value = current + b if op == "+" else current - b
            lines.append(f"{current}{op}{b}={value}")
            ops.append((op, b))
            values.append(value)
            current = value
        prompt = f"{start}:{''.join(f'{op}{b}' for op, b in ops)}="
        return Example(prompt=prompt, answer=SEPARATOR.join(lines), meta={"start": start, "ops": ops, "values": values})


def random_operations(example: Example, rng: random.Random, max_operand: int, max_value: int) -> str:
    """n right steps from the prompt's start, each operation drawn uniformly from the (op, b) pairs that
    keep the policy's own value in 0..max_value: the chain task's chance baseline."""
    current, lines = example.meta["start"], []
    for _ in example.meta["ops"]:
        op, b = rng.choice([(op, b) for b in range(1, max_operand + 1) for op in "+-"
                            if 0 <= (current + b if op == "+" else current - b) <= max_value])
        value = current + b if op == "+" else current - b
        lines.append(f"{current}{op}{b}={value}")
        current = value
    return SEPARATOR.join(lines)


@register_task("chain", "apply `steps` +/- operations to a start number writing every step (long responses, "
                        "step-level verdicts); reward: share of right steps, or all-or-nothing")
def make_chain(steps: int = 30, max_operand: int = 9, max_value: int = 99, partial: bool = True,
               seed: int = 0) -> GeneratedTask:
    if not isinstance(partial, bool):
        raise ValueError(f"chain: partial must be true or false (got {partial!r})")

    def verify(response: str, example: Example) -> float:
        return chain_reward(response, example, partial)

    def baseline_policy(example: Example, rng: random.Random) -> str:
        return random_operations(example, rng, max_operand, max_value)

    return GeneratedTask("chain", ChainProblems(steps, max_operand, max_value), verify, seed, steps=step_verdicts,
                         baseline_policy=baseline_policy,
                         baseline_text="well-formed, arithmetically right steps with random operations")
