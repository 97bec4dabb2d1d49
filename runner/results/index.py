"""A listing of run directories that reads only what changed: each run's row, kept on disk
with the signature of the files it was built from.

`runner runs` and the dashboard's runs table each build one row a run from its records
(job.json, state.json, summary.json, ...), which costs milliseconds a run: seconds for the
thousands of runs a few sweeps make. Here a row is built once and reused while the run's
files are the same. A file's signature is what lstat says of it (inode, size, mtime in ns):
the records are replaced by rename, so every write is a new inode. The rows live in one
JSON file in the results directory (`.stackbench-index-KIND.json`, a cache: delete it and
the next listing rebuilds it), keyed by run directory name.

What it trusts: nothing. The index is read through contract.files (never through a link,
under a size cap); an index that is damaged, of another schema, or written by other code
(`code_key`: a digest of the modules that build the rows, so a changed runner never shows
rows the old one built) is ignored whole, and the listing rebuilds it. A row is reused only
for a directory that is listed now with the very signature it was built from, and only if
its shape is a row's; anything else is built again. Rows that can change with no file
changing (a local run still going: its supervisor may die) are built every time and never
kept. The directories themselves are found as the caller's `entries` finds them (never
through a link). Not here: what a row holds (the caller's `build`).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.util
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from contract import files
from contract.files import DamagedFile

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MAX_INDEX_BYTES = 256 << 20  # about 25 KiB a row for 10,000 runs: far above any real row
Row = dict[str, Any]
Signature = list[list[int] | None]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while the rows are read: they are a million small
    objects with no cycle among them, which each collection the reading sets off walks again
    for nothing (a third of a warm listing's time at 10,000 runs). Resumed after, if it ran."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def index_path(root: Path, kind: str) -> Path:
    return root / f".stackbench-index-{kind}.json"


def code_key(modules: Iterable[str]) -> str:
    """A digest of the source of the modules (by name) that build a kind's rows, found
    without importing them (a warm listing imports none of them)."""
    digest = hashlib.sha256()
    for name in modules:
        with contextlib.suppress(OSError, ImportError, ValueError, TypeError):
            spec = importlib.util.find_spec(name)
            digest.update(Path(spec.origin).read_bytes())  # type: ignore[union-attr,arg-type]
    return digest.hexdigest()[:16]


def signature(run_dir: str, dir_inode: int | None, names: Sequence[str]) -> Signature:
    """The directory's inode (one replaced by another of the same name differs; None: lstat
    it here), then (inode, size, mtime_ns) of each named file in it, None where missing.
    Paths as plain strings: pathlib's objects, even os.path.join, cost more than the lstat
    calls themselves, 10,000 runs over."""
    if dir_inode is None:
        try:
            dir_inode = os.lstat(run_dir).st_ino
        except OSError:
            dir_inode = 0
    out: Signature = [[dir_inode, 0, 0]]
    prefix = run_dir + "/"
    for name in names:
        try:
            info = os.lstat(prefix + name)
            out.append([info.st_ino, info.st_size, info.st_mtime_ns])
        except OSError:
            out.append(None)
    return out


class RowIndex:
    """One kind of row (`kind`: "runs", "dashboard") for the run directories of `root`.

    `names`: the files a row is built from; `build(name)`: the row of run directory `name`
    (a JSON object; None when it is no longer a run); `volatile(row)`: whether the row may
    change while no file does; `valid(row)`: whether a stored row has the shape `build`
    returns; `key`: code_key() of the modules behind `build`; `required`: a file of `names`
    without which a directory is no run (not built, not listed); `is_run(name, signature)`:
    whether a directory is a run, told from the signature just read where it can be (no
    further file looked at for most directories)."""

    def __init__(
        self, root: Path, kind: str, names: Sequence[str], key: str,
        build: Callable[[str], Row | None], volatile: Callable[[Mapping[str, Any]], bool],
        valid: Callable[[Any], bool], required: str | None = None,
        is_run: Callable[[str, Signature], bool] | None = None,
    ) -> None:  # fmt: skip
        self.root, self.kind, self.names, self.key = root, kind, tuple(names), key
        self._required = None if required is None else 1 + self.names.index(required)
        self.build, self.volatile, self.valid, self.is_run = build, volatile, valid, is_run
        self._stored: dict[str, tuple[Signature, Row]] | None = None

    def rows(self, entries: Iterable[tuple[str, int | None]]) -> dict[str, tuple[Signature, Row]]:
        """name -> (signature, row) for each run directory in `entries` ((name, the inode of
        the directory as scandir gives it, or None), in their order); the index on disk is
        rewritten when a kept row was added, changed or dropped."""
        with _collector_paused():
            return self._rows(entries)

    def _rows(self, entries: Iterable[tuple[str, int | None]]) -> dict[str, tuple[Signature, Row]]:
        stored = self._load() if self._stored is None else self._stored
        out: dict[str, tuple[Signature, Row]] = {}
        keep: dict[str, tuple[Signature, Row]] = {}
        root = str(self.root)
        for name, dir_inode in entries:
            sig = signature(os.path.join(root, name), dir_inode, self.names)
            if self._required is not None and sig[self._required] is None:
                continue
            if self.is_run is not None and not self.is_run(name, sig):
                continue
            hit = stored.get(name)
            # Equal to the signature just read, a stored one is well formed; its row is
            # checked here, where it is used, not for every row the index holds.
            if hit is not None and hit[0] == sig and self.valid(hit[1]):
                row = hit[1]
            else:
                built = self.build(name)
                if built is None:
                    continue
                row = built
            out[name] = (sig, row)
            if not self.volatile(row):
                keep[name] = (sig, row)
        if keep.keys() != stored.keys() or any(keep[k][0] != stored[k][0] for k in keep):
            self._save(keep)
        self._stored = keep
        return out

    def _load(self) -> dict[str, tuple[Signature, Row]]:
        path = index_path(self.root, self.kind)
        try:
            data = files.read_json(path, MAX_INDEX_BYTES)
        except FileNotFoundError:
            return {}
        except DamagedFile as err:
            log.info("rebuilding %s: %s", path, err.problem)
            return {}
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            return {}
        if data.get("code") != self.key or not isinstance(data.get("rows"), dict):
            return {}
        return {
            name: (entry[0], entry[1])
            for name, entry in data["rows"].items()
            if isinstance(entry, list) and len(entry) == 2
        }

    def _save(self, rows: Mapping[str, tuple[Signature, Row]]) -> None:
        """Written whole and atomically (last writer wins: each writes what it found); a
        results folder that refuses it (read-only, full) only makes the next listing slower."""
        if not self.root.is_dir():
            return
        document = {
            "schema_version": SCHEMA_VERSION, "kind": self.kind, "code": self.key,
            "rows": {name: [sig, row] for name, (sig, row) in rows.items()},
        }  # fmt: skip
        try:
            data = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
            if len(data) <= MAX_INDEX_BYTES:
                files.write_bytes(index_path(self.root, self.kind), data)
        except (OSError, ValueError) as err:  # ValueError: a row JSON cannot hold (nan)
            log.info("the run index was not written: %s", err)
