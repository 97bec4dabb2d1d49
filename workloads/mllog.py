"""MLPerf-style event log: `:::MLLOG {json}` lines on stdout, the same JSON in events.jsonl.

Why not the `mlperf-logging` package: it is a process-global logger and pulls pandas and
scipy into every training image; the format itself is one JSON object per line, written here.
events.jsonl holds the bare JSON (valid JSON Lines for jq and pandas); stdout and therefore
pod logs hold the prefixed lines, so a run can be rebuilt from its logs (`parse_line`).
No torch import: the runner parses logs with this module.
"""

from __future__ import annotations

import json
import time
from typing import IO, Any

from contract.events import (  # noqa: F401  (re-exported until the workloads import them from contract.events)
    ALLREDUCE_RESULT,
    ASGD_NONMONO,
    BEAM_SIZE,
    BPTT,
    COMPILE_TIME,
    EPOCH_PHASES,
    EPOCH_START,
    EPOCH_STOP,
    EVAL_ACCURACY,
    EVAL_DETAILS,
    EVAL_LOSS,
    EVAL_SAMPLES,
    EVAL_START,
    EVAL_STOP,
    GLOBAL_BATCH_SIZE,
    GRADIENT_ACCUMULATION_STEPS,
    INIT_START,
    INIT_STOP,
    LABEL_SMOOTHING,
    LENGTH_PENALTY,
    MANIFEST,
    MAX_SEQUENCE_LENGTH,
    OPT_ADAM_BETA_1,
    OPT_ADAM_BETA_2,
    OPT_ADAM_EPSILON,
    OPT_BASE_LR,
    OPT_GRADIENT_CLIP_NORM,
    OPT_LR_ALT_DECAY_FUNC,
    OPT_LR_ALT_WARMUP_FUNC,
    OPT_LR_DECAY_BOUNDARY_EPOCHS,
    OPT_LR_DECAY_FACTOR,
    OPT_LR_DECAY_SCHEDULE,
    OPT_LR_DECAY_STEPS,
    OPT_LR_WARMUP_EPOCHS,
    OPT_LR_WARMUP_STEPS,
    OPT_NAME,
    OPT_WEIGHT_DECAY,
    OTHER_PHASE,
    PREFIX,
    PROGRESS,
    RUN_START,
    RUN_STOP,
    SEED,
    STEP_PHASES,
    SUBMISSION_BENCHMARK,
    SUBMISSION_DIVISION,
    SUMMARY,
    TRAIN_LOSS,
    TRAIN_SAMPLES,
    EventType,
    parse_line,
    parse_lines,
    read_events,
)


class EventLog:
    """Writes events from rank 0 to a file and stdout; on other ranks it writes nothing."""

    # No default stream: a default of sys.stdout would be bound at import and miss a later
    # redirect; callers pass the stream they mean.
    def __init__(self, path: str | None, echo: IO[str] | None) -> None:
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
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
