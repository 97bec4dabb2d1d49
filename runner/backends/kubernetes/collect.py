"""Bringing a Kubernetes run's files home: every rank's log, split out of its pod's log (only
the ranks of the pod's node, demux.py), and the result files, from the results store when it has
them and otherwise rebuilt from rank 0's own lines (records.py). Also the logs of one rank read
once, from the cluster or from what an earlier fetch archived.

Not here: following logs as they grow (follow/logs.py), deciding when to delete the job
(backend.py).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from contract import files
from contract.rundir import EVENTS, SUMMARY, JobState, JobStatus, rank_log
from runner.backends.kubernetes import demux, records
from runner.backends.kubernetes.api.apierrors import NotFound
from runner.backends.kubernetes.api.client import KubeApi, Selector
from runner.backends.kubernetes.api.limits import ENV, mib
from runner.backends.kubernetes.api.streams import Transient
from runner.backends.kubernetes.connection import ClusterConnection
from runner.backends.kubernetes.follow import observe
from runner.backends.kubernetes.follow.owners import PodOwners
from runner.backends.kubernetes.follow.pods import PodOwner, pods_by_node
from runner.backends.kubernetes.jobapis import Shape
from runner.backends.kubernetes.render.common import RUN_ID_LABEL
from runner.backends.kubernetes.results_store import StoreLimits, fetch_results
from runner.backends.kubernetes.spool import Spool
from runner.errors import RunnerError
from runner.job.spec import Placement
from runner.results import rundir

log = logging.getLogger(__name__)
WARNINGS = Selector(field="type=Warning")


def pods_selector(name: str) -> Selector:
    return Selector(label=f"{RUN_ID_LABEL}={name}")


def open_rank_log(path: Path) -> Iterator[str] | None:
    """The lines of an archived rank log, or None when there is none. Never through a link
    (a run directory may have been tampered with), never anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise RunnerError(f"{path} is a symbolic link; it is never followed") from None
        raise RunnerError(f"cannot read {path}: {err.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunnerError(f"{path} is not a regular file")
    return _lines(fd)


def archived_log(run_dir: Path | None, rank: int) -> Iterator[str] | None:
    """What `runner fetch` archived of `rank`'s log in `run_dir`, if anything."""
    return None if run_dir is None else open_rank_log(rank_log(run_dir, rank))


def archived_only(
    api: KubeApi, name: str, rank: int, archived: Iterator[str] | None
) -> Iterator[str]:
    """`rank`'s log where the job of the run's name is another's (made after the run's was
    deleted): what `runner fetch` archived, its pods never being this run's."""
    if archived is None:
        raise RunnerError(
            f"no log of rank {rank} of {name}: it was never archived by `runner fetch`, and "
            f"the {api.resource.kind} of that name on {api.conn.source} is another, made "
            "after this run's was deleted"
        )
    yield from archived


def run_shape(api: KubeApi, placement: Placement | None, name: str) -> Shape:
    """Nodes and processes per node: from job.json's `placement`, else from the job on the
    cluster."""
    if placement is not None:
        return Shape(placement.num_nodes, placement.procs_per_node, placement.elastic)
    try:
        return api.conn.kind.shape(api.get_job(name))
    except NotFound:
        raise RunnerError(
            f"no {api.resource.kind} {name} in namespace {api.conn.namespace} on "
            f"{api.conn.source}, and no run directory records it"
        ) from None


def _lines(fd: int) -> Iterator[str]:
    with open(fd, encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            yield line.rstrip("\n")


def rank_lines(
    api: KubeApi,
    name: str,
    node: demux.NodeRanks,
    rank: int,
    archived: Iterator[str] | None,
    recorded: JobStatus | None,
    job_uid: str | None = None,
    owners: PodOwners | None = None,
) -> Iterator[str]:
    """One rank's log as it is now: from its pod while the pod exists, else as archived; with
    `job_uid`, never a pod of another job made under the same name (`owners` tells a
    TrainJob's pods apart)."""
    try:
        pods = api.list_objects("pods", pods_selector(name))[0]
    except Transient as err:
        if archived is None:
            raise RunnerError(f"{_no_log(name, rank, recorded)}; {err}") from None
        log.warning("%s; showing the log archived by `runner fetch`", err)
        pods = []
    owners = owners or PodOwners(lambda: api)
    owner = owners.of(name, job_uid, pods)
    pod = pods_by_node(api.conn.kind, pods, node.elastic, owner).get(node.node)
    if pod is None or not observe.container_started(pod):
        if archived is not None:
            yield from archived
            return
        if recorded is not None and recorded.state.finished:
            raise RunnerError(_no_log(name, rank, recorded))
        state = f"the run is {recorded.state.value}" if recorded else "the job has no pods yet"
        if recorded is not None and recorded.reason:
            state += f" ({recorded.reason})"
        raise RunnerError(
            f"no log of rank {rank} of {name} yet: its pod has not started; {state}. "
            f"`runner logs {name} --rank {rank} --follow` waits for it"
        )
    container = api.conn.kind.container
    for line in api.log_lines(pod["metadata"]["name"], container):
        line_rank, text = demux.attribute(line, node)
        if line_rank == rank:
            yield text


def _no_log(name: str, rank: int, recorded: JobStatus | None) -> str:
    why = f"the run is {recorded.state.value}" if recorded else "the run has no recorded state"
    if recorded is not None and recorded.reason:
        why += f" ({recorded.reason})"
    return f"no log of rank {rank} of {name}: it was never archived by `runner fetch`, and {why}"


class Harvest:
    """One fetch of a run into its directory `dest`."""

    def __init__(
        self,
        api: KubeApi,
        conn: ClusterConnection,
        name: str,
        dest: Path,
        limits: StoreLimits,
        job_uid: str | None = None,
        owners: PodOwners | None = None,
    ) -> None:
        """`job_uid`: the uid submit created the job with (None: known by its name only);
        `owners`: which pods are the job's (a backend's, whose answers are cached)."""
        spec = rundir.read_record(dest).spec
        self.api, self.conn, self.name, self.dest, self.limits = api, conn, name, dest, limits
        self.placement = spec.placement
        self.expected = records.Expected(
            spec.run_id, spec.placement.world_size, spec.placement.min_workers
        )
        self.archived: set[int] = set()  # ranks whose log this fetch wrote
        self.refused: dict[str, str] = {}  # result file -> why no copy of it could be used
        self.unreachable: RunnerError | None = None
        self.job_gone = False
        self.job_uid = job_uid  # once run: the uid of the job on the cluster, if it is this run's
        self.owners = owners or PodOwners(lambda: api)
        self.impostor: dict[str, Any] | None = None  # another job, made under this run's name
        # Rank 0's log read to its end from its ended container: all it will ever say.
        self.rank0_log_whole = False
        self.cut_nodes: set[int] = set()  # nodes whose log went past max_log_bytes

    def run(self) -> JobStatus | None:
        """Archive the logs and bring the results; the job's status (None if unknown)."""
        job: dict[str, Any] | None = None
        try:
            job = self.api.get_job(self.name)
        except NotFound:
            self.job_gone = True
        except Transient as err:
            self.unreachable = err
        if job is not None and self.job_uid and observe.job_uid(job) != self.job_uid:
            # Deleted, and another job made under its name: nothing of that one is this run's.
            self.job_gone, self.impostor, job = True, job, None
        status = None
        if job is not None:
            self.job_uid = observe.job_uid(job)
            pods = self.api.list_objects("pods", pods_selector(self.name))[0]
            owner = self.owners.of(self.name, self.job_uid, pods, job)
            status = observe.job_status(self.conn.kind, job, pods, [], owner)
            self._archive(pods, owner)
        self._results()
        # A pending reason without the namespace's events is poorer than the one recorded.
        return None if status is None or status.state is JobState.PENDING else status

    def _archive(self, pods: list[dict[str, Any]], owner: PodOwner) -> None:
        """logs/rank-N.log for every rank whose pod still exists (and the node's unattributed
        lines beside them), each line written as it is read."""
        container = self.conn.kind.container
        by_node = pods_by_node(self.conn.kind, pods, self.placement.elastic, owner)
        for node, pod in sorted(by_node.items()):
            if node >= self.placement.num_nodes:
                log.warning("ignoring pod %s: node %d is not in the job", _pod_name(pod), node)
                continue
            if not observe.container_started(pod):
                continue
            read = self.api.read_log(_pod_name(pod), container)
            self._spool(node, read.lines())
            if read.cut:
                self.cut_nodes.add(node)
            if node == 0 and not observe.container_running(pod, container):
                self.rank0_log_whole = read.whole

    def _spool(self, node: int, lines: Iterator[str]) -> None:
        """One pod's log split into its ranks' files as it is read (demux.py)."""
        ranks = demux.NodeRanks(node, self.placement.procs_per_node, self.expected.world_size,
                                self.placement.elastic)  # fmt: skip
        other, unattributed = demux.unattributed_log(self.dest, node), 0
        with Spool() as out:
            for rank in ranks.ranks:
                out.open(rank_log(self.dest, rank))
            for line in lines:
                writer, text = demux.attribute(line, ranks)
                if writer is None:
                    unattributed += 1
                out.write(other if writer is None else rank_log(self.dest, writer), text)
        self.archived.update(ranks.ranks)
        if unattributed:
            log.info("%d lines of node %d's log name no rank of that node: %s",
                     unattributed, node, other)  # fmt: skip

    def _results(self) -> None:
        wanted = list(records.RESULT_FILES)
        # The store keeps a run's files by its name, which another job made under that name
        # writes to as well: once the job was made again, what the store has may be that one's.
        store = self.conn.results_store if self.impostor is None else None
        if store:
            try:
                copied = fetch_results(
                    store, self.name, self.dest, records.RESULT_FILES, self._check, self.limits
                )
                wanted = [f for f in wanted if f not in copied.names]
                self.refused.update(copied.refused)
            except RunnerError as err:
                log.warning("results store: %s; rebuilding the results from rank 0's log", err)
        for name, why in self.refused.items():
            log.warning("refused %s from the results store: %s", name, why)
        if not wanted:
            return
        lines = open_rank_log(rank_log(self.dest, 0))
        with Spool() as out:
            events = self.dest / EVENTS
            rebuilt = records.rebuild(lines or iter(()), self.expected, wanted,
                                      lambda line: out.write(events, line))  # fmt: skip
        if rebuilt.events:
            self.refused.pop(EVENTS, None)
        for name, text in rebuilt.texts.items():
            files.write_text(self.dest / name, text)
            self.refused.pop(name, None)
        for name, why in rebuilt.refused.items():
            log.warning("cannot rebuild %s: %s", name, why)
            self.refused[name] = "; ".join(filter(None, (self.refused.get(name), why)))

    def verdict(self, status: JobStatus) -> JobStatus:
        """`status`, unless the job SUCCEEDED and its results say that the run did not. As for
        a local run: a run succeeded only if rank 0 wrote its summary, so one whose whole log
        (read from its ended container) and results store have none is FAILED; and so is one
        whose summary says it diverged (the workload then exits non-zero, so a job that
        reports success hides that exit). A log cut at max_log_bytes is never read as a
        success: without the summary, the run is FAILED, saying where its log was cut."""
        if status.state is not JobState.SUCCEEDED:
            return status
        if not (self.dest / SUMMARY).is_file():
            if 0 in self.cut_nodes:
                reason = (f"rank 0's log was cut after {mib(self.api.limits.max_log_bytes)} "
                          f"({ENV['max_log_bytes']} raises it) and no usable {SUMMARY} was "
                          "found; the job's success is not the run's without it")  # fmt: skip
                return JobStatus(JobState.FAILED, reason, status.since, failed_rank=0)
            if not self.rank0_log_whole or self.unreachable is not None:
                return status  # not all of it could be read: the record keeps the job's word
            why = f" ({self.refused[SUMMARY]})" if SUMMARY in self.refused else ""
            reason = f"every process exited 0, but rank 0 wrote no usable {SUMMARY}{why}"
            return JobStatus(JobState.FAILED, reason, status.since, failed_rank=0)
        try:
            diverged = getattr(rundir.read_summary(self.dest), "diverged", None)
        except files.DamagedFile:
            return status
        if diverged:
            return JobStatus(JobState.FAILED, diverged, status.since, failed_rank=0)
        return status

    def _check(self, name: str, path: Path) -> str | None:
        return records.check_file(name, path, self.expected, self.limits.max_file_bytes)

    def missing(self) -> list[str]:
        """What a complete run has and this one lacks, with why a copy was refused."""
        missing = rundir.missing_results(self.dest, self.expected.world_size)
        cut = [
            f"the end of node {node}'s log (cut after {mib(self.api.limits.max_log_bytes)}; "
            f"{ENV['max_log_bytes']} raises it)"
            for node in sorted(self.cut_nodes)
        ]
        return [f"{m} ({self.refused[m]})" if m in self.refused else m for m in missing] + cut

    def gone_error(self, handle: str, recorded: JobStatus | None) -> RunnerError:
        missing = "; ".join(self.missing())
        record = ""
        if recorded is not None and recorded.state in (JobState.FAILED, JobState.CANCELLED):
            record = f"; the run's record: {recorded.state.value}" + (
                f" ({recorded.reason})" if recorded.reason else ""
            )
        if self.unreachable is not None:
            return RunnerError(
                f"{handle}: still missing {missing}{record}; they cannot be fetched now: "
                f"{self.unreachable}"
            )
        what = (
            "is not on the cluster (never created, or deleted, cancelled or removed by a TTL since)"
            if self.job_gone
            else "has ended and its pods are gone"
        )
        return RunnerError(
            f"{handle} {what}, and the pod logs that held its results went with it; still "
            f"missing: {missing} (results store: {self.conn.results_store or 'none'}){record}. "
            "They cannot be fetched any more: rerun the benchmark (`runner submit ...`) to get "
            "them"
        )


def _pod_name(pod: Mapping[str, Any]) -> str:
    return str(pod["metadata"]["name"])
