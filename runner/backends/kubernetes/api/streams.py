"""Long-lived HTTP responses from the API server: a watch (one JSON event per line) and a followed
pod log (text lines). Each is read by one thread; `close()` may come from any other thread and
ends that read at once (it shuts the socket down, as the official client's Watch.stop does).
LogRead reads a pod's log once to its end and then says whether it was whole.

A connection that drops mid-stream raises `StreamBroken` (a line cut in half is never given);
the caller decides whether to resume. Lines are capped in length, so a pod printing an endless
line cannot exhaust the runner's memory (what is past the cap is dropped, never given as a line
of its own). Not here: opening the responses (client.py) and deciding what to do after a drop
(follow/reflector.py, follow/logs.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import urllib3

from contract import files
from runner.backends.kubernetes.api.deadline import Deadline
from runner.backends.kubernetes.api.limits import mib
from runner.errors import RunnerError

log = logging.getLogger(__name__)
CHUNK_BYTES = 64 * 1024
# Longer lines are cut at this size and the rest of the line is dropped: no log line of ours
# comes near it, and a piece of a line given as a line of its own could start with another
# rank's `[rankN]:` prefix (demux.py), which torchrun puts only at a line's start.
MAX_LINE_BYTES = 1 << 20
CHANGES = ("ADDED", "MODIFIED", "DELETED")  # a watch's events that carry an object


class Transient(RunnerError):
    """The API server is unreachable, overloaded (429, 5xx) or dropped the connection: worth
    trying again later. The message names the cluster and what to check."""


class StreamBroken(Transient):
    """An open watch or log stream ended before the server meant it to."""


class DeadlinePassed(Transient):
    """A call, or a stream, did not end by its deadline (deadline.py)."""


class Stream:
    """One streaming response. `what` ("watch pods") and `host` are for messages. With a
    `deadline`, the stream ends by it (a DeadlinePassed); with `max_bytes`, it ends quietly
    after that many bytes, and `cut` says so."""

    def __init__(
        self,
        response: urllib3.BaseHTTPResponse,
        what: str,
        host: str,
        deadline: Deadline | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self._response = response
        self.what = what
        self.host = host
        self._closed = False
        self._deadline = deadline
        self.max_bytes = max_bytes
        self.cut = False

    def lines(self, keep_partial: bool) -> Iterator[str]:
        """The response's lines without their newline. `keep_partial`: the last line may lack
        its newline (a log); otherwise an unterminated line at the end is dropped (a watch).
        Ends quietly after close(); raises StreamBroken when the connection drops."""
        try:
            pending, cut = b"", False  # cut: the line being read was too long; drop its rest
            size = 0
            for chunk in self._response.stream(CHUNK_BYTES, decode_content=True):
                size += len(chunk)
                if self.max_bytes is not None and size > self.max_bytes:
                    self.cut = True
                    chunk = chunk[: len(chunk) - (size - self.max_bytes)]
                pending += chunk
                *complete, pending = pending.split(b"\n")
                if cut and complete:  # the first is the rest of the line that was cut
                    complete, cut = complete[1:], False
                if cut:
                    pending = b""
                elif len(pending) > MAX_LINE_BYTES:
                    complete.append(pending[:MAX_LINE_BYTES])
                    pending, cut = b"", True
                for line in complete:
                    yield line.decode("utf-8", errors="replace").rstrip("\r")
                if self.cut:
                    break
            if (passed := self._passed()) is not None:
                raise passed
            if pending and keep_partial and not self.cut:  # a cut line is not given half
                yield pending.decode("utf-8", errors="replace")
        except (urllib3.exceptions.HTTPError, OSError) as err:
            if (passed := self._passed()) is not None:
                raise passed from None
            if self._closed:
                return
            raise StreamBroken(
                f"{self.what}: the connection to the Kubernetes API server at {self.host} "
                f"dropped ({type(err).__name__})"
            ) from None
        finally:
            self._release()

    def _passed(self) -> DeadlinePassed | None:
        """A stream cut by its deadline (an end-of-file, or a broken read) is no end."""
        if self._deadline is None or not self._deadline.expired.is_set() or self._closed:
            return None
        return DeadlinePassed(
            f"{self.what}: the Kubernetes API server at {self.host} did not end it within its "
            f"deadline of {self._deadline.seconds:g} s"
        )

    def close(self) -> None:
        """End the stream; the thread reading it (if any) stops at once."""
        self._closed = True
        # ValueError/RuntimeError: already finished and released; OSError: socket gone.
        with contextlib.suppress(ValueError, RuntimeError, OSError, AttributeError):
            self._response.shutdown()

    def _release(self) -> None:
        if self._deadline is not None:
            self._deadline.close()
        # The connection may hold unread data: close it rather than return it to the pool.
        with contextlib.suppress(Exception):
            self._response.close()
        with contextlib.suppress(Exception):
            self._response.release_conn()


class WatchStream(Stream):
    """A watch: its events, with ERROR events turned into exceptions by `on_error`
    (a 410 becomes apierrors.Gone; anything else a RunnerError naming the cluster), and each
    changed object passed through `check` (the object, kept: a list of it; left out: an empty
    list; refused: a RunnerError)."""

    def __init__(
        self,
        response: urllib3.BaseHTTPResponse,
        what: str,
        host: str,
        on_error: Callable[[int, str], RunnerError],
        check: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda obj: [obj],
        deadline: Deadline | None = None,
    ) -> None:
        super().__init__(response, what, host, deadline)
        self._on_error = on_error
        self._check = check

    def events(self) -> Iterator[dict[str, Any]]:
        for line in self.lines(keep_partial=False):
            if not line.strip():
                continue
            event = _event(line)
            if event is None:
                raise RunnerError(
                    f"{self.what}: the server at {self.host} sent something that is not a watch "
                    f"event ({line[:80]!r}); is it a Kubernetes API server? Check the "
                    "kubeconfig's server address (`kubectl cluster-info`)"
                )
            if event["type"] == "ERROR":
                status = event["object"]
                code = status.get("code") if isinstance(status.get("code"), int) else 500
                raise self._on_error(code, str(status.get("message") or status.get("reason")))
            if event["type"] in CHANGES and not self._check(event["object"]):
                continue
            yield event


class LogRead:
    """One pod's log read once to its end, line by line; then `whole` says whether it was all
    of it, and `cut` whether it went past max_log_bytes (the rest not read)."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self.whole = False
        self.cut = False

    def lines(self) -> Iterator[str]:
        try:
            yield from self._stream.lines(keep_partial=True)
        except Transient as err:
            log.warning("%s; the log is incomplete", err)
            return
        self.cut = self._stream.cut
        self.whole = not self.cut
        if self.cut:
            log.warning("%s: cut after %s", self._stream.what, mib(self._stream.max_bytes or 0))


def _event(line: str) -> dict[str, Any] | None:
    try:
        event = files.loads(line)
    except ValueError:
        return None
    if (
        not isinstance(event, dict)
        or not isinstance(event.get("type"), str)
        or not isinstance(event.get("object"), dict)
    ):
        return None
    return event
