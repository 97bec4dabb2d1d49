"""Following one job on the cluster with watches instead of polling: its object, its pods and,
while it is pending, the namespace's warning events (the reason a job waits), each collection
kept current in memory by a reflector (reflector.py: list, then watch from the list's version,
resuming after drops, listing again after 410 Gone).

Requests made while a job runs: one list and one watch per collection, plus one watch every
5-10 minutes and one per dropped connection: bounded by the job's events, not by its length.
Not here: what the objects mean (observe.py), the API calls themselves (client.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from runner.backends.kubernetes.api.client import KubeApi, Selector
from runner.backends.kubernetes.follow.reflector import Reflector, Store, WatchConfig
from runner.backends.kubernetes.render.common import RUN_ID_LABEL


class JobObserver:
    """The cluster's view of one job, kept current by reflectors: the job object (by name),
    its pods (by the run-id label) and, while `watch_events(True)`, the namespace's warnings.

    Shared by whoever follows the job in this process (status, logs, events); `close()` stops
    every reflector and wakes every waiter."""

    def __init__(self, api: KubeApi, name: str, config: WatchConfig) -> None:
        self.name = name
        self.store = Store()
        self._api, self._config = api, config
        self._reflectors: dict[str, Reflector] = {}
        self._lock = threading.Lock()
        self._pods = Selector(label=f"{RUN_ID_LABEL}={name}")
        self._start("job", Selector(field=f"metadata.name={name}"))
        self._start("pods", self._pods)

    def _start(self, collection: str, selector: Selector, optional: bool = False) -> None:
        reflector = Reflector(self._api, collection, selector, self.store, self._config, optional)
        self._reflectors[collection] = reflector
        reflector.start()

    def watch_events(self, wanted: bool) -> None:
        """Start or stop watching the namespace's warning events (asked for while pending)."""
        with self._lock:
            running = self._reflectors.get("events")
            if wanted and running is None and not self.store.closed:
                self._start("events", Selector(field="type=Warning"), optional=True)
            elif not wanted and running is not None:
                del self._reflectors["events"]
        if not wanted and running is not None:
            running.stop()
            self.store.forget("events")

    def wait(self, seen: int, timeout_s: float | None) -> int:
        """Block until the view changes after version `seen` (or timeout_s passes, or the
        observer closes); the current version. Raises the error that stopped a reflector."""
        store = self.store
        with store.changed:
            store.changed.wait_for(
                lambda: (
                    (store.version > seen and store.synced >= {"job", "pods"})
                    or store.error is not None
                    or store.closed
                ),
                timeout=timeout_s,
            )
            if store.error is not None:
                raise store.error
            return store.version

    def pods_now(self) -> list[dict[str, Any]]:
        """The job's pods as the API server has them now, in one list request: the view's
        come from the pods' own watch, which may lag the job's."""
        items, _ = self._api.list_objects("pods", self._pods, attempts=1)
        return items

    def view(self) -> View:
        with self.store.changed:
            objects, synced = self.store.objects, self.store.synced
            return View(
                job=next(iter(objects.get("job", {}).values()), None),
                pods=list(objects.get("pods", {}).values()),
                events=list(objects.get("events", {}).values()),
                events_synced="events" in synced,
                closed=self.store.closed,
            )

    def close(self) -> None:
        self.store.close()
        with self._lock:
            reflectors, self._reflectors = list(self._reflectors.values()), {}
        for reflector in reflectors:
            reflector.stop()


class Observers:
    """One JobObserver per job, shared by whoever follows it in this process (a watch, a log
    follower, the event feed); the last to let go closes it, and close() closes them all."""

    def __init__(self, api: Callable[[], KubeApi], config: WatchConfig) -> None:
        self._api, self._config = api, config
        self._lock = threading.Lock()
        self._observers: dict[str, tuple[JobObserver, int]] = {}  # name -> (observer, users)

    @contextlib.contextmanager
    def observing(self, name: str) -> Iterator[JobObserver]:
        observer = self.acquire(name)
        try:
            yield observer
        finally:
            self.release(name)

    def acquire(self, name: str) -> JobObserver:
        api = self._api()
        with self._lock:
            observer, users = self._observers.get(name, (None, 0))
            if observer is None:
                observer = JobObserver(api, name, self._config)
            self._observers[name] = (observer, users + 1)
            return observer

    def release(self, name: str) -> None:
        with self._lock:
            observer, users = self._observers.pop(name, (None, 0))
            if observer is not None and users > 1:
                self._observers[name] = (observer, users - 1)
                return
        if observer is not None:
            observer.close()

    def close(self) -> None:
        with self._lock:
            observers, self._observers = [o for o, _ in self._observers.values()], {}
        for observer in observers:
            observer.close()


@dataclass(frozen=True)
class View:
    """What the observer knows now. `job` is None once the job is gone from the cluster."""

    job: dict[str, Any] | None
    pods: list[dict[str, Any]]
    events: list[dict[str, Any]]
    events_synced: bool
    closed: bool
