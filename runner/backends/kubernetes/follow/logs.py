"""Following a job's logs while it runs, over a JobObserver (watches, no polling).

`LogFollower` streams one rank's lines: it waits for the rank's pod to start, streams its log,
and when the stream ends looks at the observer again. A new pod or a restarted container is
streamed from its start; the same container after a dropped connection is streamed again after
a back-off, skipping the lines already given; a stream that ended while the container still
runs is checked again after `recheck_s`. Once the job has finished and the last stream ended
normally (the container stopped, so its log is complete) it returns, having asked for the pods
once more (the pods' watch may lag the job's, and a container restarted after what it showed
would otherwise go unread).

`EventFeed` parses rank 0's followed log on a thread into MLPerf-style events, handed over in
batches without blocking (what `Backend.events` promises), the events checked as events.jsonl's
are (records.check_event).

Not here: the watches (watch.py), which line is whose (demux.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from contract.events import parse_line
from runner.backends.kubernetes import demux
from runner.backends.kubernetes.api.apierrors import BadRequest, NotFound
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.api.streams import Stream, Transient
from runner.backends.kubernetes.follow import observe
from runner.backends.kubernetes.follow.owners import PodOwners
from runner.backends.kubernetes.follow.pods import pods_by_node
from runner.backends.kubernetes.follow.reflector import Backoff, WatchConfig
from runner.backends.kubernetes.follow.watch import JobObserver, View
from runner.backends.kubernetes.records import check_event
from runner.errors import RunnerError

log = logging.getLogger(__name__)
RECHECK_S = 10.0  # a log stream that ended while its container runs: look again after this


class LogFollower:
    """One rank's log lines as they are written, until the job has finished."""

    def __init__(
        self,
        api: KubeApi,
        observer: JobObserver,
        node: demux.NodeRanks,
        rank: int,
        finished: Callable[[View], bool],
        config: WatchConfig,
        recheck_s: float = RECHECK_S,
        job_uid: str | None = None,
        owners: PodOwners | None = None,
    ) -> None:
        """`job_uid`: the uid submit created the job with; None: the job the observer sees.
        `owners`: which pods are the job's (a backend's, whose answers are cached)."""
        self._api, self._observer, self._node, self._rank = api, observer, node, rank
        self._job_uid = job_uid
        self._owners = owners or PodOwners(lambda: api)
        self._finished, self._config, self._recheck_s = finished, config, recheck_s
        self._container = api.conn.kind.container
        self._closed = False
        self._stream: Stream | None = None
        self._lock = threading.Lock()

    def lines(self) -> Iterator[str]:
        seen: dict[tuple[str, int], int] = {}  # lines read, per run of the container
        ended: dict[tuple[str, int], float] = {}  # when each container's stream ended normally
        backoff = Backoff(self._config)
        version, timeout_s = 0, None
        while True:
            version = self._observer.wait(version, timeout_s)
            view = self._observer.view()
            if view.closed or self._closed or self._made_again(view):
                return
            done, timeout_s = self._finished(view), None
            # The job's watch and its pods' are separate streams: the job can be seen over
            # while the pods are still as they were, before a container's last restart. So
            # once it is over, the follower asks for the pods themselves before it stops.
            current = self._pods_now(view.pods) if done else view.pods
            # Never the pods of another job made under the job's name (their label is the same).
            uid = self._job_uid or observe.job_uid(view.job)
            owner = self._owners.of(self._observer.name, uid, current, view.job)
            pods = pods_by_node(self._api.conn.kind, current, self._node.elastic, owner)
            pod = pods.get(self._node.node)
            if pod is None or not observe.container_started(pod):
                if done:
                    return
                continue
            key = observe.container_key(pod, self._container)
            running = observe.container_running(pod, self._container)
            quiet_s = time.monotonic() - ended.get(key, -1e9)
            if key not in ended or (running and quiet_s >= self._recheck_s):
                try:
                    yield from self._read(pod, key, seen)
                    ended[key] = time.monotonic()
                except NotFound:  # the pod went away meanwhile: the view will say so
                    ended[key] = time.monotonic()
                except (Transient, BadRequest) as err:  # 400: the container is not up yet
                    if backoff.failing_for_s() >= self._config.give_up_s:
                        raise
                    timeout_s = backoff.failure()
                    log.info("%s; reading it again in %.1f s", err, timeout_s)
                    continue
            elif running:
                timeout_s = self._recheck_s - quiet_s
            if done and key in ended:
                return

    def _made_again(self, view: View) -> bool:
        """Whether the job on the cluster is another made under its name: none of the pods of
        the run's label are then this job's to follow."""
        uid = observe.job_uid(view.job)
        return bool(self._job_uid and uid and uid != self._job_uid)

    def _pods_now(self, watched: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pods as the API server has them; the watched ones where it cannot say."""
        try:
            return self._observer.pods_now()
        except RunnerError as err:
            log.info("listing the pods once more: %s; going by the watch", err)
            return watched

    def _read(
        self, pod: Mapping[str, Any], key: tuple[str, int], seen: dict[tuple[str, int], int]
    ) -> Iterator[str]:
        """Stream the container's log from its start, giving this rank's lines not yet given."""
        stream = self._api.open_log(pod["metadata"]["name"], self._container, True, attempts=1)
        with self._lock:
            self._stream = stream
        if self._closed:
            stream.close()
        try:
            for index, line in enumerate(stream.lines(keep_partial=True)):
                if index < seen.get(key, 0):
                    continue
                seen[key] = index + 1
                rank, text = demux.attribute(line, self._node)
                if rank == self._rank:
                    yield text
        finally:
            with self._lock:
                self._stream = None

    def close(self) -> None:
        """Stop following (from any thread): lines() returns."""
        self._closed = True
        with self._lock:
            if self._stream is not None:
                self._stream.close()


class EventFeed:
    """Rank 0's events, read on a thread from its followed log, taken in batches."""

    def __init__(self, follower: LogFollower, on_end: Callable[[], None]) -> None:
        self._follower = follower
        self._on_end = on_end
        self._queue: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="rank 0 events", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for line in self._follower.lines():
                event = parse_line(line)
                if event is not None and check_event(event) is None:
                    self._queue.put(event)
        except RunnerError as err:  # the status follower reports what became of the job
            log.warning("stopped reading rank 0's events: %s", err)
        finally:
            self._ended.set()
            self._on_end()

    def take(self) -> list[dict[str, Any]] | None:
        """The events read since the last take (maybe none); None once the log has been read
        to its end and every event taken."""
        ended = self._ended.is_set()  # before draining: an event put before the end is taken
        batch = []
        while not self._queue.empty():
            batch.append(self._queue.get())
        return None if ended and not batch else batch

    def wait_ended(self, timeout_s: float) -> None:
        self._ended.wait(timeout_s)

    def close(self) -> None:
        self._follower.close()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
