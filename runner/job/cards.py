"""What `runner benchmarks` lists of each benchmark (its card), read without importing any
benchmark's code when none of that code changed.

A card's facts (name, task, description, target, defaults, origin) are derived from the
registered Benchmark itself, never declared a second time. Deriving them imports every
benchmark's components (all the models', data sets' and tasks' configs, and the installed
plugins' modules, found through importlib.metadata): more than the rest of the listing
together. So the cards are cached (runner/stamped.py: stamped with the interpreter, sys.path,
every installed distribution's metadata and every module file imported while deriving them),
so a stale card is never listed; a cache that cannot be trusted is derived again and replaced.

Not here: the table (runner/cli/catalog.py), the registry (workloads/plugins/).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from runner import stamped

if TYPE_CHECKING:
    from runner.job.benchmark_types import AnyBenchmark

CACHE = "benchmark-cards"  # the cache's name (runner/stamped.py)


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
    path = stamped.cache_path(CACHE)
    cached = _cards_from(stamped.read(path)) if path is not None else None
    if cached is not None:
        return cached
    started_ns = time.time_ns()
    cards = registered()
    if path is not None:
        stamped.write(path, [asdict(card) for card in cards], started_ns)
    return cards


def _cards_from(payload: Any) -> list[Card] | None:
    """The cards of a cache's payload, or None for one of another shape (derived again)."""
    if not isinstance(payload, list):
        return None
    try:
        return [_card_from(raw) for raw in payload]
    except (TypeError, ValueError):
        return None


def _card_from(raw: Any) -> Card:
    """A card from its cached fields; TypeError or ValueError when a field is missing or of
    a wrong type (a cache of another shape is derived again, not trusted)."""
    if not isinstance(raw, dict) or set(raw) != {f.name for f in fields(Card)}:
        raise ValueError("not a card")
    card = Card(**raw)
    for name in ("name", "task", "description", "origin"):
        if not isinstance(getattr(card, name), str):
            raise TypeError(f"{name} is not a string")
    return card
