"""The files another library writes while it trains, read as (step, key, value) records in the order they
were written: transformers' `trainer_state.json` (`log_history`), TensorBoard event files (one file, or
a folder of them: read in name order, which is their creation order), and JSON lines of
`{"step": N, "data": {key: value}}` (verl's file logger). A file that is missing, cut short or holds
no values is refused in one line naming it; a value logged as null (orjson writes NaN and inf so; a
transformers metric with no valid value is None) is NaN; NaN and inf are kept as logged."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENTS = "tfevents"  # in every TensorBoard event file's name: events.out.tfevents.TIME.HOST...


class SourceError(ValueError):
    """A source file that cannot be read; the message names it."""


@dataclass(frozen=True)
class Record:
    step: int
    key: str
    value: float
    where: str  # the file it came from


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_files(path: Path) -> list[Path]:
    """The files `path` names: itself, or the event files under a folder (name order)."""
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    if path.is_file():
        return [path]
    found = sorted((p for p in path.rglob(f"*{EVENTS}*") if p.is_file()), key=lambda p: (p.name, str(p)))
    if not found:
        raise SourceError(f"{path}: a folder with no TensorBoard event files (events.out.tfevents.*)")
    return found


def read_path(path: Path) -> tuple[list[Path], list[Record]]:
    """The files `path` names and their records. A folder's event files are read together: one of them
    may hold no scalars (verl writes its validation samples as text through a writer of their own), but
    not all of them."""
    files = source_files(path)
    if path.is_file():
        return files, read_records(path)
    records = [r for f in files for r in event_records(f)]
    if not records:
        raise SourceError(f"{path}: its event files hold no scalar values ({', '.join(f.name for f in files)})")
    return files, records


def read_records(path: Path) -> list[Record]:
    """Every (step, key, value) `path` logged, in write order; SourceError naming the file."""
    if EVENTS in path.name:
        records = event_records(path)
    elif path.suffix in (".jsonl", ".ndjson"):
        records = json_lines_records(path)
    elif path.suffix == ".json":
        records = trainer_state_records(path)
    else:
        raise SourceError(f"{path}: not a known log file (trainer_state.json, *.jsonl, events.out.tfevents.*)")
    if not records:
        raise SourceError(f"{path}: holds no scalar values")
    return records


def number(value: Any) -> float | None:
    """A logged value as a float (None logged -> NaN); None for what is not a number (text, lists)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _flat(step: int, data: dict[str, Any], where: str) -> list[Record]:
    return [Record(step, str(key), v, where) for key, raw in data.items() if (v := number(raw)) is not None]


STEP_RANGE = (-(2**63), 2**63 - 1)  # a run folder's steps are 64-bit integers, as TensorBoard's are


def _step(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SourceError(f"{where}: step {value!r} is not an integer")
    if not STEP_RANGE[0] <= value <= STEP_RANGE[1]:
        raise SourceError(f"{where}: step {value} is out of the range of a 64-bit integer (a run folder's steps are; "
                          "TensorBoard's too): not a step count")
    return value


def trainer_state_records(path: Path) -> list[Record]:
    """transformers' trainer_state.json: one record per value of each `log_history` entry."""
    body = _load_json(path, path.read_bytes())
    history = body.get("log_history") if isinstance(body, dict) else None
    if not isinstance(history, list):
        raise SourceError(f"{path}: no log_history list (not a transformers trainer_state.json)")
    records = []
    for i, entry in enumerate(history):
        where = f"{path} log_history[{i}]"
        if not isinstance(entry, dict) or "step" not in entry:
            raise SourceError(f"{where}: expected an entry with a step")
        records += _flat(_step(entry["step"], where), {k: v for k, v in entry.items() if k != "step"}, str(path))
    return records


def json_lines_records(path: Path) -> list[Record]:
    """verl's file logger: one {"step": N, "data": {...}} object per line."""
    records = []
    lines = path.read_bytes().split(b"\n")
    for number_, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {number_}"
        body = _load_json(Path(where), line)
        if not isinstance(body, dict) or "step" not in body or not isinstance(body.get("data"), dict):
            raise SourceError(f"{where}: expected {{\"step\": N, \"data\": {{...}}}}")
        records += _flat(_step(body["step"], where), body["data"], str(path))
    if lines[-1].strip():  # every writer ends a line with a newline: a last line without one was cut short
        raise SourceError(f"{path} line {len(lines)}: cut short (no newline at the end of the file)")
    return records


def _load_json(where: Path, raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SourceError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise SourceError(f"{where}: not valid JSON (cut short?): {err.msg} at line {err.lineno}, "
                          f"column {err.colno}") from None


def tf_records(path: Path) -> list[bytes]:
    """The records of a TFRecord file (length, its CRC, data, its CRC); SourceError where the file ends
    inside one (TensorBoard's own reader stops there without a word)."""
    raw, at, found = path.read_bytes(), 0, []
    while at < len(raw):
        if at + 12 > len(raw):
            raise SourceError(f"{path}: cut short (a record header ends at byte {len(raw)})")
        (length,) = struct.unpack("<Q", raw[at:at + 8])
        end = at + 12 + length + 4
        if end > len(raw):
            raise SourceError(f"{path}: cut short (a record of {length} bytes at byte {at} ends past the file's "
                              f"{len(raw)} bytes)")
        found.append(raw[at + 12:at + 12 + length])
        at = end
    return found


def event_records(path: Path) -> list[Record]:
    """The scalars of a TensorBoard event file: simple values (torch's SummaryWriter) and one-value
    tensors (TensorFlow 2's writer)."""
    try:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.util import tensor_util
    except ImportError as err:
        raise SourceError(f"{path}: reading event files needs tensorboard: pip install tensorboard ({err})") from None
    records = []
    for i, data in enumerate(tf_records(path)):
        try:
            event = event_pb2.Event.FromString(data)
        except Exception as err:  # protobuf's DecodeError
            raise SourceError(f"{path}: record {i} is not a TensorBoard event ({type(err).__name__})") from None
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                records.append(Record(int(event.step), value.tag, float(value.simple_value), str(path)))
            elif kind == "tensor" and value.metadata.plugin_data.plugin_name == "scalars":
                records.append(Record(int(event.step), value.tag,
                                      float(tensor_util.make_ndarray(value.tensor).item()), str(path)))
    return records
