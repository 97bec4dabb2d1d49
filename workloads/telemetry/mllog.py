"""MLPerf-style event log writers: `:::MLLOG {json}` lines on stdout, the same JSON in events.jsonl.

Why not the `mlperf-logging` package: it is a process-global logger and pulls pandas and
scipy into every training image; the format itself is one JSON object per line, written here.
events.jsonl holds the bare JSON (valid JSON Lines for jq and pandas); stdout and therefore
pod logs hold the prefixed lines, so a run can be rebuilt from its logs. Not here: the keys
and how a line is read back (contract/events.py, which the writers and the runner import).
No torch import.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any

from contract import files
from contract.events import (
    EPOCH_START,
    EPOCH_STOP,
    INIT_START,
    INIT_STOP,
    PREFIX,
    RUN_START,
    RUN_STOP,
    EventType,
)


class EventLog:
    """Writes events from rank 0 to a file and stdout; on other ranks it writes nothing."""

    # No default stream: a default of sys.stdout would be bound at import and miss a later
    # redirect; callers pass the stream they mean.
    def __init__(self, path: str | None, echo: IO[str] | None) -> None:
        # Never through a link at events.jsonl or in place of its folder (contract.files).
        self._file = (
            os.fdopen(files.open_append(Path(path)), "a", encoding="utf-8") if path else None
        )
        self._echo = echo

    def emit(
        self,
        key: str,
        value: Any = None,
        event_type: EventType = "POINT_IN_TIME",
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        event = {
            "namespace": "",
            "time_ms": time.time_ns() // 1_000_000,
            "event_type": event_type,
            "key": key,
            "value": value,
            "metadata": dict(metadata or {}),
        }
        line = json.dumps(event, separators=(", ", ": "))
        # One write and a flush per event: a run killed mid-way keeps every event before it.
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
        if self._echo is not None:
            self._echo.write(PREFIX + line + "\n")
            self._echo.flush()
        return event

    def start(self, key: str, value: Any = None, **metadata: Any) -> dict[str, Any]:
        return self.emit(key, value, "INTERVAL_START", metadata)

    def end(self, key: str, value: Any = None, **metadata: Any) -> dict[str, Any]:
        return self.emit(key, value, "INTERVAL_END", metadata)

    def point(self, key: str, value: Any = None, **metadata: Any) -> dict[str, Any]:
        return self.emit(key, value, "POINT_IN_TIME", metadata)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class RankLog(EventLog):
    """What ranks other than 0 get: no events (the run's events are rank 0's), but a plain
    line in the rank's own log for its start, every epoch and its end, so that every rank's
    log says how far it got: `12:00:03 rank 1: epoch_stop epoch_num=2`."""

    LOGGED = frozenset({INIT_START, INIT_STOP, RUN_START, EPOCH_START, EPOCH_STOP, RUN_STOP})

    def __init__(self, rank: int, echo: IO[str] | None) -> None:
        super().__init__(None, echo=None)
        self._rank, self._out = rank, echo

    def emit(
        self,
        key: str,
        value: Any = None,
        event_type: EventType = "POINT_IN_TIME",
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if key in self.LOGGED and self._out is not None:
            details = " ".join(f"{k}={v}" for k, v in (metadata or {}).items())
            stamp = time.strftime("%H:%M:%S")
            self._out.write(f"{stamp} rank {self._rank}: {key} {details}".rstrip() + "\n")
            self._out.flush()
        return {"key": key, "value": value, "metadata": dict(metadata or {})}
