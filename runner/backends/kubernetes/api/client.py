"""A thin layer over the official kubernetes client: the calls the backend makes, with bounded
retries of transient failures, and every failure turned into a one-line RunnerError that names
the cluster and what to do next (calls.py makes the calls; apierrors.py words the errors).

Collections (the job, its pods, the namespace's warning events) are listed, and watched from a
list's resourceVersion (streams.py reads the watch); every object that comes in, listed, got or
watched, has the types of the fields the runner reads checked first (objects.py). What it is
not: a general client, nor the policy of following a job (follow/). Imported only by the
kubernetes backend, never on the runner's start-up path.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from contract import files
from runner.backends.kubernetes.api import objects
from runner.backends.kubernetes.api.apierrors import ApiErrors, NameConflict, NotFound
from runner.backends.kubernetes.api.calls import ApiCalls
from runner.backends.kubernetes.api.deadline import Deadline, install
from runner.backends.kubernetes.api.limits import ApiLimits
from runner.backends.kubernetes.api.streams import LogRead, Stream, WatchStream
from runner.backends.kubernetes.connection import ClusterConnection, kubeconfig_file
from runner.backends.kubernetes.jobapis import JOBSET, JobResource
from runner.errors import RunnerError

log = logging.getLogger(__name__)


# A followed log may be quiet for a while (a long evaluation); after this long without a line,
# the follower reconnects and skips what it has seen.
FOLLOW_READ_TIMEOUT_S = 600.0
COLLECTIONS = ("job", "pods", "events")
MAX_UID_CHARS = 128  # a uid is a UUID (36); more is garbage, not to be written into job.json
# A read that only informs a record (the job controller's version) waits at most this long.
OPTIONAL_READ_DEADLINE_S = 10.0


@dataclass(frozen=True)
class Selector:
    """Which objects of a collection: `label` and `field` selectors as the API takes them."""

    label: str | None = None
    field: str | None = None


class KubeApi(ApiCalls):
    """Clients for one cluster connection. close() closes their connections and removes the
    credentials written to disk."""

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
        # Its connection pool's sockets: closed with the credentials, not left to the collector.
        self._files.callback(api_client.close)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.apps = client.AppsV1Api(api_client)
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

    def get_deployment(self, namespace: str, name: str) -> Any:
        """The Deployment `name` in `namespace` (the job controller's, not the jobs'), as the
        server's JSON, asked once and within OPTIONAL_READ_DEADLINE_S: it is only recorded
        (controller.py checks its fields), so it may not hold a submit up for long."""
        what = f"get Deployment {namespace}/{name}"
        get = self.apps.read_namespaced_deployment
        deadline = Deadline(min(self.limits.call_deadline_s, OPTIONAL_READ_DEADLINE_S))
        try:
            body = self.answer(what, get, name, namespace, attempts=1, deadline=deadline)
        finally:
            deadline.close()
        return self.errors.json(body, what)

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
