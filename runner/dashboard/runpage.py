"""A run's page for the dashboard: its detail (the row, config, records and file list), its
events, its logs and its files, read whole or tailed as they grow. Every read goes through
runner.dashboard.files (beneath the results directory, never through a link, size-capped),
and a run is found by runner.dashboard.data.run_path, so a name from a request never leaves
the results directory.

Not here: the runs table and studies (runner.dashboard.data), chart points
(runner.dashboard.curves), HTTP (runner.dashboard.server), streams (runner.dashboard.live).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from contract.events import parse_lines
from contract.manifest import parse_manifest
from contract.rundir import EVENTS, JOB, LOGS, MANIFEST, SUMMARY
from contract.summary import parse_summary
from runner.dashboard import files
from runner.dashboard.data import (
    MAX_EVENTS_BYTES,
    NotFound,
    read_job,
    read_record,
    read_typed,
    run_path,
    run_row,
)

MAX_FILE_BYTES = 64 << 20  # the largest file a link serves
LOG_TAIL_BYTES = 256 << 10  # how much of a log a page starts with
# A run page offers a tab for each rank's log, present or not, up to this many ranks: job.json
# may be hostile, and a world size of 10**12 would otherwise be a list of 10**12 names.
MAX_RANK_LOGS = 1024


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def run_detail(root: Path, run_id: str) -> dict[str, Any]:
    """Everything the run page shows but the curves and the logs' text."""
    path = run_path(root, run_id)
    row = run_row(root, run_id)
    record, _ = read_job(path, run_id)
    job, _ = read_record(path, JOB)
    entries = files.scan(path)
    logs = [e.path.split("/")[1] for e in entries if e.path.count("/") == 1 and e.kind == "file"
            and e.path.startswith(f"{LOGS}/")]  # fmt: skip
    if record is not None:
        world_size = min(record.spec.placement.world_size, MAX_RANK_LOGS)
        ranks = [f"rank-{r}.log" for r in range(world_size)]
        logs = ranks + sorted(set(logs) - set(ranks))
    return {
        **row,
        # The flat view: the keys --set takes, as the page highlights the overridden ones.
        "config": _flat(record.spec.config) if record else _dig(job, "config"),
        "overrides": [list(p) for p in record.spec.overrides] if record else [],
        "open_keys": list(record.spec.open_keys) if record else [],
        "handle": record.handle if record else None,
        "cluster": dict(record.cluster) if record and record.cluster else None,
        "summary": _to_dict(read_typed(path, SUMMARY, parse_summary)[0]),
        "manifest": _to_dict(read_typed(path, MANIFEST, parse_manifest)[0]),
        "files": [{"path": e.path, "size": e.size, "kind": _kind(e)} for e in entries],
        "logs": logs,
    }


def events_tail(root: Path, run_id: str) -> files.LineTail:
    """New whole lines of a run's events.jsonl, from the start."""
    return files.LineTail(root, (run_path(root, run_id).name, EVENTS))


def parse_events(data: bytes) -> list[dict[str, Any]]:
    return list(parse_lines(data.decode("utf-8", errors="replace").splitlines()))


def read_events(root: Path, run_id: str) -> list[dict[str, Any]]:
    """Every event of a run (DamagedFile when events.jsonl is a link, not a file, too large)."""
    try:
        parts = (run_path(root, run_id).name, EVENTS)
        return parse_events(files.read_beneath(root, parts, MAX_EVENTS_BYTES))
    except FileNotFoundError:
        return []


def log_tail(root: Path, run_id: str, name: str) -> files.ByteTail:
    """A log of the run, from its last LOG_TAIL_BYTES on."""
    if not files.valid_name(name):
        raise NotFound(f"{name!r} is not a log name")
    return files.ByteTail(root, (run_path(root, run_id).name, LOGS, name), LOG_TAIL_BYTES)


def read_log(root: Path, run_id: str, name: str, offset: int | None) -> dict[str, Any]:
    """Up to LOG_TAIL_BYTES of a log from `offset` (None: its last LOG_TAIL_BYTES)."""
    if not files.valid_name(name):
        raise NotFound(f"{name!r} is not a log name")
    try:
        fd = files.open_beneath(root, (run_path(root, run_id).name, LOGS, name))
    except FileNotFoundError:
        raise NotFound(f"run {run_id} has no log {name} (yet)") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = min(size, max(0, size - LOG_TAIL_BYTES) if offset is None else offset)
        f.seek(start)
        chunk = f.read(LOG_TAIL_BYTES)
    text = chunk.decode("utf-8", errors="replace")
    return {"name": name, "start": start, "offset": start + len(chunk), "size": size, "text": text}


def read_file(root: Path, run_id: str, relative: str) -> bytes:
    """A file of the run by its path inside the run directory (InvalidPath, NotFound,
    DamagedFile for a link, a non-file or one over MAX_FILE_BYTES)."""
    parts = files.split_path(relative)
    try:
        return files.read_beneath(root, (run_path(root, run_id).name, *parts), MAX_FILE_BYTES)
    except FileNotFoundError:
        raise NotFound(f"run {run_id} has no file {relative}") from None


def _kind(entry: files.Entry) -> str:
    """An entry's kind as the page shows it: "file" only for one read_file serves, so every
    link on the page opens; "large" for one over MAX_FILE_BYTES (a log's tab still tails it)."""
    if entry.kind == "file" and (entry.size or 0) > MAX_FILE_BYTES:
        return "large"
    return entry.kind


def _flat(config: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.flat().items()}


def _to_dict(record: Any) -> dict[str, Any] | None:
    return record.to_dict() if record is not None else None
