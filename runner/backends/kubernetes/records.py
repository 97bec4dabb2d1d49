"""The result files a Kubernetes run brings home (events.jsonl, summary.json, manifest.json),
checked before they are written into its run directory, and rebuilt from rank 0's own log lines
when the results store lacks them.

A cluster is not trusted: a results store on a hostPath can be written by any pod, and a pod log
holds whatever the job printed. So every result record, copied or rebuilt, goes through
`check_record` (the one place the run-directory schema is applied to results from a cluster):
a JSON object with the keys the runner reads, of the right types, naming this run and its world
size (the typed records of contract/summary.py and contract/manifest.py); events.jsonl: every
line an MLPerf-style event.

Not here: where the lines come from (demux.py), copying from a store (results_store.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import events as keys
from contract import files
from contract.events import parse_line
from contract.files import DamagedFile
from contract.manifest import parse_manifest
from contract.rundir import EVENTS, MANIFEST, SUMMARY
from contract.summary import parse_summary

EVENT_TYPES = frozenset({"POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"})
RESULT_FILES = (EVENTS, SUMMARY, MANIFEST)
# Where the workload also logs a record as an event, so that it can be rebuilt from the log.
RECORD_EVENTS = {SUMMARY: keys.SUMMARY, MANIFEST: keys.MANIFEST}


@dataclass(frozen=True)
class Expected:
    """What the run's own record (job.json) says, which results must agree with."""

    run_id: str
    world_size: int
    # An elastic run (--workers MIN:MAX): world_size is MAX and its summary says the world
    # at its end, anything from MIN to MAX.
    min_world_size: int | None = None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


PARSERS: dict[str, Callable[[Any, Path], Any]] = {SUMMARY: parse_summary, MANIFEST: parse_manifest}


def check_record(name: str, data: Any, expected: Expected) -> str | None:
    """What is wrong with `data` as the run's summary.json or manifest.json; None if nothing.
    The run directory's typed records check every field (contract/summary.py, manifest.py);
    the record must also be about this run."""
    try:
        record = PARSERS[name](data, Path(name))
    except DamagedFile as err:
        return err.problem
    if record.run_id != expected.run_id:
        return f"is about run {record.run_id!r:.60}, not {expected.run_id}"
    low = expected.world_size if expected.min_world_size is None else expected.min_world_size
    if not low <= record.world_size <= expected.world_size:
        has = f"{low} to {expected.world_size}" if low < expected.world_size else str(low)
        return f"says {record.world_size} ranks; the run has {has}"
    return None


def check_event(event: Any) -> str | None:
    """What is wrong with one event of events.jsonl; None if nothing."""
    if not isinstance(event, dict):
        return "an event that is not a JSON object"
    if not isinstance(event.get("key"), str):
        return "an event without a text key"
    if event.get("event_type") not in EVENT_TYPES:
        return f"an event of unknown type ({event.get('event_type')!r:.40})"
    if not _integer(event.get("time_ms")):
        return "an event without an integer time_ms"
    if not isinstance(event.get("metadata", {}), dict):
        return "an event whose metadata is not an object"
    return None


def check_file(name: str, path: Path, expected: Expected, max_bytes: int) -> str | None:
    """What is wrong with a result file about to be moved into the run directory."""
    try:
        if name == EVENTS:
            lines = files.read_lines(path, max_bytes)
            for number, line in enumerate(lines, 1):
                if line.strip():
                    problem = check_event(_loads(line))
                    if problem:
                        return f"line {number} is {problem}"
            return None
        return check_record(name, files.read_json(path, max_bytes), expected)
    except files.DamagedFile as err:
        return err.problem


def rebuild(
    rank0_lines: Iterable[str],
    expected: Expected,
    wanted: Iterable[str],
    write_event: Callable[[str], None] = lambda line: None,
) -> Rebuilt:
    """The `wanted` result files from rank 0's own lines (logs/rank-0.log), as the workload
    would have written them: every valid event, and the last summary and manifest events.
    Events go to `write_event` one line at a time as they are read (a log may be larger than
    memory); `Rebuilt.events` counts them."""
    wanted = list(wanted)
    records = {RECORD_EVENTS[n]: n for n in wanted if n != EVENTS}
    last: dict[str, Any] = {}
    count = 0
    for line in rank0_lines:
        event = parse_line(line)
        if event is None or check_event(event) is not None:
            continue
        if EVENTS in wanted:
            write_event(json.dumps(event, separators=(", ", ": ")))
        count += 1
        if event["key"] in records:
            last[records[event["key"]]] = event.get("value")
    rebuilt = Rebuilt({}, {}, count if EVENTS in wanted else 0)
    for name, value in last.items():
        problem = check_record(name, value, expected)
        if problem is None:
            try:  # as contract.files.write_json writes it, so the bytes match a local run's
                text = json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n"
            except ValueError:
                problem = "holds NaN or Infinity, which JSON does not allow"
        if problem:
            rebuilt.refused[name] = f"rank 0's log has a {RECORD_EVENTS[name]} event that {problem}"
        else:
            rebuilt.texts[name] = text
    return rebuilt


@dataclass(frozen=True)
class Rebuilt:
    texts: dict[str, str]  # file name -> its text (not events.jsonl: written as it is read)
    refused: dict[str, str]  # file name -> why what the log has cannot be used
    events: int = 0  # events written


def _loads(line: str) -> Any:
    try:
        return files.loads(line)
    except ValueError:
        return None
