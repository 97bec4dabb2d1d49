"""One collection kept current in memory by a reflector on its own thread, as client-go's
Reflector and the official client's `kubernetes.watch.Watch` do it:

- list, then watch from the list's resourceVersion, asking for bookmarks so that a quiet watch
  still advances its version; the server ends each watch after a random 5-10 minutes (spreading
  reconnects, as client-go's minWatchTimeout), and the next one resumes from the last version
  seen, so no change is lost or seen twice;
- a dropped connection, an unreachable server or a 429/5xx: resume after an exponential back-off
  (0.8 s doubling to 30 s, with jitter; reset after 2 minutes without failures); after
  `give_up_s` of failing with no success in between, the follower fails with one line naming
  the cluster (the job itself runs on, and `runner status` asks again);
- 410 Gone (the version was compacted away): list again and carry on from the new list;
- anything else (401, 403, garbage): the follower fails with the client's message.

Not here: which collections a job's view needs (watch.py), what the objects mean
(observe.py), the API calls themselves (client.py).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.backends.kubernetes.api.apierrors import Gone
from runner.backends.kubernetes.api.client import KubeApi, Selector
from runner.backends.kubernetes.api.streams import Transient, WatchStream
from runner.errors import RunnerError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchConfig:
    """How a job is watched; the defaults are client-go's reflector's."""

    min_timeout_s: float = 300.0  # each watch lasts a random [min, 2 min] (server-side timeout)
    backoff_initial_s: float = 0.8
    backoff_max_s: float = 30.0
    backoff_reset_s: float = 120.0  # this long without a failure resets the back-off
    jitter: float = 1.0  # each delay is stretched by up to this fraction, at random
    give_up_s: float = 600.0  # failing this long with no success in between: report it
    # A watch that brings no change for this long (bookmarks, keep-alives or nothing at all) is
    # ended and the collection listed again: a broken watch cache, or a proxy, can hold a watch
    # open that never delivers the change a list shows at once.
    relist_quiet_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.backoff_initial_s <= self.backoff_max_s:
            raise ValueError("need 0 < backoff_initial_s <= backoff_max_s")
        if self.min_timeout_s < 1 or self.give_up_s <= 0 or self.jitter < 0:
            raise ValueError("min_timeout_s >= 1, give_up_s > 0 and jitter >= 0 are required")
        if self.relist_quiet_s <= 0:
            raise ValueError("relist_quiet_s must be positive")

    def watch_timeout_s(self) -> float:
        return self.min_timeout_s * (1.0 + random.random())


@dataclass
class Backoff:
    """Exponential back-off between failed attempts, and how long failures have lasted."""

    config: WatchConfig
    clock: Callable[[], float] = time.monotonic
    _delay_s: float = 0.0
    _last_failure: float | None = None
    _failing_since: float | None = field(default=None)

    def failure(self) -> float:
        """Record a failure; the seconds to wait before the next attempt."""
        now, cfg = self.clock(), self.config
        if self._last_failure is not None and now - self._last_failure > cfg.backoff_reset_s:
            self._delay_s = 0.0
        self._delay_s = min(cfg.backoff_max_s, max(cfg.backoff_initial_s, self._delay_s * 2))
        self._last_failure = now
        if self._failing_since is None:
            self._failing_since = now
        return self._delay_s * (1.0 + cfg.jitter * random.random())

    def success(self) -> None:
        """A request got through: the give-up clock starts again (the back-off does not, so a
        server that accepts and drops at once is not hammered)."""
        self._failing_since = None

    def failing_for_s(self) -> float:
        return 0.0 if self._failing_since is None else self.clock() - self._failing_since


class Store:
    """What reflectors write into: the objects of each collection by name, a version that
    grows with every change, and the first fatal error. Consumers wait on `changed`."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.synced: set[str] = set()
        self.version = 0
        self.error: BaseException | None = None
        self.closed = False

    def replace(self, collection: str, items: list[dict[str, Any]]) -> None:
        with self.changed:
            self.objects[collection] = {_name(i): i for i in items}
            self.synced.add(collection)
            self._bump()

    def apply(self, collection: str, kind: str, obj: dict[str, Any]) -> None:
        with self.changed:
            objects = self.objects.setdefault(collection, {})
            if kind == "DELETED":
                objects.pop(_name(obj), None)
            else:
                objects[_name(obj)] = obj
            self._bump()

    def forget(self, collection: str) -> None:
        with self.changed:
            self.objects.pop(collection, None)
            self.synced.discard(collection)
            self._bump()

    def fail(self, error: BaseException) -> None:
        with self.changed:
            self.error = self.error or error
            self._bump()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self._bump()

    def _bump(self) -> None:
        self.version += 1
        self.changed.notify_all()


class Reflector:
    """Keeps one collection's selected objects current in a Store, on its own thread."""

    def __init__(
        self,
        api: KubeApi,
        collection: str,
        selector: Selector,
        store: Store,
        config: WatchConfig,
        optional: bool = False,
    ) -> None:
        self._api, self._collection, self._selector = api, collection, selector
        self._store, self._config = store, config
        # Optional: a collection that only refines the view (warning events); if it cannot be
        # read (RBAC may forbid events), the view goes on without it.
        self._optional = optional
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._version = ""  # the last resource version seen; "" until listed
        self._quiet = threading.Event()  # the current watch brought nothing for relist_quiet_s
        self._changed_at = time.monotonic()  # when a list or a watch last brought a change
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"watch {collection}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (from any thread); returns once the thread has ended."""
        self._stop.set()
        with self._lock:
            if self._stream is not None:
                self._stream.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            self._loop()
        except RunnerError as err:
            if not self._optional:
                self._store.fail(err)
                return
            log.warning("%s; carrying on without it", err)
            self._store.replace(self._collection, [])
        except BaseException as err:  # a bug: the consumer re-raises it with its traceback
            self._store.fail(err)
            raise

    def _loop(self) -> None:
        backoff = Backoff(self._config)
        while not self._stop.is_set():
            try:
                if not self._version:
                    items, self._version = self._api.list_objects(
                        self._collection, self._selector, attempts=1
                    )
                    self._store.replace(self._collection, items)
                    self._changed_at = time.monotonic()
                    backoff.success()
                self._watch(backoff)
            except Gone:
                log.info("watch %s: version %s is gone; listing again", self._collection,
                         self._version)  # fmt: skip
                self._version = ""
            except Transient as err:
                if backoff.failing_for_s() >= self._config.give_up_s:
                    raise Transient(
                        f"{err}; stopped following after {self._config.give_up_s:.0f} s of "
                        f"failures (the job carries on: `runner status` asks again)"
                    ) from None
                delay_s = backoff.failure()
                log.info("%s; trying again in %.1f s", err, delay_s)
                self._stop.wait(delay_s)

    def _watch(self, backoff: Backoff) -> None:
        """One watch from the last version seen until the server ends it (or it drops); the
        version moves with every event, so a drop resumes right after the last one applied."""
        stream = self._api.watch_objects(
            self._collection,
            self._selector,
            self._version,
            self._config.watch_timeout_s(),
            attempts=1,
        )
        with self._lock:
            self._stream = stream
        if self._stop.is_set():
            stream.close()
        backoff.success()
        timer = self._quiet_timer(stream)
        try:
            for event in stream.events():
                obj = event["object"]
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    self._store.apply(self._collection, event["type"], obj)
                    self._changed_at = time.monotonic()
                    timer.cancel()
                    timer = self._quiet_timer(stream)
                self._version = _version(obj) or self._version  # BOOKMARK: only the version moves
        finally:
            timer.cancel()
            with self._lock:
                self._stream = None
        quiet_s = time.monotonic() - self._changed_at
        if self._quiet.is_set() or quiet_s > self._config.relist_quiet_s:
            self._quiet.clear()
            log.info("watch %s: no change for %.0f s; listing again", self._collection,
                     self._config.relist_quiet_s)  # fmt: skip
            self._version = ""

    def _quiet_timer(self, stream: WatchStream) -> threading.Timer:
        """Ends `stream` once no list or watch has brought a change for relist_quiet_s (a
        watch the server ends at once, again and again, counts as one quiet watch)."""

        def quiet() -> None:
            self._quiet.set()
            stream.close()

        left_s = self._config.relist_quiet_s - (time.monotonic() - self._changed_at)
        timer = threading.Timer(max(0.0, left_s), quiet)
        timer.daemon = True
        timer.start()
        return timer


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _version(obj: dict[str, Any]) -> str:
    """An event's resource version; "" for none. A changed object's was checked as it came
    in (objects.py); a bookmark's is all it has, and one of the wrong type is not a version."""
    meta = obj.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return version if isinstance(version, str) else ""
