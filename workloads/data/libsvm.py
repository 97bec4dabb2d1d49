"""LIBSVM text files (plain or .bz2) converted once into a dense, memory-mapped binary cache.

The text format is one sample a line, `<label> <index>:<value> ...` with 1-based ascending
indices and zeros omitted. Parsing 400,000 x 2,000 values takes minutes, so it happens once
(`runner data fetch epsilon` does it) and training memory-maps the result:

    <cache dir>/meta.json       format, number of features, rows per split, sources
    <cache dir>/<split>.x.f32   rows x features float32, little-endian, row-major
    <cache dir>/<split>.y.i8    rows labels, int8 (+1 / -1)

Conversion streams: one line is parsed at a time and rows are written in blocks, so memory
stays small whatever the file size, and the cache appears atomically (built in a temporary
directory, then renamed). numpy only, no torch: the runner's fetch command calls it.
"""

from __future__ import annotations

import bz2
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import numpy as np

from contract import files
from workloads.data import EPSILON_CACHE_FORMAT, DataError

FORMAT = EPSILON_CACHE_FORMAT
ROWS_PER_WRITE = 1024
Progress = Callable[[str, int], None]  # (split, rows converted so far)


def read_rows(path: Path, num_features: int) -> Iterator[tuple[int, np.ndarray]]:
    """(label, dense float32 row) per line of a LIBSVM file; DataError names file:line."""
    opener: Callable[..., IO[bytes]] = bz2.open if path.suffix == ".bz2" else open
    line_number = 0
    try:
        with opener(path, "rb") as f:
            for line_number, line in enumerate(f, start=1):
                if not line.endswith(b"\n"):
                    raise DataError(f"{path}:{line_number}: ends mid-line; the file is truncated")
                yield parse_line(line, num_features, path, line_number)
    except (EOFError, OSError) as err:  # bz2: "Compressed file ended before the end..."
        raise DataError(f"{path}: truncated or corrupt after line {line_number} ({err})") from None


def parse_line(
    line: bytes, num_features: int, path: Path, line_number: int
) -> tuple[int, np.ndarray]:
    where = f"{path}:{line_number}"
    # LIBSVM separates fields by spaces or tabs (its own reader splits on both).
    fields = line.split(None, 1)
    label_text = fields[0] if fields else b""
    features = fields[1].strip() if len(fields) > 1 else b""
    if label_text not in (b"+1", b"1", b"-1"):
        raise DataError(f"{where}: label must be +1 or -1, got {label_text[:20]!r}")
    if not _one_colon_per_field(features):
        raise DataError(f"{where}: malformed features (expected index:value pairs)")
    pairs = features.replace(b":", b" ")
    try:
        values = np.fromstring(pairs, dtype=np.float64, sep=" ")  # C-speed parsing
    except ValueError:
        values = np.empty(0)
    if values.size != 2 * features.count(b":") or values.size % 2:
        raise DataError(f"{where}: malformed features (expected index:value pairs)")
    if not np.isfinite(values).all():  # nan, inf, and numbers beyond float range (1e400)
        raise DataError(f"{where}: values must be finite numbers (expected index:value pairs)")
    if np.abs(values[1::2]).max(initial=0.0) > np.finfo(np.float32).max:
        raise DataError(f"{where}: a value does not fit in float32, as the cache stores them")
    index = values[0::2]
    if index.size and (
        index[0] < 1 or index[-1] > num_features or np.any(np.diff(index) <= 0)
        or np.any(index != np.floor(index))
    ):  # fmt: skip
        raise DataError(f"{where}: feature indices must ascend within 1..{num_features}")
    row = np.zeros(num_features, dtype=np.float32)
    row[index.astype(np.int64) - 1] = values[1::2]
    return (1 if label_text != b"-1" else -1), row


# Whitespace as LIBSVM's reader (and bytes.split) takes it between fields, made one kind.
_TO_SPACE = bytes.maketrans(b"\t\n\r\x0b\x0c", b"     ")


def _one_colon_per_field(features: bytes) -> bool:
    """Whether each whitespace-separated field of `features` (stripped) holds exactly one
    colon. Counting values against colons alone takes `1:2:3 4` for two pairs and `1 :5`
    for one. Vectorized, as a 2,000-feature line is parsed 400,000 times: colons and the
    starts of fields must strictly alternate, a colon first and a colon last."""
    if not features:
        return True
    chars = np.frombuffer(features.translate(_TO_SPACE), dtype=np.uint8)
    blank = chars == ord(" ")
    field_starts = np.flatnonzero(blank[:-1] & ~blank[1:]) + 1
    colons = np.flatnonzero(chars == ord(":"))
    return colons.size == field_starts.size + 1 and bool(
        (colons[:-1] < field_starts).all() and (field_starts < colons[1:]).all()
    )


def convert(
    sources: dict[str, Path],
    cache_dir: Path,
    num_features: int,
    expected_rows: dict[str, int] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Convert each split's LIBSVM file into cache_dir (replaced atomically); returns it."""
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}-", dir=cache_dir.parent))
    try:
        splits = {}
        for split, source in sources.items():
            rows = _convert_split(source, tmp, split, num_features, progress)
            if rows == 0:
                raise DataError(f"{source}: no samples (expected one LIBSVM line per sample)")
            wanted = (expected_rows or {}).get(split)
            if wanted is not None and rows != wanted:
                raise DataError(f"{source}: {rows} samples, expected {wanted}; it is truncated")
            splits[split] = {"rows": rows, "source": source.name}
        meta = {"format": FORMAT, "num_features": num_features, "splits": splits}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users of a volume
        if cache_dir.exists():
            shutil.rmtree(cache_dir)
        os.replace(tmp, cache_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cache_dir


def _convert_split(
    source: Path, out_dir: Path, split: str, num_features: int, progress: Progress | None
) -> int:
    rows, labels, block = 0, [], []
    with open(out_dir / f"{split}.x.f32", "wb") as x_file:
        for label, row in read_rows(source, num_features):
            labels.append(label)
            block.append(row)
            rows += 1
            if len(block) == ROWS_PER_WRITE:
                x_file.write(np.stack(block).astype("<f4").tobytes())
                block = []
                if progress is not None:
                    progress(split, rows)
        if block:
            x_file.write(np.stack(block).astype("<f4").tobytes())
    np.asarray(labels, dtype=np.int8).tofile(out_dir / f"{split}.y.i8")
    if progress is not None:
        progress(split, rows)
    return rows


def read_meta(cache_dir: Path) -> dict:
    try:
        meta = files.loads((cache_dir / "meta.json").read_text())  # deep nesting: ValueError
    except FileNotFoundError:
        raise DataError(f"{cache_dir}: no converted data (meta.json missing)") from None
    except (OSError, ValueError) as err:  # a directory, unreadable, not UTF-8, not JSON
        raise DataError(f"{cache_dir / 'meta.json'}: corrupt ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise DataError(f"{cache_dir / 'meta.json'}: format {found!r}, not {FORMAT}")
    splits = meta.get("splits")
    if not isinstance(splits, dict) or not all(
        isinstance(v, dict) and "rows" in v for v in splits.values()
    ):
        raise DataError(f"{cache_dir / 'meta.json'}: expected splits with their rows")
    return meta


def open_split(cache_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(features [rows, num_features] float32, labels [rows] int8) as memory maps.

    Copy-on-write maps: writable arrays (torch.from_numpy accepts them without a copy) whose
    pages stay shared with the page cache, and with other ranks on the node, unless written.
    """
    meta = read_meta(cache_dir)
    if split not in meta["splits"]:
        raise DataError(f"{cache_dir}: no split {split!r} (has {', '.join(meta['splits'])})")
    rows, width = meta["splits"][split]["rows"], meta.get("num_features")
    x_path, y_path = cache_dir / f"{split}.x.f32", cache_dir / f"{split}.y.i8"
    if not (isinstance(rows, int) and rows > 0 and isinstance(width, int) and width > 0):
        raise DataError(f"{cache_dir / 'meta.json'}: {split} has {rows!r} rows of {width!r}")
    for path, size in ((x_path, rows * width * 4), (y_path, rows)):
        actual = path.stat().st_size if path.exists() else None
        if actual != size:
            raise DataError(f"{path}: {actual} bytes, expected {size}; the cache is damaged")
    x = np.memmap(x_path, dtype="<f4", mode="c", shape=(rows, width))
    y = np.memmap(y_path, dtype=np.int8, mode="c", shape=(rows,))
    # One byte a row, so cheap to check whole: any other label would silently train as -1.
    bad = np.flatnonzero((y != 1) & (y != -1))
    if bad.size:
        row = int(bad[0])
        raise DataError(
            f"{y_path}: row {row + 1} has label {int(y[row])}, expected +1 or -1; "
            "the cache is damaged"
        )
    return x, y
