"""The files another library writes while it trains, read as (step, key, value) records in the order they
were written: transformers' `trainer_state.json` (`log_history`), TensorBoard event files (one file, or
a folder of them: read in name order, which is their creation order), and JSON lines of
`{"step": N, "data": {key: value}}` (verl's file logger). A file that is missing, cut short or holds
no values, and an event file whose records fail their checksums, are refused in one line naming it; a value logged as null (orjson writes NaN and inf so; a
transformers metric with no valid value is None) is NaN; NaN and inf are kept as logged."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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


def natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """`name`'s sort key with each run of digits read as a number: "a.9" before "a.10"."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part)


def source_files(path: Path) -> list[Path]:
    """The files `path` names: itself, or the event files under a folder, in the order they were written:
    by name with its numbers read as numbers (events.out.tfevents.TIME.HOST.PID.N: a writer's tenth file of
    one second, N = 10, comes after its ninth, not before it as in plain name order)."""
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    if path.is_file():
        return [path]
    found = sorted((p for p in path.rglob(f"*{EVENTS}*") if p.is_file()), key=lambda p: (natural(p.name), str(p)))
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


def _crc_table() -> np.ndarray:
    """CRC-32C's (Castagnoli, reflected polynomial 0x82F63B78) byte table."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1).astype(np.uint32)
    return table


CRC_TABLE = _crc_table()
PIECE = 64  # bytes: a chunk is split into pieces of this length (longer ones for long chunks), checksummed side by side


@functools.lru_cache(maxsize=32)
def _after_zeros(count: int) -> np.ndarray:
    """[4, 256] tables of the CRC register after `count` zero bytes, by each byte of the register before
    (the step is linear over bits: the register after is the XOR of the four tables' entries)."""
    register = np.uint32(1) << np.arange(32, dtype=np.uint32)  # each bit alone
    for _ in range(count):
        register = CRC_TABLE[register & 0xFF] ^ (register >> 8)
    bits = (np.arange(256, dtype=np.uint32)[:, None] >> np.arange(8, dtype=np.uint32)) & 1  # [value, bit]
    return np.stack([np.bitwise_xor.reduce(np.where(bits == 1, register[8 * i:8 * i + 8], np.uint32(0)), axis=1)
                     for i in range(4)]).astype(np.uint32)


def _register(data: np.ndarray, piece: int) -> np.ndarray:
    """The CRC register after each row of `data` ([rows, width], width a multiple of `piece`) from a zero
    register: every piece at once, then the pieces folded in order, CRC(a + b) = CRC(a) after len(b) zero
    bytes XOR CRC(b)."""
    split = data.reshape(data.shape[0], data.shape[1] // piece, piece)
    register = np.zeros(split.shape[:2], dtype=np.uint32)
    for j in range(piece):
        register = CRC_TABLE[(register ^ split[:, :, j]) & 0xFF] ^ (register >> 8)
    after, folded = _after_zeros(piece), register[:, 0]
    for k in range(1, split.shape[1]):
        folded = (after[0][folded & 0xFF] ^ after[1][(folded >> 8) & 0xFF] ^ after[2][(folded >> 16) & 0xFF]
                  ^ after[3][folded >> 24] ^ register[:, k])
    return folded


def crc32c(chunks: list[bytes]) -> np.ndarray:
    """The CRC-32C of each chunk (TFRecord files hold it masked: `masked_crc32c`), vectorized over chunks
    of a like length: a chunk's first four bytes complemented (the same as starting the register at all
    ones) and zeros put in front up to whole pieces (no change to a register at zero), then `_register`."""
    out = np.zeros(len(chunks), dtype=np.uint32)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, chunk in enumerate(chunks):
        if len(chunk) >= 4:  # shorter ones: byte by byte, below
            piece = PIECE * max(1, -(-math.isqrt(len(chunk)) // PIECE))  # long chunks: ~sqrt(length) per piece
            groups.setdefault((piece, -(-len(chunk) // piece)), []).append(i)
    for (piece, pieces), members in groups.items():
        width = piece * pieces
        padded = b"".join(bytes(width - len(chunks[i])) + chunks[i] for i in members)
        data = np.frombuffer(padded, dtype=np.uint8).reshape(len(members), width).copy()
        starts = width - np.array([len(chunks[i]) for i in members])
        for k in range(4):
            data[np.arange(len(members)), starts + k] ^= np.uint8(0xFF)
        out[members] = _register(data, piece) ^ np.uint32(0xFFFFFFFF)
    for i in (i for i, chunk in enumerate(chunks) if len(chunk) < 4):  # fewer bytes than the register
        value = 0xFFFFFFFF
        for byte in chunks[i]:
            value = int(CRC_TABLE[(value ^ byte) & 0xFF]) ^ (value >> 8)
        out[i] = value ^ 0xFFFFFFFF
    return out


def masked_crc32c(chunks: list[bytes]) -> np.ndarray:
    """TFRecord's checksum of each chunk: its CRC-32C rotated right by 15 bits plus 0xA282EAD8 (mod 2^32)."""
    crc = crc32c(chunks)
    return ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)


def tf_records(path: Path) -> list[bytes]:
    """The records of a TFRecord file (length, its masked CRC-32C, data, its masked CRC-32C); SourceError
    where the file ends inside one (TensorBoard's own reader stops there without a word) or a checksum does
    not match (a byte changed since the file was written: a changed value would otherwise import silently)."""
    raw, at = path.read_bytes(), 0
    headers: list[bytes] = []
    found: list[bytes] = []
    sums: list[int] = []  # each header's checksum, then its data's
    starts: list[int] = []

    def failing(kind: str, i: int, count: int = 1) -> SourceError:
        return SourceError(f"{path}: record {i} at byte {starts[i]}: its {kind} fails its checksum (the file was "
                           "changed or damaged after it was written" + (f"; {count} records in all)" if count > 1 else ")"))

    while at < len(raw):
        if at + 12 > len(raw):
            raise SourceError(f"{path}: cut short (a record header ends at byte {len(raw)})")
        (length,) = struct.unpack("<Q", raw[at:at + 8])
        starts.append(at)
        end = at + 12 + length + 4
        if end > len(raw):  # a file cut short, or a length that changed (and the records after it misread)
            checked = [*headers, raw[at:at + 8]]
            stored = np.array([*sums[::2], *struct.unpack("<I", raw[at + 8:at + 12])], dtype=np.uint32)
            bad = np.flatnonzero(masked_crc32c(checked) != stored)
            if len(bad):
                raise failing("length", int(bad[0]))
            raise SourceError(f"{path}: cut short (a record of {length} bytes at byte {at} ends past the file's "
                              f"{len(raw)} bytes)")
        headers.append(raw[at:at + 8])
        found.append(raw[at + 12:at + 12 + length])
        sums += struct.unpack("<I", raw[at + 8:at + 12]) + struct.unpack("<I", raw[end - 4:end])
        at = end
    expected = np.array(sums, dtype=np.uint32).reshape(-1, 2)
    for column, (kind, chunks) in enumerate((("length", headers), ("data", found))):
        bad = np.flatnonzero(masked_crc32c(chunks) != expected[:, column])
        if len(bad):
            raise failing(kind, int(bad[0]), len(bad))
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
