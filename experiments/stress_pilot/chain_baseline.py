"""The chain task's floor: the reward of a policy that writes well-formed, arithmetically right steps
from its own previous value but picks each step's operation at random, uniformly among the
2 x max_operand operations (+b or -b, b in 1..max_operand) that keep its value in 0..max_value.

Its mean reward on an example is exact: a distribution over the policy's current value is carried
step by step, and step i is right with the probability of picking the prompt's i-th operation. The
spread of one sampled response (what a sampled evaluation sees) comes from simulating responses
and scoring them with the task's own verifier.

    python experiments/stress_pilot/chain_baseline.py --steps 30 --max-operand 3 --max-value 9 [--n 1024]
"""

from __future__ import annotations

import argparse
import random
import statistics

from gspo_bench.tasks import Example, make_task


def allowed_ops(value: int, max_operand: int, max_value: int) -> list[tuple[str, int]]:
    """The operations (op, b) that keep `value` in 0..max_value."""
    ops = [("+", b) for b in range(1, max_operand + 1) if value + b <= max_value]
    return ops + [("-", b) for b in range(1, max_operand + 1) if value - b >= 0]


def apply(value: int, op: tuple[str, int]) -> int:
    return value + op[1] if op[0] == "+" else value - op[1]


def expected_reward(example: Example, max_operand: int, max_value: int) -> float:
    """Exact mean reward of the random-operation policy on `example` (n steps, each right with the
    probability that the policy, at its own current value, picks the prompt's operation)."""
    ops = [tuple(op) for op in example.meta["ops"]]
    belief = {example.meta["start"]: 1.0}  # the policy's current value -> probability
    right = 0.0
    for target in ops:
        after: dict[int, float] = {}
        for value, p in belief.items():
            choices = allowed_ops(value, max_operand, max_value)
            right += p * (target in choices) / len(choices)
            for op in choices:
                after[apply(value, op)] = after.get(apply(value, op), 0.0) + p / len(choices)
        belief = after
    return right / len(ops)


def sample_response(example: Example, max_operand: int, max_value: int, rng: random.Random) -> str:
    """One response of the random-operation policy: every step well formed and arithmetically right."""
    value, steps = example.meta["start"], []
    for _ in example.meta["ops"]:
        op = rng.choice(allowed_ops(value, max_operand, max_value))
        steps.append(f"{value}{op[0]}{op[1]}={apply(value, op)}")
        value = apply(value, op)
    return ";".join(steps)


def baseline(steps: int, max_operand: int, max_value: int, n: int, seed: int = 0) -> dict[str, float]:
    """On the task's first `n` test examples: the exact mean reward, the SD across examples of that
    mean, and the mean and SD of one sampled response's reward (verifier-scored)."""
    task = make_task("chain", steps=steps, max_operand=max_operand, max_value=max_value)
    examples = task.test_examples(n)
    exact = [expected_reward(ex, max_operand, max_value) for ex in examples]
    rng = random.Random(seed)
    sampled = [task.reward(sample_response(ex, max_operand, max_value, rng), ex) for ex in examples]
    return {"steps": steps, "max_operand": max_operand, "max_value": max_value, "examples": n,
            "mean_exact": statistics.fmean(exact), "sd_exact_across_examples": statistics.stdev(exact),
            "mean_sampled": statistics.fmean(sampled), "sd_sampled": statistics.stdev(sampled),
            "response_chars": statistics.fmean(len(ex.answer) for ex in examples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--max-operand", type=int, default=3)
    parser.add_argument("--max-value", type=int, default=9)
    parser.add_argument("--n", type=int, default=1024, help="test examples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = baseline(args.steps, args.max_operand, args.max_value, args.n, args.seed)
    print(",".join(result))
    print(",".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in result.values()))


if __name__ == "__main__":
    main()
