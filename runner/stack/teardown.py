"""Tearing a stack down without losing results: guard, delete jobs, destroy, check leftovers.

Order, and why:
1. guard: refuse while a Kubernetes run on the stack is unfetched, since its results may exist
   only on the cluster (pod logs, a bucket the stack owns). Unfetched: the run's last recorded
   state is not final; or it SUCCEEDED and its run directory lacks summary.json; or it FAILED
   and rank 0's log was never archived (the only trace of why). A CANCELLED run has nothing
   left to fetch. `force` skips the guard. Refuse too while the stack's settings keep deletion
   protection on (the cloud would refuse to delete the cluster halfway through), or are
   invalid or unreadable (then whether they do is unknown); `force` skips neither: turning
   protection off is a deliberate `pulumi config set` and `pulumi up`.
2. cancel the runs still pending or running, through their backend, so no job keeps creating
   pods while the node pools go away (and so their state.json says CANCELLED).
3. `pulumi destroy --stack S --yes`, its output streamed line by line.
4. leftovers: `pulumi stack export --stack S` and every resource the state still lists apart
   from the stack itself and its providers. That is what Pulumi still tracks for the stack
   (a failed or partial destroy). It does not see what the cluster made on its own outside
   Pulumi (load balancers of Services, dynamically provisioned disks), which a cloud-specific
   check (gcloud/aws CLIs, labels) would be needed for; the report says so.
Never prints: steps and destroy output go to a callback.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contract.files import DamagedFile
from contract.rundir import rank_log, read_state
from runner import api
from runner.errors import Interrupted, RunnerError, SpecError
from runner.results import rundir
from runner.stack import pulumi_cli, settings

FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")
# A stack as `pulumi stack init` names it, alone or qualified (org/project/stack); each part
# the characters Pulumi allows, never a leading "-" that its flag parser could read as a flag.
_STACK_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+){0,2}")
NOT_LEFTOVER_TYPES = ("pulumi:pulumi:Stack",)
NOT_LEFTOVER_PREFIXES = ("pulumi:providers:",)
UNCHECKED = (
    "cloud resources made by the cluster outside Pulumi (Service load balancers, dynamically "
    "provisioned disks) are not checked; look for them in the cloud console"
)


class TeardownRefused(RunnerError):
    def __init__(self, stack: str, unfetched: list[tuple[str, str]]) -> None:
        self.lines = (
            f"stack {stack!r} still holds results of {len(unfetched)} run(s):",
            *(f"  {run_id}: {why}" for run_id, why in unfetched),
            f"fetch them (`runner fetch RUN`), or tear down anyway with "
            f"`runner teardown --stack {stack} --force` (their results are lost)",
        )
        super().__init__("\n".join(self.lines))
        self.unfetched = unfetched


class DeletionProtected(RunnerError):
    def __init__(self, stack: str) -> None:
        super().__init__(
            f"stack {stack!r} keeps its cluster deletion-protected (stackbench:"
            "deletionProtection), so the cloud would refuse to delete it; turn that off first: "
            f"`pulumi config set stackbench:deletionProtection false --stack {stack} && pulumi "
            f"up --stack {stack}`, then `runner teardown --stack {stack}` again"
        )


@dataclass(frozen=True)
class TeardownResult:
    cancelled: tuple[str, ...]
    cancel_errors: tuple[str, ...]
    leftovers: tuple[str, ...]  # URNs still in the stack's state after destroy
    unchecked: str = UNCHECKED


def stack_runs(results_root: Path, stack: str) -> list[api.Run]:
    """Kubernetes runs whose job.json names this stack, however it was spelled (same_stack)."""
    runs = []
    for run_dir in rundir.list_dirs(results_root):
        try:
            record = rundir.read_record(run_dir)
        except DamagedFile:  # unreadable ones too (a socket, another user's file)
            continue  # `runner runs` lists it as DAMAGED; nothing says it is this stack's
        named = (record.cluster or {}).get("stack")
        if record.backend == "kubernetes" and isinstance(named, str) and same_stack(named, stack):
            runs.append(api.Run(run_dir, record))
    return runs


def same_stack(a: str, b: str) -> bool:
    """Whether two names Pulumi takes for a stack can name the same one: `gke-gpu-8` and
    `org/project/gke-gpu-8` do (the short name is the current organisation's and project's),
    and so do `org/gke-gpu-8` (two parts: an organisation and a stack, the project the
    current one) and `org/project/gke-gpu-8`; `acme/p/gke-gpu-8` and `other/p/gke-gpu-8` do
    not. Compared part by part, organisation, project and stack, where both name it: a run
    submitted under one spelling and torn down under the other must still keep the guard up
    (and still be priced as the stack's)."""
    return all(x is None or y is None or x == y for x, y in zip(_parts(a), _parts(b), strict=True))


def _parts(name: str) -> tuple[str | None, str | None, str]:
    """(organisation, project, stack) of a stack name; None where the name leaves it out."""
    *qualifiers, stack = name.split("/")
    org = qualifiers[0] if qualifiers else None
    project = qualifiers[1] if len(qualifiers) > 1 else None
    return org, project, stack


def unfetched_reason(run: api.Run) -> str | None:
    """Why this run's results may still be only on the cluster, or None if they are home."""
    try:
        state = read_state(run.run_dir)
    except DamagedFile as err:  # one damaged run must not keep the others' stack standing
        return f"{err.path.name} {err.problem}; it may still be running or hold results"
    if state is None or not state.state.finished:
        last = state.state.value if state else "unknown"
        return f"last recorded state {last}; it may still be running or hold results"
    if state.state.value == "SUCCEEDED" and not (run.run_dir / rundir.SUMMARY).is_file():
        return "SUCCEEDED but summary.json was never fetched"
    if state.state.value == "FAILED" and not rank_log(run.run_dir, 0).is_file():
        return "FAILED and its logs were never fetched"
    return None


def unfetched(results_root: Path, stack: str) -> list[tuple[str, str]]:
    out = []
    for run in stack_runs(results_root, stack):
        why = unfetched_reason(run)
        if why is not None:
            out.append((run.run_id, why))
    return sorted(out)


def refuse(results_root: Path, stack: str, force: bool) -> None:
    """The guards alone (step 1) and what destroying needs (pulumi, this project), so a caller
    can refuse before asking for confirmation, and nothing is cancelled for a destroy that
    cannot start."""
    check_stack_name(stack)
    _pulumi(stack)
    if pulumi_cli.project_dir() is None:  # `pulumi destroy` would find no project to run
        raise RunnerError(
            f"stack {stack!r} cannot be destroyed from here: no Pulumi.yaml here or above; "
            "run this inside the stackbench checkout"
        )
    missing = unfetched(results_root, stack)
    if missing and not force:
        raise TeardownRefused(stack, missing)
    if deletion_protected(stack):
        raise DeletionProtected(stack)


def check_stack_name(stack: str) -> None:
    """SpecError unless `stack` is a name Pulumi takes for a stack. `pulumi destroy --stack ""`
    is no --stack at all to Pulumi: it destroys the selected stack, whichever that is, while
    the guard looked for runs on a stack named "" (`--stack "$STACK"` with STACK unset)."""
    if not _STACK_NAME.fullmatch(stack):
        raise SpecError(
            "--stack",
            f"{stack!r} is not a stack name (letters, digits, '-', '_' and '.', as in "
            "gke-gpu-8 or org/project/gke-gpu-8); `pulumi stack ls` lists them",
        )


def teardown(
    results_root: Path, stack: str, force: bool, on_line: Callable[[str], None] = lambda s: None
) -> TeardownResult:
    refuse(results_root, stack, force)
    cancelled, errors = cancel_remaining(results_root, stack, on_line)
    destroy(stack, on_line)
    return TeardownResult(tuple(cancelled), tuple(errors), tuple(leftovers(stack)))


def deletion_protected(stack: str) -> bool:
    """Whether the stack's settings keep deletion protection on a cloud cluster. A stack with
    no settings file here is left to `pulumi destroy`, which says whether it exists; one whose
    file is unreadable or invalid is a settings.StackSettingsError: whether it is protected
    is unknown, so nothing is destroyed until it is fixed."""
    project = pulumi_cli.project_dir()
    if project is None or not settings.has_file(project, stack):
        return False
    cfg = settings.load(project, stack)
    return cfg.provider != "kind" and cfg.deletion_protection


def cancel_remaining(
    results_root: Path, stack: str, on_line: Callable[[str], None]
) -> tuple[list[str], list[str]]:
    """Cancel every run on the stack not recorded as finished. A failure is reported, not
    raised: destroy removes the jobs with the cluster anyway."""
    cancelled, errors = [], []
    for run in stack_runs(results_root, stack):
        with contextlib.suppress(DamagedFile):  # damaged: maybe unfinished, so cancel it
            state = read_state(run.run_dir)
            if state is not None and state.state.finished:
                continue
        try:
            api.cancel(results_root, run)
            cancelled.append(run.run_id)
            on_line(f"cancelled {run.run_id}")
        except (RunnerError, DamagedFile) as err:
            errors.append(f"{run.run_id}: {err}")
            on_line(f"could not cancel {run.run_id}: {err}")
    return cancelled, errors


def _pulumi(stack: str) -> str:
    return pulumi_cli.executable(f"stack {stack!r} cannot be destroyed; {pulumi_cli.INSTALL}")


def destroy(stack: str, on_line: Callable[[str], None]) -> None:
    """`pulumi destroy`, its output streamed to `on_line`. It never outlives this process: a
    Ctrl-C, SIGTERM or SIGHUP here (KeyboardInterrupt, Interrupted) is passed on to it as
    one SIGINT, its own cancel, and its output is shown until it has stopped (killed outright,
    it would leave operations pending in the stack's state); the interrupt is then raised
    again. If this process is killed, the kernel sends pulumi that SIGINT."""
    argv = [_pulumi(stack), "destroy", "--stack", stack, "--yes"]
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        encoding=pulumi_cli.ENCODING,
        errors=pulumi_cli.DECODE_ERRORS,
        cwd=pulumi_cli.project_dir(),
        # Its own session: a Ctrl-C in the terminal reaches this process alone, which passes
        # exactly one SIGINT on (a second one would make pulumi stop without cancelling).
        start_new_session=True,
        preexec_fn=pulumi_cli.interrupted_with_parent(),
    ) as proc:
        try:
            _stream(proc, on_line)
        except (KeyboardInterrupt, Interrupted):
            _cancel(proc, on_line)
            raise
    if proc.returncode != 0:
        raise RunnerError(
            f"`pulumi destroy --stack {stack} --yes` failed (exit {proc.returncode}); read its "
            f"output above, fix the cause and run `runner teardown --stack {stack} --force` again"
        )


def _stream(proc: subprocess.Popen[str], on_line: Callable[[str], None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        on_line(line.rstrip("\n"))
    proc.wait()


def _cancel(proc: subprocess.Popen[str], on_line: Callable[[str], None]) -> None:
    """Cancel pulumi and show what it says until it exits; asked again meanwhile, pulumi is
    told again (its second SIGINT: stop now), as a second Ctrl-C in its own terminal would."""
    on_line("interrupted: cancelling `pulumi destroy` (it finishes what is under way)")
    while proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            _stream(proc, on_line)
        except (KeyboardInterrupt, Interrupted):
            continue


def leftovers(stack: str) -> list[str]:
    """URNs the stack's state still lists after destroy (providers and the stack aside). The
    state is pulumi's output, read as untrusted: an entry that is not a resource with a URN
    is still listed (never taken for "nothing left"), and a state without a resource list is a
    RunnerError, since what the stack holds is then unknown."""
    next_step = f"check with `pulumi stack --stack {stack} --show-urns`"
    state = pulumi_cli.run_json(
        ["stack", "export"],
        stack,
        why=f"what stack {stack!r} still holds cannot be checked; {pulumi_cli.INSTALL}",
        next_step=next_step,
    )
    resources = _resources(state)
    if resources is None:
        raise RunnerError(
            f"`pulumi stack export --stack {stack}` printed no list of resources, so what the "
            f"stack still holds is unknown; {next_step}"
        )
    return [_urn(r) for r in resources if not _is_bookkeeping(r)]


def _resources(state: object) -> list[object] | None:
    """deployment.resources of an exported state ([] when it has none: nothing deployed)."""
    deployment = state.get("deployment") if isinstance(state, dict) else None
    if not isinstance(deployment, dict):
        return None
    resources = deployment.get("resources")
    if resources is None:
        return []
    return resources if isinstance(resources, list) else None


def _is_bookkeeping(resource: object) -> bool:
    """The stack itself and its providers, which destroy leaves in no cloud."""
    kind = resource.get("type") if isinstance(resource, dict) else None
    return isinstance(kind, str) and (
        kind in NOT_LEFTOVER_TYPES or kind.startswith(NOT_LEFTOVER_PREFIXES)
    )


def _urn(resource: object) -> str:
    urn = resource.get("urn") if isinstance(resource, dict) else None
    return urn if isinstance(urn, str) and urn else f"(an entry without a URN: {resource!r:.200})"
