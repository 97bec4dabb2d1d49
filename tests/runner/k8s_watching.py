"""The watch tests' side of a watch (runner.api's: backend.watch read on a thread) and the pending
pods they start from."""

from __future__ import annotations

import queue
import threading

from contract.rundir import JobStatus
from runner.backends.kubernetes.backend import KubernetesBackend
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, pod

UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
PENDING_CONDITIONS = [{"type": "PodScheduled", "status": "False", "message": UNSCHEDULABLE}]


class Watching:
    """runner.api's side of a watch: the statuses of backend.watch(handle), read on a thread."""

    def __init__(self, backend: KubernetesBackend, handle: str) -> None:
        self._queue: queue.Queue[JobStatus | BaseException | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(backend, handle), daemon=True)
        self._thread.start()

    def _run(self, backend: KubernetesBackend, handle: str) -> None:
        try:
            for status in backend.watch(handle):
                self._queue.put(status)
            self._queue.put(None)
        except BaseException as err:
            self._queue.put(err)

    def next(self, timeout_s: float = 10) -> JobStatus | None:
        """The next status; None when the watch has ended."""
        item = self._queue.get(timeout=timeout_s)
        if isinstance(item, BaseException):
            raise item
        return item

    def rest(self) -> list[JobStatus]:
        statuses = []
        while (status := self.next()) is not None:
            statuses.append(status)
        return statuses


def two_pending_pods(cluster: FakeCluster) -> None:
    """Node 1 cannot be scheduled (and so the job waits on it, whatever node 0 does)."""
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Pending", conditions=PENDING_CONDITIONS), log="")
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Running"), log="")


def states(statuses: list[JobStatus]) -> list[str]:
    return [s.state.value for s in statuses]
