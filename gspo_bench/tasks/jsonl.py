"""A user's JSONL file of {prompt, answer} records; reward by math-verify (real math data)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from gspo_bench.tasks.base import Example, in_test_split
from gspo_bench.tasks.registry import register_task


def read_jsonl(path: Path, prompt_field: str, answer_field: str) -> list[Example]:
    """Every record of `path`; a malformed line raises ValueError naming the file and line."""
    if not path.is_file():
        raise FileNotFoundError(f"jsonl task: no file {path}")
    examples = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            for key in (prompt_field, answer_field):
                if not isinstance(record.get(key), str | int | float) or isinstance(record.get(key), bool):
                    raise ValueError(f"{path}:{lineno}: field {key!r} missing or not a string/number")
            examples.append(Example(prompt=str(record[prompt_field]), answer=str(record[answer_field]), meta=record,
                                    origin=f"{path}:{lineno}"))
    if not examples:
        raise ValueError(f"{path}: no records")
    return examples


class HeldOutMathRecords:
    """A task of fixed train and held-out records (`_train`, `_test`), rewarded by math-verify."""

    _train: list[Example]
    _test: list[Example]

    def train_example(self, rng: random.Random) -> Example:
        return rng.choice(self._train)

    def test_examples(self, n: int) -> list[Example]:
        return self._test[:n]

    def reward(self, response: str, example: Example) -> float:
        return math_reward(response, example)


@dataclass(frozen=True)
class JsonlTask(HeldOutMathRecords):
    path: str
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    test_share: float = 0.1
    name: str = "jsonl"
    _train: list[Example] = field(default_factory=list, repr=False)
    _test: list[Example] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        records = read_jsonl(Path(self.path), self.prompt_field, self.answer_field)
        for example in records:
            (self._test if in_test_split(example.prompt, self.test_share) else self._train).append(example)
        if not self._train or not self._test:
            raise ValueError(
                f"{self.path}: {len(records)} records give {len(self._train)} train / {len(self._test)} test; "
                "both splits need at least one (change test_share or add records)"
            )


def math_reward(response: str, example: Example) -> float:
    """1 when math-verify finds the response's answer equal to the example's, else 0."""
    from math_verify import parse, verify

    try:
        return 1.0 if verify(parse(example.answer), parse(response)) else 0.0
    except Exception:  # math-verify raises on unparsable model text: that is a wrong answer
        return 0.0


@register_task("jsonl", "a JSONL file of prompt/answer records; reward via math-verify", needs_params=True,
               paths=("path",))
def make_jsonl(path: str = "", prompt_field: str = "prompt", answer_field: str = "answer",
               test_share: float = 0.1) -> JsonlTask:
    if not path:
        raise ValueError("jsonl task needs params.path")
    return JsonlTask(path=path, prompt_field=prompt_field, answer_field=answer_field, test_share=test_share)
