"""The pending timeout (the CLI's --pending-timeout): how long a job may wait for the cluster
(nodes, an image, a quota) before it is deleted and its run recorded CANCELLED with what it was
waiting on. The arithmetic only; deleting and recording are the backend's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from contract.rundir import JobStatus
from runner.errors import SpecError


class PendingTimeout:
    """`timeout_s` None: a job may pend for ever (its activeDeadlineSeconds still ends it)."""

    def __init__(self, timeout_s: float | None, clock: Callable[[], datetime]) -> None:
        if timeout_s is not None and not timeout_s > 0:
            raise SpecError("--pending-timeout", f"must be a positive number of seconds, got "
                            f"{timeout_s!r}")  # fmt: skip
        self.timeout_s, self._clock = timeout_s, clock

    def left_s(self, status: JobStatus) -> float | None:
        """Seconds the pending job `status` may still wait (<= 0: none); None without a
        timeout or a time it started pending."""
        if self.timeout_s is None or not status.since:
            return None
        return self.timeout_s - self.age_s(status)

    def age_s(self, status: JobStatus) -> float:
        """Seconds since `status.since`, by the backend's clock."""
        since = datetime.fromisoformat(str(status.since).replace("Z", "+00:00"))
        return (self._clock() - since).total_seconds()

    def reason(self, status: JobStatus) -> str:
        """Why a job pending as `status` says was deleted."""
        return (
            f"pending for {self.age_s(status):.0f} s, longer than --pending-timeout "
            f"{self.timeout_s or 0:.0f} s, so the job was deleted; it was waiting on: "
            f"{status.reason}"
        )
