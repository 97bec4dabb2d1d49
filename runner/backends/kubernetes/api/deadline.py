"""Total deadlines on calls to the API server: connect and every read of a call end by a time
fixed when the call starts, however the server paces its bytes.

A socket's timeout bounds one read; a server that sends a byte just before each read times out
(a dripping proxy, a broken API server) would hold a call for as long as it likes. So every
connection the client opens is made by `DeadlineConnection` (installed into the client's pool by
`install`), which hands its socket to the `Deadline` that is current on the calling thread; when
that deadline passes, a timer shuts the socket down, and whatever read is blocked on it, in any
thread, ends at once. The caller then sees `expired` and reports the deadline, never the broken
read it caused.

What it is not: the choice of deadlines (limits.py) and the messages (client.py).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import urllib3

_current = threading.local()
# An error's body holds a Status with the server's message: a few hundred bytes.
MAX_ERROR_BODY_BYTES = 64 << 10


class Deadline:
    """The end of one call (`seconds` from now); `close()` when the call is over."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends_at = time.monotonic() + seconds
        self.expired = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left_s(self) -> float:
        return max(0.0, self.ends_at - time.monotonic())

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
        if self.expired.is_set():
            _shutdown(sock)

    @contextlib.contextmanager
    def current(self) -> Iterator[Deadline]:
        """Connections used on this thread within it are this deadline's."""
        previous = getattr(_current, "deadline", None)
        _current.deadline = self
        try:
            yield self
        finally:
            _current.deadline = previous

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._sockets.clear()

    def _expire(self) -> None:
        self.expired.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    # socket.socket's own shutdown, at the descriptor: an SSLSocket's would first drop its TLS
    # state under the feet of the thread reading it. What was blocked reads end-of-file.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _DeadlineMixin:
    """Hands the connection's socket to the deadline current on the thread that uses it: when
    it connects, and each time a request goes out on it (a pooled connection serves many)."""

    _raw_sock: socket.socket | None = None

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        self._raw_sock = sock
        _register(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> Any:
        if self._raw_sock is not None:
            _register(self._raw_sock)
        return super().request(*args, **kwargs)  # type: ignore[misc]

    def getresponse(self) -> Any:
        """The response; an error's body cut to MAX_ERROR_BODY_BYTES here, as it comes: the
        client reads an error's body whole to find the server's message in it."""
        response = super().getresponse()  # type: ignore[misc]
        if not 200 <= response.status < 300:
            body = response.read(MAX_ERROR_BODY_BYTES, decode_content=True)
            response.close()  # the rest is never read; the connection is not reused
            response._body = body or b" "  # what `.data` gives from now on
        return response


def current_deadline() -> Deadline | None:
    """The deadline current on this thread, if any."""
    return getattr(_current, "deadline", None)


def _register(sock: socket.socket) -> None:
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.add(sock)


def install(pool_manager: urllib3.PoolManager) -> None:
    """Make every connection `pool_manager` opens from now on a deadline's (whatever its pool
    classes: plain, TLS, through a proxy)."""
    pool_manager.clear()
    pool_manager.pool_classes_by_scheme = {
        scheme: type(f"Deadline{pool.__name__}", (pool,), {"ConnectionCls": _connection(pool)})
        for scheme, pool in pool_manager.pool_classes_by_scheme.items()
    }


def _connection(pool: Any) -> type:
    return type(f"Deadline{pool.ConnectionCls.__name__}", (_DeadlineMixin, pool.ConnectionCls), {})
