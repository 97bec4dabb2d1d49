"""The Backend protocol and the job state every backend reports in the same terms."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runner.job.spec import JobSpec


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
    state: JobState
    reason: str = ""  # why it is pending or how it failed ("rank 1 exited with code -9")
    since: str | None = None  # ISO time the job entered this state, when known
    failed_rank: int | None = None
    exit_code: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "reason": self.reason,
            "since": self.since,
            "failed_rank": self.failed_rank,
            "exit_code": self.exit_code,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> JobStatus:
        return cls(
            state=JobState(data["state"]),
            reason=str(data.get("reason") or ""),
            since=data.get("since"),  # type: ignore[arg-type]
            failed_rank=data.get("failed_rank"),  # type: ignore[arg-type]
            exit_code=data.get("exit_code"),  # type: ignore[arg-type]
        )


class Backend(Protocol):
    """Where jobs run. Every method but submit takes the handle submit returned."""

    def submit(self, spec: JobSpec, run_dir: Path) -> str:
        """Start the job; job.json is already in run_dir. Returns the handle."""
        ...

    def status(self, handle: str) -> JobStatus: ...

    def logs(self, handle: str, rank: int, follow: bool) -> Iterator[str]:
        """Lines of one rank's log (without newlines); with follow, until the job ends."""
        ...

    def fetch(self, handle: str, dest: Path) -> list[str]:
        """Bring the results into dest (the run directory); returns what is still missing."""
        ...

    def cancel(self, handle: str) -> None:
        """Stop the job; idempotent, and a no-op on a finished job."""
        ...
