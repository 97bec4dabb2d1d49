"""The runner's Roles (contract.stack.runner_role_rules in the jobs' namespace, and
controller_role_rules in the job controller's, which the stack grants its identity) against
what the runner really asks of a cluster: every command (submit, status, follow,
logs, fetch, cancel, the pending timeout) is run against the fake API server for both job APIs,
each HTTP request it made is turned into the RBAC attributes the API server authorizes
(verb, API group, resource, subresource, namespace, name; Kubernetes' request-info rules), and
the test checks that the Roles allow every one of them and hold no rule that none of them used.

The fake (tests/runner/k8s_fake.py) mirrors the real server's paths and verbs; it enforces RBAC
for Deployments only, so what is checked is the requests, against the Roles' rules, here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from contract.rundir import JobState
from contract.stack import JOB_CONTROLLERS, controller_role_rules, runner_role_rules
from runner.job.spec import JobSpec
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit
from tests.runner.k8s_runlogs import SUCCESS, UNSCHEDULABLE, run_pods

pytestmark = pytest.mark.timeout(60)
APIS = ["trainjob", "pytorchjob"]
NAMESPACE = "bench"


@dataclass(frozen=True)
class Attributes:
    """What the API server authorizes for one request (k8s.io/apiserver request-info)."""

    verb: str
    group: str
    resource: str  # "pods/log" for a subresource
    namespace: str
    name: str = ""  # of a request for one object (what resourceNames restricts)


def attributes(method: str, path: str, params: dict[str, str]) -> Attributes | None:
    """The request's RBAC attributes; None for a non-resource request (API discovery)."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":  # the core group: /api/v1/...
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:  # /apis/GROUP/VERSION/...
        group, rest = parts[1], parts[3:]
    else:
        return None  # /apis/GROUP/VERSION: discovery, system:discovery allows it to everyone
    assert rest[0] == "namespaces", f"a request outside a namespace: {method} {path}"
    namespace, resource, named = rest[1], rest[2], rest[3:]
    if len(named) > 1:
        resource = f"{resource}/{named[1]}"
    if method == "GET":
        verb = "watch" if params.get("watch") in ("true", "1") else "get" if named else "list"
    else:
        verb = {"POST": "create", "DELETE": "delete" if named else "deletecollection",
                "PUT": "update", "PATCH": "patch"}[method]  # fmt: skip
    return Attributes(verb, group, resource, namespace, named[0] if named else "")


def recorded(cluster: FakeCluster) -> set[Attributes]:
    found = set()
    for request in list(cluster.emulator._requests):
        params = {k: str(v).lower() for k, v in dict(request.params).items()}
        attrs = attributes(request.method.value.upper(), request.url.path, params)
        if attrs is not None:
            found.add(attrs)
    return found


def roles(job_api: str) -> dict[str, tuple[dict[str, tuple[str, ...]], ...]]:
    """The runner's Roles' rules, by the namespace each Role is in."""
    return {
        NAMESPACE: runner_role_rules(job_api),  # type: ignore[arg-type]
        JOB_CONTROLLERS[job_api].namespace: controller_role_rules(job_api),  # type: ignore[index,arg-type]
    }


def allowed(attrs: Attributes, job_api: str) -> bool:
    return any(
        attrs.group in rule["apiGroups"]
        and attrs.resource in rule["resources"]
        and attrs.verb in rule["verbs"]
        and ("resourceNames" not in rule or attrs.name in rule["resourceNames"])
        for rule in roles(job_api).get(attrs.namespace, ())
    )


def granted(job_api: str) -> set[tuple[str, str, str, str]]:
    return {
        (namespace, verb, group, resource)
        for namespace, rules in roles(job_api).items()
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _spec(run_id: str) -> JobSpec:
    return JobSpec.from_dict({**make_spec().to_dict(), "run_id": run_id})


def _every_command(cluster: FakeCluster, root: Path, job_api: str) -> None:
    """Each command the runner has, as runner.api drives the backend."""
    # submit, then follow (a watch on a thread, events between), to the end; logs; fetch.
    backend = make_backend(cluster, root, job_api)
    handle, run_dir = submit(backend, root, make_spec())
    statuses: list[JobState] = []
    follower = threading.Thread(
        target=lambda: statuses.extend(s.state for s in backend.watch(handle)), daemon=True
    )
    follower.start()
    events = backend.events(handle)
    next(events)
    assert backend.status(handle).state is JobState.PENDING
    run_pods(cluster, job_api)
    next(events)
    assert list(backend.logs(handle, 1, follow=False))
    run_pods(cluster, job_api, phase="Succeeded")
    cluster.end_log(f"{RUN_ID}-node-0-0-x0" if job_api == "trainjob" else f"{RUN_ID}-master-0")
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    follower.join(timeout=20)
    assert statuses and statuses[-1] is JobState.SUCCEEDED
    assert list(backend.logs(handle, 0, follow=True))
    assert backend.fetch(handle, run_dir) == []
    backend.close()
    # cancel a running job, then again (idempotent).
    backend = make_backend(cluster, root, job_api)
    handle, _ = submit(backend, root, _spec("cancelled-run"))
    backend.cancel(handle)
    backend.cancel(handle)
    backend.close()
    # a job pending past --pending-timeout is deleted.
    clock = lambda: datetime.fromisoformat("2030-01-01T00:11:40+00:00")  # noqa: E731
    backend = make_backend(cluster, root, job_api, pending_timeout_s=600, clock=clock)
    handle, _ = submit(backend, root, _spec("pending-run"))
    conditions = [{"type": "PodScheduled", "status": "False", "message": UNSCHEDULABLE}]
    cluster.add_pod(pod(job_api, "pending-run", 0, "Pending", conditions=conditions))
    assert backend.status(handle).state is JobState.CANCELLED
    backend.close()


@pytest.fixture(scope="module", params=APIS)
def calls(request, tmp_path_factory) -> Iterator[tuple[str, set[Attributes]]]:
    cluster = FakeCluster(namespace=NAMESPACE)
    try:
        _every_command(cluster, tmp_path_factory.mktemp(request.param), request.param)
        yield request.param, recorded(cluster)
    finally:
        cluster.close()


def test_the_role_allows_every_request_of_every_command(calls):
    job_api, found = calls
    refused = sorted(str(a) for a in found if not allowed(a, job_api))
    assert not refused, f"the runner's Role refuses what the runner asks: {refused}"


def test_the_role_grants_nothing_the_runner_does_not_ask(calls):
    job_api, found = calls
    used = {(a.namespace, a.verb, a.group, a.resource) for a in found}
    assert granted(job_api) - used == set()


def test_request_attributes_follow_the_api_servers_rules():
    """The mapping itself, on the paths the real server sees (request-info)."""
    pods = "/api/v1/namespaces/bench/pods"
    assert attributes("GET", pods, {}) == Attributes("list", "", "pods", "bench")
    assert attributes("GET", pods, {"watch": "true"}).verb == "watch"  # type: ignore[union-attr]
    assert attributes("GET", pods + "/p/log", {}) == Attributes("get", "", "pods/log", "bench", "p")
    jobs = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/bench/trainjobs"
    assert attributes("POST", jobs, {}) == Attributes("create", "trainer.kubeflow.org",
                                                      "trainjobs", "bench")  # fmt: skip
    assert attributes("DELETE", jobs + "/j", {}).verb == "delete"  # type: ignore[union-attr]
    assert attributes("GET", "/apis/trainer.kubeflow.org/v1alpha1", {}) is None
    assert not allowed(Attributes("get", "", "secrets", "bench"), "trainjob")
    assert not allowed(Attributes("list", "", "pods", "kube-system"), "trainjob")
    # The controller's namespace: its one Deployment, by name, and only get.
    controller = JOB_CONTROLLERS["trainjob"]
    one = Attributes("get", "apps", "deployments", controller.namespace, controller.deployment)
    assert allowed(one, "trainjob")
    assert not allowed(Attributes("get", "apps", "deployments", controller.namespace, "x"),
                       "trainjob")  # fmt: skip
    assert not allowed(Attributes("list", "apps", "deployments", controller.namespace),
                       "trainjob")  # fmt: skip
    assert not allowed(Attributes("get", "apps", "deployments", NAMESPACE,
                                  controller.deployment), "trainjob")  # fmt: skip
    deployment = (
        f"/apis/apps/v1/namespaces/{controller.namespace}/deployments/{controller.deployment}"
    )
    assert attributes("GET", deployment, {}) == one
