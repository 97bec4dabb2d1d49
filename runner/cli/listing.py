"""`runner runs` at any scale: its rows through the run index, printed as plain columns.

A row is a run's table cells (with its backend and state), or for `--json` what that
prints for it (runner.cli.views.run_json), built by runner.api from the run's records and
kept in the run index (runner/results/index.py, one index for each of the two kinds: the
table's rows are a tenth of the size, and reading them is most of a warm listing) while those
records do not change: listing 10,000 finished runs reads no record, and imports neither the
API nor the job model (which only building a row needs). The table is plain aligned text
(a rich table of 10,000 rows took tens of seconds), its cells shown as written (control
characters written out), the state coloured on a terminal. Not here: what a row says
(views), how a run's state is found (api).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from contract.rundir import JOB, STATE, SUMMARY
from runner.cli.common import terminal_safe
from runner.results import index

TABLE, JSON = "runs", "runs-json"  # the two kinds of rows, each its own index
SUPERVISOR = "supervisor.json"  # runner.backends.local.backend.SUPERVISOR_FILE
FILES = (JOB, STATE, SUMMARY, SUPERVISOR)
# What builds a row: a change to any of them makes the stored rows another code's.
BUILDERS = (
    "runner.cli.listing", "runner.cli.views", "runner.api", "runner.results.rundir",
    "runner.backends.local.backend", "contract.rundir", "contract.summary",
)  # fmt: skip
JSON_KEYS = (
    "run_id", "benchmark", "backend", "handle", "world_size", "division", "status", "run_dir",
    "summary", "summary_damage", "damage",
)  # fmt: skip
COLUMNS = ("RUN", "BENCHMARK", "BACKEND", "WORKERS", "STATE", "RESULT")
STATE_COLOUR = {"PENDING": "yellow", "RUNNING": "cyan", "SUCCEEDED": "green", "FAILED": "red",
                "CANCELLED": "magenta", "DAMAGED": "red"}  # fmt: skip
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")


def rows(root: Path, kind: str = TABLE) -> list[tuple[str, dict[str, Any]]]:
    """(run directory name, row) of every run under `root`, newest first (by job.json's
    time of writing, as runner.results.rundir.list_dirs orders them). `kind`: TABLE rows
    (cells, backend, state) or JSON ones (`runner runs --json`'s entries)."""
    entries = [(entry.name, entry.inode()) for entry in _run_dirs(root)]
    table = index.RowIndex(root, kind, FILES, index.code_key(BUILDERS),
                           lambda name: _build(root, name, kind == JSON), volatile,
                           valid_json if kind == JSON else valid_table, required=JOB)  # fmt: skip
    found = table.rows(entries)
    job_mtime = {name: (sig[1] or [0, 0, 0])[2] for name, (sig, _) in found.items()}
    ordered = sorted(found, key=lambda name: job_mtime[name], reverse=True)
    return [(name, found[name][1]) for name in ordered]


def _run_dirs(root: Path) -> list[os.DirEntry[str]]:
    """Directories, never links (RowIndex then lists those holding a job.json, as
    rundir.list_dirs does)."""
    try:
        with os.scandir(root) as it:
            entries = list(it)
    except OSError:
        return []
    return [e for e in entries if e.is_dir(follow_symlinks=False)]


def _build(root: Path, name: str, full: bool) -> dict[str, Any] | None:
    from runner import api
    from runner.cli import views

    run_dir = root / name
    if not run_dir.is_dir() or run_dir.is_symlink():
        return None  # gone (or swapped for a link) since it was listed
    info = api.run_info(root, run_dir)
    row = views.run_json(info)
    if info.run is None or info.status is None:
        state, result = "DAMAGED", info.damage or ""
        cells = [name, "-", "-", "-", state, result]
    else:
        spec = info.run.record.spec
        state = info.status.state.value
        why = f" ({info.status.reason})" if info.status.reason else ""
        result = info.summary_damage or views.headline(info.summary, info.status)
        cells = [spec.run_id, spec.benchmark, info.run.record.backend,
                 str(spec.placement.world_size), state + why, result]  # fmt: skip
    if full:
        del row["run_dir"]  # the caller's, however it names the results directory
        return row
    return {"backend": row["backend"], "state": row["status"]["state"], "cells": cells}


def volatile(row: Mapping[str, Any]) -> bool:
    """A local run not over yet: its supervisor may die with no file changing."""
    state = row["status"]["state"] if "status" in row else row["state"]
    return row["backend"] == "local" and state not in FINISHED


def valid_table(row: Any) -> bool:
    return (
        isinstance(row, dict) and set(row) == {"backend", "state", "cells"}
        and isinstance(row["backend"], str | None) and isinstance(row["state"], str)
        and isinstance(row["cells"], list) and len(row["cells"]) == len(COLUMNS)
        and all(isinstance(c, str) for c in row["cells"])
    )  # fmt: skip


def valid_json(row: Any) -> bool:
    return (
        isinstance(row, dict) and set(row) == set(JSON_KEYS) - {"run_dir"}
        and isinstance(row["backend"], str | None)
        and isinstance(row["status"], dict) and isinstance(row["status"].get("state"), str)
    )  # fmt: skip


def as_json(root: Path, name: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as `runner runs --json` prints it (views.run_json's keys, in its order)."""
    return {key: str(root / name) if key == "run_dir" else row[key] for key in JSON_KEYS}


def table(found: list[tuple[str, dict[str, Any]]], colour: bool) -> str:
    """Aligned columns, one run a line; the state coloured when `colour`."""
    cells = [[terminal_safe(c) for c in row["cells"]] for _, row in found]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(COLUMNS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths, strict=True)).rstrip()]
    for r in cells:
        state = r[4].ljust(widths[4])
        if colour:
            word, _, rest = state.partition(" ")
            state = click.style(word, fg=STATE_COLOUR.get(word)) + (" " + rest if rest else "")
        parts = [r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].ljust(widths[2]),
                 r[3].rjust(widths[3]), state, r[5]]  # fmt: skip
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
