"""A job that runs over: past its activeDeadlineSeconds, or reporting success while a node's pod
still runs. What the run's record then says, in one line with its cause. Pure functions over
the job's JSON and JobStatus; the backend brings the clock.

The deadline is rendered from the run's time budget (render/common.py): a run whose ranks stop
making progress (a hung collective, a stuck pod) is stopped by the cluster there, every process
at once, so no rank's exit is the cause. A job whose operator reports success while a node's
pod runs on (training-operator 1.9 does, once the Master succeeds: observe._succeeded) is
RUNNING until that pod ends, and FAILED if it has not ENDS_GRACE_S later: the operator calls
the job finished, so its deadline no longer applies, and the pod would run on until its TTL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from contract.rundir import JobState, JobStatus
from runner.backends.kubernetes.render.common import DEADLINE_SLACK_S, DEFAULT_DEADLINE_S

# A job past its activeDeadlineSeconds: Kubeflow Trainer 2.3's Failed reason (trainjob_types.go,
# TrainJobDeadlineExceededReason); training-operator 1.9 says it only in its message
# (pkg/controller.v1/common/job.go, ReconcileJobs).
DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "active longer than specified deadline"
# A job that reports success while a node's pod still runs (observe._succeeded) is RUNNING, with
# this reason, until that pod ends; ENDS_GRACE_S after the job's success it is FAILED instead
# (the backend's clock): a hung pod of a job the operator calls finished runs on until its TTL.
AWAITING_ENDS = "the job reports success; waiting for "
ENDS_GRACE_S = 300


def past_deadline(condition: Mapping[str, Any]) -> bool:
    """Whether a Failed condition is the job's activeDeadlineSeconds passing: Trainer 2.3's
    reason, or training-operator 1.9's message (its reason is the generic PyTorchJobFailed)."""
    return condition.get("reason") == DEADLINE_REASON or DEADLINE_MESSAGE in str(
        condition.get("message") or ""
    )


def deadline_note(job: Mapping[str, Any]) -> str:
    """Which deadline stopped a job, and how a run gets longer (render/common.py sets it from the
    run's time budget, an elastic run's as a fixed one's)."""
    spec = job.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    policy = spec.get("runPolicy")
    seconds = (policy if isinstance(policy, Mapping) else spec).get("activeDeadlineSeconds")
    valid = isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0
    given = f"activeDeadlineSeconds {seconds} s" if valid else "activeDeadlineSeconds"
    hung = "the ranks hung (a stuck collective or pod) or the run needs longer"
    return (
        f"{given}: the run's time_budget_s + {DEADLINE_SLACK_S} s, or "
        f"{DEFAULT_DEADLINE_S // 3600} h without one; {hung}: --set time_budget_s=SECONDS"
    )


def awaiting(what: str, since: str | None) -> JobStatus:
    """A job that reports success (at `since`) while `what`, a node's pod, has not ended."""
    return JobStatus(JobState.RUNNING, f"{AWAITING_ENDS}{what} to end", since=since)


def awaiting_ends(status: JobStatus) -> bool:
    """Whether `status` is a job's success with a node's pod still running."""
    return status.state is JobState.RUNNING and status.reason.startswith(AWAITING_ENDS)


def ends_overdue(status: JobStatus) -> JobStatus:
    """An `awaiting_ends` status ENDS_GRACE_S after the job's success: that node never ended."""
    what = status.reason.removeprefix(AWAITING_ENDS).removesuffix(" to end")
    reason = f"the job reports success, but {what} had not ended {ENDS_GRACE_S} s later"
    return JobStatus(JobState.FAILED, reason, since=status.since)


def ends_left_s(status: JobStatus, age_s: Callable[[JobStatus], float]) -> float | None:
    """How long an `awaiting_ends` status may still wait (`age_s`: seconds since its since);
    None for any other status."""
    if not awaiting_ends(status) or not status.since:
        return None
    return ENDS_GRACE_S - age_s(status)


def overdue(status: JobStatus, age_s: Callable[[JobStatus], float]) -> JobStatus:
    """`status`, or FAILED once an `awaiting_ends` one has waited ENDS_GRACE_S."""
    left_s = ends_left_s(status, age_s)
    return ends_overdue(status) if left_s is not None and left_s <= 0 else status
