"""What `runner benchmarks` lists of each benchmark (its card), read without importing any
benchmark's code when none of that code changed.

A card's facts (name, task, description, target, defaults, origin) are derived from the
registered Benchmark itself, never declared a second time. Deriving them imports every
benchmark's components (all the models', data sets' and tasks' configs, and the installed
plugins' modules, found through importlib.metadata): more than the rest of the listing
together. So the cards are kept in a cache beside this module's bytecode (where Python
keeps its own: __pycache__, or PYTHONPYCACHEPREFIX's tree; not written under
PYTHONDONTWRITEBYTECODE), stamped with what they were derived from: the interpreter and its
sys.path (each folder's mtime, so a module that would now shadow one is seen), every
installed distribution's metadata files (entry points, version) and the inode, size and
mtime of every module file imported while deriving them. A cache whose stamp differs in
anything is derived again, so a stale card is never listed; one that cannot be read or
parsed (damaged, a link, garbage, another shape) is derived again and replaced.

Not here: the table (runner/cli/catalog.py), the registry (workloads/plugins/).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import zlib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.job.benchmark_types import AnyBenchmark

CACHE_VERSION = 1
# The files of a distribution's metadata that decide what it adds and under which version.
_DIST_FILES = ("entry_points.txt", "METADATA", "PKG-INFO")


@dataclass(frozen=True)
class Card:
    """One benchmark as the listing shows it. `target_metric` is None for a measurement
    of the stack itself (a MicroBenchmark: no target, batch or strategy)."""

    name: str
    task: str
    description: str
    origin: str  # "built in", "dist==version" or a plugin's path
    default_workers: int
    default_runs: int
    target_metric: str | None = None
    lower_is_better: bool = False
    target_value: float | None = None
    light_target: float | None = None
    batch_size: int | None = None
    strategy: str | None = None


def card_of(bench: AnyBenchmark, origin: str) -> Card:
    from runner.job.benchmark_types import MicroBenchmark
    from workloads.tasks.config import LOWER_IS_BETTER

    if isinstance(bench, MicroBenchmark):
        return Card(bench.name, bench.task, bench.description, origin,
                    bench.default_workers, bench.default_runs)  # fmt: skip
    c = bench.config
    return Card(
        bench.name, bench.task, bench.description, origin, bench.default_workers,
        bench.default_runs, c.target_metric, c.target_metric in LOWER_IS_BETTER,
        c.target.target_value, bench.light_target, c.data.batch_size, c.strategy.name,
    )  # fmt: skip


def registered() -> list[Card]:
    """The cards of every registered benchmark (ours, the installed packages', and those of
    plugins this process loaded), derived by importing them all."""
    from workloads.plugins import points

    return [card_of(e.obj, e.origin) for e in points.BENCHMARKS.entries().values()]


def listed() -> list[Card]:
    """The cards of every benchmark: from the cache while nothing they came from changed,
    else derived (and cached). A process that loaded a plugin by name or path lists what it
    loaded, uncached: that code is not the installed set the cache stands for."""
    loading = sys.modules.get("workloads.plugins.loading")
    if loading is not None and loading.loaded():
        return registered()
    path = cache_path()
    cached = _read(path)
    if cached is not None:
        return cached
    started_ns = time.time_ns()
    cards = registered()
    if not sys.dont_write_bytecode:
        _write(path, cards, started_ns)
    return cards


def cache_path() -> Path:
    """Where this interpreter's cache is: beside this module's bytecode, one per Python
    executable and sys.path (two virtual environments on one checkout see different
    plugins), so that neither replaces the other's."""
    pyc = Path(importlib.util.cache_from_source(__file__))
    tag = f"{zlib.crc32(repr([sys.executable, sys.path]).encode()):08x}"
    return pyc.with_name(f"benchmark-cards.{tag}.json")


def _read(path: Path) -> list[Card] | None:
    """The cached cards if the file is sound and its stamp is today's, else None."""
    from contract.files import DamagedFile, read_json_object

    try:
        data = read_json_object(path)
    except FileNotFoundError:
        return None
    except (OSError, DamagedFile):  # unreadable, a link, not JSON: derived again, replaced
        return None
    try:
        if data["version"] != CACHE_VERSION or data["interpreter"] != _interpreter():
            return None
        sources = data["sources"]
        if not isinstance(sources, dict) or sources != _files_stamp(sources):
            return None
        if data["dists"] != _dists_stamp():
            return None
        return [_card_from(raw) for raw in data["cards"]]
    except (KeyError, TypeError, ValueError, AttributeError):  # another shape: derived again
        return None


def _write(path: Path, cards: list[Card], started_ns: int) -> None:
    """Cache `cards`, derived from what is imported now, with its stamp; not when a file
    changed after `started_ns` (while they were derived: which version was read is unknown)."""
    from contract.files import write_json

    modules = list(sys.modules.values())
    files = sorted({f for m in modules if isinstance(f := getattr(m, "__file__", None), str)})
    sources = _files_stamp(files)
    if any(stamp is not None and stamp[2] >= started_ns for stamp in sources.values()):
        return
    data = {
        "version": CACHE_VERSION,
        "interpreter": _interpreter(),
        "dists": _dists_stamp(),
        "sources": sources,
        "cards": [asdict(card) for card in cards],
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, data)
    except OSError:  # a read-only install: listed without caching
        pass


def _card_from(raw: Any) -> Card:
    """A card from its JSON; TypeError or ValueError when a field is missing or of a
    wrong type (a hand-edited cache is derived again, not trusted)."""
    if not isinstance(raw, dict) or set(raw) != {f.name for f in fields(Card)}:
        raise ValueError("not a card")
    card = Card(**raw)
    for name in ("name", "task", "description", "origin"):
        if not isinstance(getattr(card, name), str):
            raise TypeError(f"{name} is not a string")
    return card


def _interpreter() -> list[Any]:
    """The interpreter and where it imports from: sys.path resolved (a relative entry is
    the working directory's) with each folder's mtime, which changes when a module is
    added to or removed from it."""
    return [sys.executable, sys.version, _files_stamp([os.path.abspath(p) for p in sys.path])]


def _files_stamp(paths: Any) -> dict[str, list[int] | None]:
    """path -> [inode, size, mtime_ns], or None for one that is not there (it may appear).
    A file rewritten by rename (as editors and pip write) is a new inode, even within the
    file system's mtime granularity."""
    stamp: dict[str, list[int] | None] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamp[path] = None
            continue
        stamp[path] = [st.st_ino, st.st_size, st.st_mtime_ns]
    return stamp


def _dists_stamp() -> dict[str, list[int] | None]:
    """The metadata files of every distribution on sys.path (what importlib.metadata reads
    for entry points and versions), each file's mtime and size."""
    found: list[str] = []
    for folder in dict.fromkeys(os.path.abspath(p) for p in sys.path):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".dist-info", ".egg-info")):
                found.extend(os.path.join(entry.path, name) for name in _DIST_FILES)
    return _files_stamp(sorted(found))
