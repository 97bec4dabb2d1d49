"""A thin layer over the official kubernetes client: the calls the backend makes, with failures
turned into RunnerErrors that say what to do next, and bounded retries of transient ones.

What it is not: a general client. It knows the two job resources, pods, their logs and events.
Imported only by the kubernetes backend, never on the runner's start-up path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from runner.backends.kubernetes.connection import ClusterConnection, kubeconfig_file
from runner.errors import RunnerError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class JobResource:
    group: str
    version: str
    plural: str
    kind: str
    addon: str  # what the stack must install for this API to exist


JOB_RESOURCES = {
    "trainjob": JobResource(
        "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", "Kubeflow Trainer (v2)"
    ),
    "pytorchjob": JobResource(
        "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", "Kubeflow training-operator (v1)"
    ),
}
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class NotFound(RunnerError):
    """The object asked for does not exist (callers decide whether that is an error)."""


class NameConflict(RunnerError):
    """An object of that name exists already (409)."""


class KubeApi:
    """Clients for one cluster connection. close() removes the credentials written to disk."""

    def __init__(
        self,
        conn: ClusterConnection,
        max_attempts: int = 4,
        retry_backoff_s: float = 1.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.conn = conn
        self.resource = JOB_RESOURCES[conn.job_api]
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_s = request_timeout_s
        self._files = contextlib.ExitStack()
        # Callers that never close() still leave no credentials behind once this is collected.
        weakref.finalize(self, self._files.close)
        api_client = self._load(conn)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.host = api_client.configuration.host

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
        cfg.retries = 0  # we retry ourselves, a bounded number of times, with messages
        return client.ApiClient(cfg)

    def close(self) -> None:
        self._files.close()

    # ---- jobs ------------------------------------------------------------------------

    def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        r = self.resource
        name = manifest["metadata"]["name"]
        try:
            return self.call(
                f"create {r.kind} {name}",
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

    def get_job(self, name: str) -> dict[str, Any]:
        r = self.resource
        return self.call(
            f"get {r.kind} {name}",
            self.custom.get_namespaced_custom_object,
            r.group,
            r.version,
            self.conn.namespace,
            r.plural,
            name,
        )

    def delete_job(self, name: str) -> None:
        r = self.resource
        body = client.V1DeleteOptions(propagation_policy="Background")
        self.call(
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
            self.call(
                f"discover {r.group}/{r.version}", self.custom.get_api_resources, r.group, r.version
            )
        except NotFound:
            other = "pytorchjob" if self.conn.job_api == "trainjob" else "trainjob"
            return RunnerError(
                f"{self.conn.source} has no {r.kind} API ({r.group}/{r.version}): the "
                f"{r.addon} add-on is not installed; install the stack's add-ons (`pulumi up`) "
                f"or submit with --job-api {other} if the cluster has that one"
            )
        return RunnerError(
            f"namespace {self.conn.namespace!r} does not exist on {self.conn.source}; create it "
            f"(`kubectl create namespace {self.conn.namespace}`) or pick another context"
        )

    # ---- pods, logs, events ----------------------------------------------------------

    def list_pods(self, label_selector: str) -> list[dict[str, Any]]:
        result = self.call(
            "list pods",
            self.core.list_namespaced_pod,
            self.conn.namespace,
            label_selector=label_selector,
            _preload_content=False,
        )
        return json.loads(result.data).get("items", [])

    def list_warning_events(self) -> list[dict[str, Any]]:
        result = self.call(
            "list events",
            self.core.list_namespaced_event,
            self.conn.namespace,
            field_selector="type=Warning",
            _preload_content=False,
        )
        return json.loads(result.data).get("items", [])

    def pod_log(self, pod: str, container: str, follow: bool) -> Iterator[str]:
        """Lines of one container's log; with follow, until the container stops."""
        response = self.call(
            f"read the log of pod {pod}",
            self.core.read_namespaced_pod_log,
            pod,
            self.conn.namespace,
            container=container,
            follow=follow,
            _preload_content=False,
            _request_timeout=None if follow else self.request_timeout_s,
        )
        try:
            pending = b""
            for chunk in response.stream(64 * 1024, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace").rstrip("\r")
            if pending:
                yield pending.decode("utf-8", errors="replace")
        except (urllib3.exceptions.HTTPError, OSError) as err:
            # A dropped stream is not an error for a follower: it looks again and resumes.
            log.debug("log stream of %s ended: %s", pod, err)
        finally:
            response.release_conn()

    # ---- the one place calls are made ------------------------------------------------

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs), retried on 429/5xx and connection errors with exponential
        backoff, at most max_attempts times; every failure becomes a RunnerError."""
        kwargs.setdefault("_request_timeout", self.request_timeout_s)
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn(*args, **kwargs)
            except ApiException as err:
                if err.status not in RETRIED_STATUSES or attempt == self.max_attempts:
                    raise self._api_error(what, err, attempt) from None
                reason = f"HTTP {err.status}"
            except (urllib3.exceptions.HTTPError, OSError) as err:
                if attempt == self.max_attempts:
                    raise self._unreachable(what, err) from None
                reason = type(err).__name__
            delay_s = self.retry_backoff_s * 2 ** (attempt - 1)
            log.info(
                "%s: %s, retrying in %.1f s (%d/%d)",
                what,
                reason,
                delay_s,
                attempt,
                self.max_attempts,
            )
            time.sleep(delay_s)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _api_error(self, what: str, err: ApiException, attempts: int) -> RunnerError:
        message = _status_message(err)
        ns = self.conn.namespace
        if err.status == 404:
            return NotFound(f"cannot {what}: not found ({message})")
        if err.status == 409:
            return NameConflict(f"cannot {what}: {message}")
        if err.status == 401:
            return RunnerError(
                f"cannot {what}: the API server at {self.host} rejected the credentials "
                f"({message}); refresh the kubeconfig of {self.conn.source}"
            )
        if err.status == 403:
            return RunnerError(
                f"cannot {what} in namespace {ns}: forbidden by RBAC ({message}); ask the "
                f"cluster admin for the permission; `kubectl auth can-i --list -n {ns}` shows "
                "what you may do"
            )
        if err.status in RETRIED_STATUSES:
            return RunnerError(
                f"cannot {what}: the API server answered HTTP {err.status} {attempts} times "
                f"({message}); it may be overloaded or upgrading, try again in a few minutes "
                f"(`kubectl get --raw /readyz` shows its health)"
            )
        return RunnerError(f"cannot {what}: HTTP {err.status} ({message})")

    def _unreachable(self, what: str, err: Exception) -> RunnerError:
        hint = (
            f"`pulumi stack output --stack {self.conn.stack}` and `pulumi up` if it is down"
            if self.conn.stack
            else "`kubectl cluster-info` with the same kubeconfig and context"
        )
        return RunnerError(
            f"cannot {what}: the Kubernetes API server at {self.host} is unreachable "
            f"({type(err).__name__}) after {self.max_attempts} attempts; check the cluster is "
            f"up and reachable: {hint}"
        )


def _status_message(err: ApiException) -> str:
    try:
        return json.loads(err.body).get("message") or err.reason
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)
