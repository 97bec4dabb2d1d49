"""The run directory `results/<run-id>/`: the same files whatever ran the job.

    job.json          the resolved job, its backend and handle (the runner, before anything starts)
    state.json        the last known JobStatus (whoever supervises the job)
    events.jsonl      MLPerf-style events from rank 0 (contract/events.py)
    summary.json      the run's outcome (rank 0, once, at the end)
    manifest.json     the environment: code version, packages, hardware, seeds, world size
    logs/rank-N.log   every rank's output
    translations/     translation tasks: each evaluation's output

Each JSON record carries `schema_version`; readers refuse a version they do not know and report
a record of the wrong shape as damaged (contract/files.py), naming the file. Not here: creating,
finding or listing run directories (the runner), writing events (workloads).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.files import DamagedFile, read_json_object

SCHEMA_VERSION = 1
JOB = "job.json"
STATE = "state.json"
EVENTS = "events.jsonl"
SUMMARY = "summary.json"
MANIFEST = "manifest.json"
LOGS = "logs"
TRANSLATIONS = "translations"


# A state's reason is one printable line of at most this many characters, whoever wrote it
# (a rank's error line, a cluster's message, a hostile state.json): it reaches terminals, and
# state.json must stay small enough to rewrite in place on a full disk.
MAX_REASON_CHARS = 600


def one_line(text: str) -> str:
    """`text` as one line: control characters (newlines, terminal escapes) become spaces, runs
    of white space one space, and what is past MAX_REASON_CHARS is cut."""
    printable = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(printable.split())[:MAX_REASON_CHARS]


def rank_log(run_dir: Path, rank: int) -> Path:
    return run_dir / LOGS / f"rank-{rank}.log"


class JobState(enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True)
class JobStatus:
    """state.json: where a job stands and, when it did not succeed, why (one printable line,
    made so whatever it is given)."""

    state: JobState
    reason: str = ""  # why it is pending or how it failed ("rank 1 exited with code -9: ...")
    since: str | None = None  # ISO time the job entered this state, when known
    failed_rank: int | None = None
    exit_code: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", one_line(self.reason))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "state": self.state.value,
            "reason": self.reason,
            "since": self.since,
            "failed_rank": self.failed_rank,
            "exit_code": self.exit_code,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: Path = Path(STATE)) -> JobStatus:
        check_version(data, path)
        try:
            state = JobState(data.get("state"))
        except ValueError:
            raise DamagedFile(path, f"has no valid state (got {data.get('state')!r})") from None
        return cls(
            state=state,
            reason=_text(data, "reason", path),
            since=_optional(data, "since", str, path),
            failed_rank=_optional(data, "failed_rank", int, path),
            exit_code=_optional(data, "exit_code", int, path),
        )


def read_state(run_dir: Path) -> JobStatus | None:
    """state.json, or None when there is none yet; DamagedFile when it is unusable."""
    path = run_dir / STATE
    try:
        return JobStatus.from_dict(read_json_object(path), path)
    except FileNotFoundError:
        return None


def check_version(data: Mapping[str, Any], path: Path) -> None:
    """Records written before versions existed (no key) read as version 1."""
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise DamagedFile(path, f"has a schema_version that is not an integer ({version!r})")
    if version > SCHEMA_VERSION:
        raise DamagedFile(
            path,
            f"has schema version {version}, newer than this runner's {SCHEMA_VERSION}; "
            "upgrade stackbench to read it",
        )


def _text(data: Mapping[str, Any], key: str, path: Path) -> str:
    value = data.get(key) or ""
    if not isinstance(value, str):
        raise DamagedFile(path, f"field {key!r} is not text")
    return value


def _optional(data: Mapping[str, Any], key: str, tp: type, path: Path) -> Any:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, tp) or isinstance(value, bool):
        raise DamagedFile(path, f"field {key!r} is not {tp.__name__} ({value!r})")
    return value
