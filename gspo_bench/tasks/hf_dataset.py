"""A Hugging Face dataset of question/answer records, loaded with `datasets.load_dataset`; reward by
math-verify (as the `jsonl` task).

`path` is what `load_dataset` takes: a hub id (on a connected machine, or one in the local datasets
cache), a local dataset directory, or a data file (`.parquet`, `.json`, `.jsonl`, `.csv`, loaded with
the matching builder). The usual math sets:

    | dataset                            | prompt_field | answer_field | answer_pattern  | splits      |
    |------------------------------------|--------------|--------------|-----------------|-------------|
    | openai/gsm8k (name: main)          | question     | answer       | '#### (.+)$'    | train, test |
    | EleutherAI/hendrycks_math (name: algebra, ...) | problem | solution | (none: math-verify reads the \\boxed{}) | train, test |
    | BytedTsinghua-SIA/DAPO-Math-17k    | prompt (a chat list: use the jsonl task) | reward_model.ground_truth | - | train |
    | HuggingFaceH4/MATH-500             | problem      | answer       | -               | test        |

A dataset with no test split (`test_split: null`) is split by a hash of the prompt (`test_share`).
Errors name the dataset and the split or field that is missing.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gspo_bench.tasks.base import Example, in_test_split
from gspo_bench.tasks.jsonl import HeldOutMathRecords
from gspo_bench.tasks.registry import register_task

if TYPE_CHECKING:
    from datasets import Dataset

FILE_BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}


def dataset_label(path: str, name: str | None) -> str:
    """How errors name the dataset: `hf_dataset 'openai/gsm8k' (name 'main')`."""
    return f"hf_dataset {path!r}" + (f" (name {name!r})" if name else "")


def load_split(path: str, name: str | None, split: str) -> Any:
    """`datasets.load_dataset(path, name, split=split)` (a data file with its builder); errors name
    the dataset and, for a missing split, the splits it has."""
    import datasets

    what = dataset_label(path, name)
    builder, files = path, None
    suffix = Path(path).suffix.lower()
    if suffix in FILE_BUILDERS:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{what}: no such file")
        builder, files = FILE_BUILDERS[suffix], {"train": path}
    try:
        with quiet(datasets):
            splits = datasets.load_dataset(builder, name, data_files=files)
    except (FileNotFoundError, ValueError, ConnectionError, OSError, datasets.exceptions.DatasetsError) as err:
        with quiet(datasets):
            broken = unreadable_split(builder, name, files)
        if broken is not None:  # one split's files are empty or damaged: `load_dataset` builds them all
            bad, files_of, reason = broken
            raise ValueError(f"{what} split {bad!r} is empty or cannot be read ({files_of}): {reason}") from None
        raise ValueError(f"{what} cannot be loaded: {root_cause(err)}") from None
    if split not in splits:
        raise ValueError(f"{what} has no split {split!r}; its splits: {', '.join(splits)}")
    return splits[split]


def root_cause(err: BaseException) -> str:
    """The first line of the innermost error behind `err` (datasets wraps a reader's error in its own)."""
    inner = err.__cause__ or err.__context__
    while inner is not None:
        err, inner = inner, inner.__cause__ or inner.__context__
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def unreadable_split(
    builder: str, name: str | None, files: dict[str, Any] | None
) -> tuple[str, str, str] | None:
    """(split, its file names, why) of the first split whose data files load no records, each split
    loaded alone; None when the splits cannot be told apart (no data files) or each loads."""
    import datasets

    try:
        resolved = datasets.load_dataset_builder(builder, name, data_files=files)
        by_split = {str(split): list(paths) for split, paths in (resolved.config.data_files or {}).items()}
    except Exception:  # the dataset itself cannot be resolved: the caller reports load_dataset's error
        return None
    for split, paths in by_split.items():
        try:
            rows = datasets.load_dataset(resolved.name, data_files={split: paths}, split=split)
        except Exception as err:
            return split, ", ".join(Path(p).name for p in paths), root_cause(err)
        if len(rows) == 0:
            return split, ", ".join(Path(p).name for p in paths), "no records"
    return None


@contextlib.contextmanager
def quiet(datasets: ModuleType) -> Iterator[None]:
    """`datasets` without its progress bars and with errors only in its log, for one load; restored after."""
    verbosity, bars = datasets.logging.get_verbosity(), datasets.is_progress_bar_enabled()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # errors too: ours names the split, in one line
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()


def field_value(record: dict[str, Any], dotted: str) -> Any:
    """record['a']['b'] for 'a.b' (nested fields such as DAPO's reward_model.ground_truth); KeyError if absent."""
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def read_examples(rows: Dataset, what: str, prompt_field: str, answer_field: str, answer_pattern: str | None) -> list[Example]:
    """Examples of a loaded split; errors name the dataset, the split and the field."""
    columns = list(rows.column_names)
    for wanted in (prompt_field, answer_field):
        if wanted.split(".")[0] not in columns:
            raise ValueError(f"{what} has no field {wanted!r}; its fields: {', '.join(columns)}")
    pattern = re.compile(answer_pattern, re.MULTILINE | re.DOTALL) if answer_pattern else None
    examples = []
    for index, record in enumerate(rows):
        try:
            prompt, answer = field_value(record, prompt_field), field_value(record, answer_field)
        except KeyError as err:
            raise ValueError(f"{what}, record {index}: no field {err.args[0]!r}") from None
        for key, value in ((prompt_field, prompt), (answer_field, answer)):
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError(f"{what}, record {index}: field {key!r} is {type(value).__name__}, "
                                 "not a string or number")
        answer = str(answer)
        if pattern is not None:
            match = pattern.search(answer)
            if match is None:
                raise ValueError(f"{what}, record {index}: answer_pattern {answer_pattern!r} does not match "
                                 f"field {answer_field!r} ({answer[:60]!r})")
            answer = match.group(1) if pattern.groups else match.group(0)
        examples.append(Example(prompt=str(prompt), answer=answer.strip(), meta=dict(record),
                                origin=f"{what}, record {index}"))
    if not examples:
        raise ValueError(f"{what} has no records")
    return examples


def split_examples(path: str, name: str | None, split: str, prompt_field: str, answer_field: str,
                   answer_pattern: str | None) -> tuple[Example, ...]:
    """The examples of one split. Each task instance reads its splits once, when it is built; no cache
    outlives it (`datasets` keeps its own on disk)."""
    what = f"{dataset_label(path, name)} split {split!r}"
    return tuple(read_examples(load_split(path, name, split), what, prompt_field, answer_field, answer_pattern))


@dataclass(frozen=True)
class HFDatasetTask(HeldOutMathRecords):
    path: str
    config_name: str | None = None  # the dataset's configuration (load_dataset's `name`)
    split: str = "train"
    test_split: str | None = "test"
    prompt_field: str = "question"
    answer_field: str = "answer"
    answer_pattern: str | None = None
    test_share: float = 0.1
    name: str = "hf_dataset"
    _train: list[Example] = field(default_factory=list, repr=False)
    _test: list[Example] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        label = dataset_label(self.path, self.config_name)
        fields = (self.prompt_field, self.answer_field, self.answer_pattern)
        train = split_examples(self.path, self.config_name, self.split, *fields)
        if self.test_split is None:  # one split: held-out problems by a hash of the prompt
            for example in train:
                (self._test if in_test_split(example.prompt, self.test_share) else self._train).append(example)
        else:
            self._train.extend(train)
            self._test.extend(split_examples(self.path, self.config_name, self.test_split, *fields))
        if not self._train or not self._test:
            raise ValueError(f"{label}: {len(self._train)} train / {len(self._test)} test records; both need one "
                             "(change test_share or test_split)")


@register_task("hf_dataset", "a Hugging Face dataset (hub id, local directory or data file) of question/answer "
               "records; reward via math-verify", needs_params=True, paths=("path",))
def make_hf_dataset(path: str = "", name: str | None = None, split: str = "train", test_split: str | None = "test",
                    prompt_field: str = "question", answer_field: str = "answer", answer_pattern: str | None = None,
                    test_share: float = 0.1) -> HFDatasetTask:
    if not path:
        raise ValueError("hf_dataset task needs params.path (a hub id, a local directory or a data file)")
    if answer_pattern is not None:
        try:
            re.compile(answer_pattern)
        except re.error as err:
            raise ValueError(f"hf_dataset {path!r}: answer_pattern {answer_pattern!r} is not a regex ({err})") from None
    return HFDatasetTask(path=path, config_name=name, split=split, test_split=test_split, prompt_field=prompt_field,
                         answer_field=answer_field, answer_pattern=answer_pattern, test_share=test_share)
