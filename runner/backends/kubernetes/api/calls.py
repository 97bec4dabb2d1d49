"""The one place the Kubernetes API is called: each call within a deadline for the call as a
whole (deadline.py), its answer read within a size cap (limits.py), bounded retries of what is
worth retrying (429/503 after the server's Retry-After, dropped connections), and every failure
turned into a one-line RunnerError (apierrors.py). What it is not: which calls the runner makes
(client.py, whose KubeApi is an ApiCalls).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from runner.backends.kubernetes.api.apierrors import (
    RETRIED_STATUSES,
    ApiErrors,
    retry_after_s,
    status_message,
)
from runner.backends.kubernetes.api.deadline import Deadline, current_deadline
from runner.backends.kubernetes.api.limits import ApiLimits
from runner.backends.kubernetes.api.streams import CHUNK_BYTES
from runner.errors import RunnerError

log = logging.getLogger(__name__)
T = TypeVar("T")


class ApiCalls:
    """Making calls; a subclass sets what they need (KubeApi, from its connection)."""

    errors: ApiErrors
    limits: ApiLimits
    max_attempts: int
    retry_backoff_s: float
    request_timeout_s: float

    def answer(
        self, what: str, fn: Callable[..., Any], *args: Any, attempts: int | None = None,
        **kwargs: Any,
    ) -> bytes:  # fmt: skip
        """The body of fn's answer, read within the call's deadline, at most max_answer_bytes
        of it (a larger answer is refused, never read whole)."""
        return self.call(what, fn, *args, _preload_content=False, attempts=attempts,
                         read=lambda r: self._body(r, what), **kwargs)  # fmt: skip

    def call(
        self,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        attempts: int | None = None,
        deadline: Deadline | None = None,
        read: Callable[[Any], T] = lambda response: response,
        **kwargs: Any,
    ) -> T:
        """read(fn(*args, **kwargs)), within `deadline` (default: call_deadline_s from now,
        for the call as a whole, retries included); retried on 429/503 (after the server's
        Retry-After, if it says one) and connection errors with exponential backoff, at most
        `attempts` (default max_attempts) times; every failure becomes a RunnerError
        (Transient for those worth trying again later, Gone for a 410)."""
        own = deadline is None
        deadline = deadline or Deadline(self.limits.call_deadline_s)
        try:
            with deadline.current():
                return self._attempts(what, fn, args, kwargs, attempts or self.max_attempts,
                                      deadline, read)  # fmt: skip
        finally:
            if own:
                deadline.close()

    def _attempts(
        self, what: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        attempts: int, deadline: Deadline, read: Callable[[Any], T],
    ) -> T:  # fmt: skip
        kwargs.setdefault("_request_timeout", self.request_timeout_s)
        for attempt in range(1, attempts + 1):
            wait_s = 0.0
            try:
                return read(fn(*args, **kwargs))
            except ApiException as err:
                status = err.status or 0
                if deadline.expired.is_set():
                    raise self.errors.deadline(what, deadline.seconds) from None
                if 300 <= status < 400:
                    raise self.errors.redirect(what, status, err.headers) from None
                if status not in RETRIED_STATUSES or attempt == attempts:
                    raise self.error(what, status, status_message(err), attempt) from None
                reason, wait_s = f"HTTP {status}", retry_after_s(err.headers)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                if deadline.expired.is_set():
                    raise self.errors.deadline(what, deadline.seconds) from None
                if attempt == attempts:
                    raise self.errors.unreachable(what, err, attempts) from None
                reason = type(err).__name__
            delay_s = max(wait_s, self.retry_backoff_s * 2 ** (attempt - 1))
            if delay_s >= deadline.left_s():  # the next attempt could not end in time
                raise self.errors.deadline(what, deadline.seconds, reason) from None
            log.info("%s: %s, retrying in %.1f s (%d/%d)", what, reason, delay_s, attempt, attempts)
            time.sleep(delay_s)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _body(self, response: Any, what: str) -> bytes:
        """The answer's body, at most max_answer_bytes (a larger one is refused as it comes:
        its length may be unsaid, or a lie)."""
        cap, size, chunks, done = self.limits.max_answer_bytes, 0, [], False
        try:
            for chunk in response.stream(CHUNK_BYTES, decode_content=True):
                size += len(chunk)
                if size > cap:
                    raise self.errors.too_large(what, cap)
                chunks.append(chunk)
            done = True
        finally:
            if not done:  # unread data (a refused answer) must not go back to the pool
                response.close()
            response.release_conn()
        deadline = current_deadline()
        if deadline is not None and deadline.expired.is_set():  # cut short by the deadline
            raise self.errors.deadline(what, deadline.seconds)
        return b"".join(chunks)

    def error(self, what: str, status: int, message: str, attempts: int = 1) -> RunnerError:
        """An HTTP error status (of a call, or of a watch's ERROR event) as a RunnerError that
        names the cluster and what to do (apierrors.py)."""
        return self.errors.status(what, status, message, attempts)
