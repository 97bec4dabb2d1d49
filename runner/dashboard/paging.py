"""The runs table a page at a time: filtered, sorted and grouped over every run on the
server, so the browser gets the first hundred rows of 10,000 runs, not all of them, and a
filter or a sort still sees every run.

A query names a filter (words, each somewhere in the row; `key=value` terms, that
configuration key's value containing the value: `policy=batch`, `link=25mbit`), a state and
a benchmark to keep, the column to sort by (one of the table's, or `keys.KEY` for a
configuration key), a key to group by, and the slice (offset, limit). Grouped, the rows come
group by group (groups in the order of their values, numbers by value), each group in the
sort's order, so a page cut through a group goes on where it stopped; `groups` counts every
group's matching runs. Pure: rows in (runner.dashboard.data.RunTable), a JSON-ready page out.
Not here: reading runs (data), HTTP (server).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.dashboard.shared import split_keys

DEFAULT_LIMIT = 100  # the first page: what a screen shows and some, in well under a second
MAX_LIMIT = 100_000  # a page the browser asked for by scrolling; above any results folder
MAX_TEXT_CHARS = 1000  # a filter longer than this is not typed by a person
KEY_PREFIX = "keys."
Row = Mapping[str, Any]


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _number(field: str, default: float) -> Callable[[Row], float]:
    """A numeric column: its number (a bool or NaN is none), else `default`."""

    def value(row: Row) -> float:
        raw = row.get(field)
        if isinstance(raw, bool) or not isinstance(raw, int | float) or math.isnan(raw):
            return default
        return float(raw)

    return value


def _field(field: str) -> Callable[[Row], str]:
    return lambda row: _text(row.get(field))


# The table's columns (static/app/runs.js shows them) and how each sorts: a run without the
# figure sorts as the page always did (a missing time to target after every one there is).
COLUMNS: dict[str, Callable[[Row], Any]] = {
    "state": _field("state"), "run_id": _field("run_id"), "benchmark": _field("benchmark"),
    "division": _field("division"), "workers": _number("workers", -1.0),
    "backend": lambda row: _text(row.get("stack") or row.get("backend")),
    "value": _number("value", -math.inf), "time_to_target_s": _number("time_to_target_s", math.inf),
    "throughput": _number("throughput", -1.0), "created_at": _field("created_at"),
}  # fmt: skip


class BadQuery(ValueError):
    """A query the table cannot answer (an unknown column, a negative offset): a 400."""


@dataclass(frozen=True)
class Query:
    text: str = ""
    state: str = ""
    benchmark: str = ""
    sort: str = "created_at"
    descending: bool = True
    group: str = ""
    offset: int = 0
    limit: int = DEFAULT_LIMIT


def parse_query(params: Mapping[str, str]) -> Query:
    """A Query from /api/runs's parameters (q, state, benchmark, sort, order, group, offset,
    limit), each optional; BadQuery says what is wrong."""
    sort = params.get("sort", "created_at")
    if sort not in COLUMNS and not (sort.startswith(KEY_PREFIX) and len(sort) > len(KEY_PREFIX)):
        raise BadQuery(f"sort: no column {sort!r}; one of {', '.join(COLUMNS)} or keys.KEY")
    order = params.get("order", "desc" if sort == "created_at" else "asc")
    if order not in ("asc", "desc"):
        raise BadQuery("order: asc or desc")
    text = params.get("q", "")
    if len(text) > MAX_TEXT_CHARS:
        raise BadQuery(f"q: at most {MAX_TEXT_CHARS} characters")
    return Query(
        text=text, state=params.get("state", ""), benchmark=params.get("benchmark", ""),
        sort=sort, descending=order == "desc", group=params.get("group", ""),
        offset=_count(params, "offset", 0, None),
        limit=_count(params, "limit", DEFAULT_LIMIT, MAX_LIMIT),
    )  # fmt: skip


def _count(params: Mapping[str, str], name: str, default: int, most: int | None) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", raw):  # ASCII digits: int() takes '²' and '1_0'
        raise BadQuery(f"{name}: a count of rows")
    value = int(raw)
    if most is not None and not 1 <= value <= most:
        raise BadQuery(f"{name}: 1 to {most}")
    return value


def matches(row: Row, text: str) -> bool:
    """Whether `row` passes the filter `text` (see the module's docstring)."""
    if not text:
        return True
    keys = row.get("keys") or {}
    fields = (row.get(k) for k in ("run_id", "benchmark", "division", "state", "backend",
                                   "stack", "strategy", "metric", "reason"))  # fmt: skip
    haystack = " ".join([*map(_text, fields), *map(_text, keys.values())]).lower()
    lowered = {str(k).lower(): _text(v).lower() for k, v in reversed(keys.items())}
    for term in text.lower().split():
        key, sep, value = term.partition("=")
        if not sep or not key:
            if term not in haystack:
                return False
        elif key not in lowered or value not in lowered[key]:
            return False
    return True


def natural(text: str) -> tuple[Any, ...]:
    """A sort key that puts `2` before `10` (numbers by value, the rest as text)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text))


def _sort_key(query: Query) -> Callable[[Row], Any]:
    if query.sort.startswith(KEY_PREFIX):
        name = query.sort[len(KEY_PREFIX) :]
        return lambda row: natural(_text((row.get("keys") or {}).get(name)))
    return COLUMNS[query.sort]


def group_value(row: Row, key: str) -> str:
    """The value a row is grouped under: its configuration key's, or "–" without one."""
    value = (row.get("keys") or {}).get(key)
    return "–" if value is None else str(value)


def page(rows: Sequence[Row], query: Query) -> dict[str, Any]:
    """The rows of `query`'s slice (each without the configuration keys every row of the page
    shares: `shared` has them, runner.dashboard.shared), how many runs there are and how
    many match, every group's count, and what the table's controls offer (every key, state
    and benchmark of any run)."""
    kept = [r for r in rows if (not query.state or r.get("state") == query.state)
            and (not query.benchmark or r.get("benchmark") == query.benchmark)
            and matches(r, query.text)]  # fmt: skip
    # Runs the sort cannot tell apart stay in the table's order (newest first), whichever way.
    ordered = sorted(kept, key=_sort_key(query), reverse=query.descending)  # stable: ties too
    groups: dict[str, int] = {}
    if query.group:
        ordered.sort(key=lambda r: natural(group_value(r, query.group)))
        for row in ordered:
            value = group_value(row, query.group)
            groups[value] = groups.get(value, 0) + 1
    shared, shown = split_keys(ordered[query.offset : query.offset + query.limit])
    return {
        "total": len(rows), "matched": len(ordered), "offset": query.offset,
        "limit": query.limit, "rows": shown, "shared": shared, "groups": groups,
        "keys": sorted({k for r in rows for k in (r.get("keys") or {})}),
        "states": sorted({_text(r.get("state")) for r in rows}),
        "benchmarks": sorted({r["benchmark"] for r in rows if r.get("benchmark")}),
    }  # fmt: skip
