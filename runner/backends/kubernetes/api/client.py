"""A thin layer over the official kubernetes client: the calls the backend makes, with bounded
retries of transient failures, and every failure turned into a one-line RunnerError that names
the cluster and what to do next (apierrors.py).

Collections (the job, its pods, the namespace's warning events) are listed, and watched from a
list's resourceVersion (streams.py reads the watch); every object that comes in, listed, got or
watched, has the types of the fields the runner reads checked first (objects.py). What it is
not: a general client, nor the policy of following a job (watch.py). Imported only by the
kubernetes backend, never on the runner's start-up path.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from contract import files
from runner.backends.kubernetes.api import objects
from runner.backends.kubernetes.api.apierrors import (
    RETRIED_STATUSES,
    ApiErrors,
    NameConflict,
    NotFound,
    retry_after_s,
    status_message,
)
from runner.backends.kubernetes.api.deadline import Deadline, current_deadline, install
from runner.backends.kubernetes.api.limits import ApiLimits, mib
from runner.backends.kubernetes.api.streams import CHUNK_BYTES, Stream, Transient, WatchStream
from runner.backends.kubernetes.connection import ClusterConnection, kubeconfig_file
from runner.backends.kubernetes.jobapis import JOBSET, JobResource
from runner.errors import RunnerError

log = logging.getLogger(__name__)
T = TypeVar("T")


# A followed log may be quiet for a while (a long evaluation); after this long without a line,
# the follower reconnects and skips what it has seen.
FOLLOW_READ_TIMEOUT_S = 600.0
COLLECTIONS = ("job", "pods", "events")
MAX_UID_CHARS = 128  # a uid is a UUID (36); more is garbage, not to be written into job.json


@dataclass(frozen=True)
class Selector:
    """Which objects of a collection: `label` and `field` selectors as the API takes them."""

    label: str | None = None
    field: str | None = None


class KubeApi:
    """Clients for one cluster connection. close() removes the credentials written to disk."""

    def __init__(
        self,
        conn: ClusterConnection,
        max_attempts: int = 4,
        retry_backoff_s: float = 1.0,
        request_timeout_s: float = 30.0,
        limits: ApiLimits | None = None,
    ) -> None:
        """`request_timeout_s` bounds connecting and each read; `limits` (default: from the
        environment, limits.py) every call as a whole and what its answers may hold."""
        self.conn = conn
        self.resource = conn.kind.resource
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_s = request_timeout_s
        self.limits = limits or ApiLimits.from_env()
        self._files = contextlib.ExitStack()
        # Callers that never close() still leave no credentials behind once this is collected.
        weakref.finalize(self, self._files.close)
        api_client = self._load(conn)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.host = api_client.configuration.host
        self.errors = ApiErrors(conn, self.host)
        install(api_client.rest_client.pool_manager)  # every call's sockets get its deadline

    def _load(self, conn: ClusterConnection) -> client.ApiClient:
        path, directory = self._files.enter_context(kubeconfig_file(conn))
        cfg = client.Configuration()
        try:
            # temp_file_path: certificate data the client decodes lands in our private directory,
            # which close() removes (the client would otherwise leave it until exit).
            config.load_kube_config(
                config_file=str(path),
                context=conn.context,
                client_configuration=cfg,
                persist_config=False,
                temp_file_path=str(directory),
            )
        except (ConfigException, OSError, ValueError) as err:
            self.close()
            raise RunnerError(
                f"cannot use the kubeconfig of {conn.source}: {err}; "
                "check it with `kubectl config view --minify`"
            ) from None
        finally:
            path.unlink(missing_ok=True)  # the client has read it; only certificates remain
        # We retry ourselves, a bounded number of times, with messages; a redirect is never
        # followed (it would take the credentials to another host): it comes back as an answer.
        cfg.retries = urllib3.Retry(total=0, redirect=False)
        return client.ApiClient(cfg)

    def close(self) -> None:
        self._files.close()

    # ---- jobs ------------------------------------------------------------------------

    def create_job(self, manifest: dict[str, Any]) -> str | None:
        """Create the job; its uid, which tells it apart from a job made again under its name
        (None if the server's answer has none: the job is then known by its name only)."""
        r = self.resource
        name = manifest["metadata"]["name"]
        what = f"create {r.kind} {name}"
        try:
            body = self.answer(
                what,
                self.custom.create_namespaced_custom_object,
                r.group,
                r.version,
                self.conn.namespace,
                r.plural,
                manifest,
            )
        except NameConflict:
            raise NameConflict(
                f"a {r.kind} named {name} already exists in namespace {self.conn.namespace}: "
                f"this run was already submitted; follow it with `runner status {name}` or "
                f"remove it with `runner cancel {name}` before submitting again"
            ) from None
        except NotFound:
            raise self.missing_api_error() from None
        try:
            created = files.loads(body)
        except ValueError:
            created = None
        meta = created.get("metadata") if isinstance(created, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if isinstance(uid, str) and uid and len(uid) <= MAX_UID_CHARS:
            return uid
        log.warning("%s: the server's answer has no uid; the job is known by its name", what)
        return None

    def get_job(self, name: str) -> dict[str, Any]:
        return self._get(self.resource, "job", name)

    def get_jobset(self, name: str, attempts: int | None = None) -> dict[str, Any]:
        """The JobSet `name` (a TrainJob's has the job's name), its fields' types checked."""
        return self._get(JOBSET, "jobsets", name, attempts)

    def _get(
        self, r: JobResource, kind: str, name: str, attempts: int | None = None
    ) -> dict[str, Any]:
        """The object `name` of `r`, its fields' types checked as `kind` (objects.py)."""
        what, ns = f"get {r.kind} {name}", self.conn.namespace
        get = self.custom.get_namespaced_custom_object
        body = self.answer(what, get, r.group, r.version, ns, r.plural, name, attempts=attempts)
        obj = self.errors.json(body, what)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise self.errors.garbage(what, f"something that is not a {r.kind} object")
        obj = self.checked(kind, [obj], what)[0]
        # Another object than the one asked for (a broken server, a proxy) must not have its
        # state, uid or pods read as this run's, nor be deleted by a cancel.
        other = objects.another_object(obj, f"{r.group}/{r.version}", r.kind, ns, name)
        if other is not None:
            raise self.errors.garbage(what, f"{other} instead of {r.kind} {name}")
        return obj

    def delete_job(self, name: str, uid: str | None = None) -> None:
        """Delete the job; with `uid`, only that one: a job made again under its name is
        another's, and the server refuses (409, NameConflict) rather than delete it."""
        r = self.resource
        preconditions = client.V1Preconditions(uid=uid) if uid else None
        body = client.V1DeleteOptions(propagation_policy="Background", preconditions=preconditions)
        self.answer(
            f"delete {r.kind} {name}",
            self.custom.delete_namespaced_custom_object,
            r.group,
            r.version,
            self.conn.namespace,
            r.plural,
            name,
            body=body,
        )

    def missing_api_error(self) -> RunnerError:
        """A 404 on a job collection: the CRD is missing, or the namespace is."""
        r = self.resource
        try:
            self.answer(  # whether it exists is all we ask; no model to validate
                f"discover {r.group}/{r.version}",
                self.custom.get_api_resources,
                r.group,
                r.version,
            )
        except NotFound:
            other = self.conn.kind.other
            return RunnerError(
                f"{self.conn.source} has no {r.kind} API ({r.group}/{r.version}): the "
                f"{r.addon} add-on is not installed; install the stack's add-ons (`pulumi up`) "
                f"or submit with --job-api {other} if the cluster has that one"
            )
        return RunnerError(
            f"namespace {self.conn.namespace!r} does not exist on {self.conn.source}; create it "
            f"(`kubectl create namespace {self.conn.namespace}`) or pick another context"
        )

    # ---- collections: list and watch -------------------------------------------------

    def list_objects(
        self, collection: str, selector: Selector, attempts: int | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """(items, the list's resourceVersion), from which a watch starts."""
        fn, args = self._collection(collection)
        body = self.answer(
            f"list {collection}",
            fn,
            *args,
            label_selector=selector.label,
            field_selector=selector.field,
            attempts=attempts,
        )
        data = self.errors.json(body, f"list {collection}")
        items = data.get("items") if isinstance(data, dict) else None
        meta = data.get("metadata") if isinstance(data, dict) else None
        if not isinstance(items, list) or not isinstance(meta, dict):
            raise self.errors.garbage(f"list {collection}", "a list without items or metadata")
        checked = self.checked(collection, items, f"list {collection}", selector)
        return checked, str(meta.get("resourceVersion") or "")

    def checked(
        self, collection: str, items: list[Any], what: str, selector: Selector | None = None
    ) -> list[dict[str, Any]]:
        """`items` whose fields the runner reads have their types (objects.py). A job or a pod
        of the wrong shape is refused; a warning event of the wrong shape only refines a
        pending reason, so it is left out, and so is anything `selector` does not select."""
        kind = self.conn.kind.name if collection == "job" else collection
        kept = []
        for item in items:
            found = objects.problem(kind, item)
            if found is None and selector and not objects.selected(item, *astuple(selector)):
                log.info("%s: ignoring %r, which the selector does not select", what,
                         item.get("metadata", {}).get("name"))  # fmt: skip
            elif found is None:
                kept.append(item)
            elif collection == "events":
                log.info("%s: ignoring an event whose %s", what, found)
            else:
                name = item.get("metadata", {}).get("name") if isinstance(item, dict) else None
                raise self.errors.garbage(what, f"a {kind} object {name!r:.60} whose {found}"[:300])
        return kept

    def watch_objects(
        self,
        collection: str,
        selector: Selector,
        resource_version: str,
        timeout_s: float,
        attempts: int | None = None,
    ) -> WatchStream:
        """The changes after `resource_version`, for timeout_s (the server ends the stream,
        and the deadline, watch_slack_s later, ends it if the server does not); bookmarks are
        asked for, so that a quiet watch still advances its version."""
        what = f"watch {collection}"
        fn, args = self._collection(collection)
        deadline = Deadline(timeout_s + self.limits.watch_slack_s)
        try:
            response: Any = self.call(
                what,
                fn,
                *args,
                label_selector=selector.label,
                field_selector=selector.field,
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=max(1, int(timeout_s)),
                _preload_content=False,
                attempts=attempts,
                deadline=deadline,
            )
        except BaseException:
            deadline.close()
            raise
        return WatchStream(
            response,
            what,
            self.host,
            lambda code, msg: self.error(what, code, msg),
            lambda obj: self.checked(collection, [obj], what, selector),
            deadline=deadline,
        )

    def _collection(self, collection: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        ns = self.conn.namespace
        if collection == "job":
            r = self.resource
            return self.custom.list_namespaced_custom_object, (r.group, r.version, ns, r.plural)
        if collection == "pods":
            return self.core.list_namespaced_pod, (ns,)
        if collection == "events":
            return self.core.list_namespaced_event, (ns,)
        raise ValueError(f"unknown collection {collection!r}; one of {COLLECTIONS}")

    # ---- logs ------------------------------------------------------------------------

    def open_log(
        self, pod: str, container: str, follow: bool, attempts: int | None = None
    ) -> Stream:
        """One container's log. Followed, the stream lasts until the container stops (its
        opening within call_deadline_s; then only a silence of FOLLOW_READ_TIMEOUT_S ends it);
        else it is read to its end within log_deadline_s, at most max_log_bytes of it."""
        what = f"read the log of pod {pod}"
        read_timeout_s = FOLLOW_READ_TIMEOUT_S if follow else self.request_timeout_s
        deadline = None if follow else Deadline(self.limits.log_deadline_s)
        try:
            response: Any = self.call(
                what,
                self.core.read_namespaced_pod_log,
                pod,
                self.conn.namespace,
                container=container,
                follow=follow,
                _preload_content=False,
                _request_timeout=(self.request_timeout_s, read_timeout_s),
                attempts=attempts,
                deadline=deadline,
            )
        except BaseException:
            if deadline is not None:
                deadline.close()
            raise
        max_bytes = None if follow else self.limits.max_log_bytes
        return Stream(response, what, self.host, deadline=deadline, max_bytes=max_bytes)

    def log_lines(self, pod: str, container: str) -> Iterator[str]:
        """The log so far, line by line, never all of it in memory; a connection dropped
        mid-read (or a log past max_log_bytes) gives what was read, with a warning."""
        read = LogRead(self.open_log(pod, container, follow=False))
        yield from read.lines()

    def read_log(self, pod: str, container: str) -> LogRead:
        """The log so far, to be read once through `lines()`; then whether it was whole."""
        return LogRead(self.open_log(pod, container, follow=False))

    # ---- the one place calls are made ------------------------------------------------

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
