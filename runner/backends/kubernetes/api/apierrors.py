"""What the API server's failures mean to the user: an HTTP status, a dropped connection or an
answer that is no Kubernetes API's, as one-line RunnerErrors that name the cluster and what to
do next. The server's own words are any server's: they reach the terminal as one printable
line, cut short.

The exception classes here are what callers tell apart (a 404 is not always an error, a 410
means list again). What it is not: the calls themselves and their retries (client.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kubernetes.client.exceptions import ApiException

from contract import files
from contract.rundir import one_line
from runner.backends.kubernetes.api.limits import ENV, mib
from runner.backends.kubernetes.api.streams import DeadlinePassed, Transient
from runner.backends.kubernetes.connection import ClusterConnection
from runner.errors import RunnerError

# Only load is retried: 429 and 503 (the server asks to come back, maybe saying when). A 500 is
# the server's own word on a failure (a webhook that failed, a kubelet out of reach), reported
# as it said it; a 502/504 is a proxy's, worth no blind retry either.
RETRIED_STATUSES = frozenset({429, 503})
MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After is the call's deadline's to refuse
MAX_SERVER_TEXT = 300  # of a server's message in an error: enough for any real one


class NotFound(RunnerError):
    """The object asked for does not exist (callers decide whether that is an error)."""


class NameConflict(RunnerError):
    """An object of that name exists already (409)."""


class BadRequest(RunnerError):
    """400: the request cannot be served as it is (for a pod's log: its container has not
    started yet)."""


class Forbidden(RunnerError):
    """403: RBAC forbids the request (callers of an optional one carry on without it)."""


class Gone(RunnerError):
    """410: the resource version a watch asked for is too old (compacted); list again."""


@dataclass(frozen=True)
class ApiErrors:
    """The errors of one cluster connection; `host` is the API server's address."""

    conn: ClusterConnection
    host: str

    def status(self, what: str, status: int, message: str, attempts: int = 1) -> RunnerError:
        """An HTTP error status (of a call, or of a watch's ERROR event) as a RunnerError that
        names the cluster and what to do."""
        ns, where, message = self.conn.namespace, self.conn.source, server_text(message)
        if status == 400:
            return BadRequest(f"cannot {what} on {where}: {message}")
        if status == 404:
            return NotFound(f"cannot {what} on {where}: not found ({message})")
        if status == 409:
            return NameConflict(f"cannot {what} on {where}: {message}")
        if status == 410:
            return Gone(f"cannot {what} on {where}: {message or 'the resource version is gone'}")
        if status == 401:
            return RunnerError(
                f"cannot {what}: the API server at {self.host} rejected the credentials "
                f"({message}); refresh the kubeconfig of {where}"
            )
        if status == 403 and "admission webhook" in message:
            return RunnerError(
                f"cannot {what} on {where}: an admission webhook refused it: {message}"
            )
        if status == 403:
            return Forbidden(
                f"cannot {what} in namespace {ns} on {where}: forbidden by RBAC ({message}); ask "
                f"the cluster admin for the permission; `kubectl auth can-i --list -n {ns}` shows "
                "what you may do"
            )
        if status in RETRIED_STATUSES:
            return Transient(
                f"cannot {what} on {where}: the API server answered HTTP {status} {attempts} "
                f"times ({message}); it is overloaded or upgrading, try again in a few "
                f"minutes (`kubectl get --raw /readyz` shows its health)"
            )
        if status >= 500:
            return RunnerError(
                f"cannot {what} on {where}: the API server failed it (HTTP {status}): {message}"
            )
        return RunnerError(f"cannot {what} on {where}: HTTP {status} ({message})")

    def deadline(self, what: str, seconds: float, last: str | None = None) -> DeadlinePassed:
        """The call did not end within its deadline (deadline.py)."""
        tried = f" (the last attempt: {last})" if last else ""
        return DeadlinePassed(
            f"cannot {what}: the Kubernetes API server at {self.host} did not answer within "
            f"the call's deadline of {seconds:g} s{tried}; it is overloaded or something on the "
            f"way holds the connection ({ENV['call_deadline_s']} sets the deadline); "
            f"{self.check_hint()}"
        )

    def redirect(self, what: str, status: int, headers: Mapping[str, str] | None) -> RunnerError:
        """A 3xx: never followed, since the request carries the cluster's credentials."""
        location = (headers or {}).get("Location") or (headers or {}).get("location") or ""
        to = server_text(urlsplit(location).netloc or location or "an unnamed place")
        return RunnerError(
            f"cannot {what}: the server at {self.host} answered with a redirect (HTTP {status}) "
            f"to {to}; the runner never follows one, which would send the cluster's "
            f"credentials there: point the kubeconfig of {self.conn.source} at the API server "
            "itself (`kubectl config view --minify` shows the address)"
        )

    def too_large(self, what: str, cap_bytes: int) -> RunnerError:
        return RunnerError(
            f"cannot {what}: the answer of the server at {self.host} is larger than "
            f"{mib(cap_bytes)}, which no answer the runner asks for needs; refused (is it a "
            f"Kubernetes API server? {ENV['max_answer_bytes']} raises the limit)"
        )

    def unreachable(self, what: str, err: Exception, attempts: int) -> Transient:
        return Transient(
            f"cannot {what}: the Kubernetes API server at {self.host} is unreachable "
            f"({type(err).__name__}) after {attempts} attempts; check the cluster is up and "
            f"reachable: {self.check_hint()}"
        )

    def check_hint(self) -> str:
        """The command that shows whether this cluster is up."""
        if self.conn.stack:
            return f"`pulumi stack output --stack {self.conn.stack}` and `pulumi up` if it is down"
        return "`kubectl cluster-info` with the same kubeconfig and context"

    def json(self, data: bytes, what: str) -> Any:
        """The answer's JSON; an answer that is not JSON is garbage."""
        try:
            return files.loads(data)
        except ValueError:
            raise self.garbage(what, "an answer that is not JSON") from None

    def garbage(self, what: str, problem: str) -> RunnerError:
        """The server sent what no Kubernetes API server sends."""
        problem = server_text(problem)  # it may name a key the server chose
        return RunnerError(
            f"cannot {what}: the server at {self.host} sent {problem}; is it a Kubernetes API "
            f"server? Check the kubeconfig of {self.conn.source} (`kubectl cluster-info`)"
        )


def server_text(text: str) -> str:
    """Text a server chose, as one printable line of at most MAX_SERVER_TEXT characters: no
    newline or terminal escape of its own reaches the user's terminal."""
    return one_line(str(text))[:MAX_SERVER_TEXT]


def retry_after_s(headers: Mapping[str, str] | None) -> float:
    """The seconds a 429/503's Retry-After asks for (0: none, or not a number of seconds)."""
    text = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after") or ""
    try:
        seconds = float(text)
    except ValueError:
        return 0.0
    return min(seconds, MAX_RETRY_AFTER_S) if seconds > 0 else 0.0


def status_message(err: ApiException) -> str:
    """The message of an error's Status body, else the HTTP reason."""
    try:
        return files.loads(err.body or "").get("message") or err.reason
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)
