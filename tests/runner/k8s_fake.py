"""A fake Kubernetes API server for the backend's tests: kmock's emulator (an in-memory API
server speaking real HTTP) on its own thread, with what kmock does not do itself and the backend
relies on: resource versions and watches that resume from one (with 410 Gone once a version is
compacted away, server-side timeouts and bookmarks), label and field selectors, pod logs (followed
too), injected failures (403, 409, 500, ...), and connections dropped mid-stream.

The test plays the controllers: it adds pods and sets job conditions the way the Kubeflow
operators and the kubelet would. The fake plays one itself: Kubeflow Trainer's, which makes a
JobSet (owned by the TrainJob) as a TrainJob is created and removes it with the job, and JobSet's
labelling of the pods (add_pod gives a pod that names a JobSet that JobSet's uid); and the garbage
collector's, which deletes what a deleted object owns (a run's Secret, owned by its job). It
holds each installed job API's controller Deployment where the stack's add-ons put it
(contract/stack.py JOB_CONTROLLERS), with the upstream image of the version the stack pins, and
answers a Deployment request as RBAC does: allowed only where the runner's controller Role
grants it (forbid_deployments: an identity without that Role; k8s_emulator.py says how the
fake's RBAC differs from the real one). The backend under test talks to it with the official
client.
Every change, through HTTP or through these helpers, gets the next resource version and is kept
in a history that watches replay from the version they ask for, as the real API server's watch
cache does.

This module is the handle the tests drive (FakeCluster); the emulator it serves, with its faults
and controllers, is k8s_emulator.py, and the emulator's lists, watches and pod logs are
k8s_streams.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
from typing import Any

import kmock

from contract.stack import JOB_CONTROLLERS
from tests.runner.k8s_emulator import (
    DEPLOYMENTS,
    EVENTS,
    JOB_RESOURCES,
    JOBSET_NAME,
    JOBSET_UID,
    JOBSETS,
    PODS,
    SECRETS,
    Emulator,
    Fault,
)
from tests.runner.k8s_streams import Change

# The controllers' images as the stack's pinned add-ons deploy them: the Trainer 2.3.0 chart's
# default (values.yaml image, tag v + the chart's version), and training-operator v1.9.4's
# standalone overlay's (its kustomization pins the image to a commit's tag, not the version).
CONTROLLER_IMAGES = {
    "trainjob": "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",
    "pytorchjob": "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
}


class FakeCluster:
    """The emulator serving on 127.0.0.1 from a background event loop."""

    def __init__(
        self, namespace: str = "bench", installed: tuple[str, ...] = ("trainjob", "pytorchjob")
    ) -> None:
        """`installed`: the job APIs whose CRDs the cluster has."""
        self.namespace = namespace
        self._installed = installed
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.emulator, self._server = self._run(self._start())
        self.url = f"http://{self._server.host}:{self._server.port}"

    async def _start(self) -> tuple[Emulator, kmock.Server]:
        emulator = Emulator()
        # Listing needs them declared, even when empty (the CRDs are installed).
        apis = (JOB_RESOURCES[api] for api in self._installed)
        for resource in (
            PODS,
            EVENTS,
            SECRETS,
            *apis,
            *([JOBSETS] if "trainjob" in self._installed else []),
            DEPLOYMENTS,
        ):
            emulator.resources[resource] = {}
        emulator.user_namespace = self.namespace
        for api in self._installed:  # the stack's add-ons, and the Role that reads them
            controller = JOB_CONTROLLERS[api]  # type: ignore[index]
            emulator.objects[DEPLOYMENTS, controller.namespace, controller.deployment] = (
                controller_deployment(api, CONTROLLER_IMAGES[api])
            )
            emulator.deployment_grants.add((controller.namespace, controller.deployment))
        await emulator.__aenter__()
        server = kmock.Server(emulator)
        await server.__aenter__()
        return emulator, server

    def close(self) -> None:
        async def stop() -> None:
            self.emulator.drops += 1  # open streams end, so the server can stop
            self.emulator.wake()
            await self._server.__aexit__(None, None, None)
            await self.emulator.__aexit__(None, None, None)

        self._run(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():  # its self-pipe sockets, else a ResourceWarning at GC
            self._loop.close()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def _mutate(self, fn: Callable[[], Any]) -> Any:
        async def locked() -> Any:
            async with self.emulator._lock:
                return fn()

        return self._run(locked())

    # ---- what the tests use ------------------------------------------------------------

    def kubeconfig(self) -> str:
        return json.dumps({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "not-a-secret"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "tester",
                                             "namespace": self.namespace}}
            ],
            "current-context": "fake",
        })  # fmt: skip

    def job(self, job_api: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self.emulator.objects[JOB_RESOURCES[job_api], self.namespace, name]
        except KeyError:
            return None
        return None if obj.deleted else obj.raw

    def set_job_condition(self, job_api: str, name: str, kind: str, message: str = "") -> None:
        condition = {"type": kind, "status": "True", "message": message,
                     "lastTransitionTime": "2030-01-01T00:10:00Z"}  # fmt: skip
        self.patch_job(job_api, name, {"status": {"conditions": [condition]}})

    def patch_job(self, job_api: str, name: str, patch: dict[str, Any]) -> None:
        """Merge `patch` into the job, as a controller (or anything else) writing it would."""

        def apply() -> None:
            resource = JOB_RESOURCES[job_api]
            self.emulator.objects[resource, self.namespace, name].patch(patch)
            self.emulator.record(resource, self.namespace, name, "MODIFIED")

        self._mutate(apply)

    def secret(self, name: str) -> dict[str, Any] | None:
        """The Secret `name` as created; None if there is none (or it was deleted)."""
        try:
            obj = self.emulator.objects[SECRETS, self.namespace, name]
        except KeyError:
            return None
        return None if obj.deleted else obj.raw

    def jobset(self, name: str) -> dict[str, Any] | None:
        """The JobSet `name` (a TrainJob's), as Kubeflow Trainer made it; None if there is none."""
        return self._mutate(lambda: self.emulator.jobset(self.namespace, name))

    def put_jobset(self, name: str, owner_uid: str) -> str:
        """Make (or replace) the JobSet `name`, controlled by the TrainJob `owner_uid`; its uid."""
        return self._mutate(lambda: self.emulator.put_jobset(self.namespace, name, owner_uid))

    def remove_jobset(self, name: str) -> None:
        self._mutate(lambda: self.emulator.remove_jobset(self.namespace, name))

    def swap(self, job_api: str, name: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Answer a GET of the job `name` with `fn(the job)` instead (a server or proxy that
        serves another object than the one asked for)."""
        plural = JOB_RESOURCES[job_api].rsplit("/", 1)[-1]
        self._mutate(lambda: self.emulator.swapped.__setitem__((plural, name), fn))

    def add_pod(self, pod: dict[str, Any], log: str | None = None, watched: bool = True) -> None:
        """Create or replace a pod (a replacement is a MODIFIED change). A pod that has
        stopped (Succeeded, Failed) has a complete log: following it ends. `watched=False`:
        the API server has the change but no watch has delivered it yet (a lagging watch). A
        pod labelled with a JobSet's name and no uid gets that JobSet's uid, as JobSet labels
        the pods it makes."""
        name = pod["metadata"]["name"]
        pod["metadata"].setdefault("namespace", self.namespace)
        pod["metadata"].setdefault("uid", f"uid-{name}")
        key = (self.namespace, name)

        def apply() -> None:
            labels = pod["metadata"].get("labels") or {}
            jobset = self.emulator.jobset(self.namespace, str(labels.get(JOBSET_NAME)))
            if jobset is not None:
                labels.setdefault(JOBSET_UID, jobset["metadata"]["uid"])
            objects = self.emulator.objects
            try:
                existed = not objects[PODS, self.namespace, name].deleted
            except KeyError:
                existed = False
            objects[PODS, self.namespace, name] = pod
            if log is not None:
                self.emulator.pod_logs[key] = log
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                self.emulator.ended_logs.add(key)
            else:
                self.emulator.ended_logs.discard(key)
            if watched:
                self.emulator.record(PODS, self.namespace, name, "MODIFIED" if existed else "ADDED")
            else:
                self.emulator.wake()  # log followers still see the log change

        self._mutate(apply)

    def append_log(self, pod_name: str, text: str) -> None:
        def apply() -> None:
            key = (self.namespace, pod_name)
            self.emulator.pod_logs[key] = self.emulator.pod_logs.get(key, "") + text
            self.emulator.wake()

        self._mutate(apply)

    def end_log(self, pod_name: str) -> None:
        """The container stopped: followers of its log reach the end."""

        def apply() -> None:
            self.emulator.ended_logs.add((self.namespace, pod_name))
            self.emulator.wake()

        self._mutate(apply)

    def remove_pods(self) -> None:
        def apply() -> None:
            for (resource, namespace, name), obj in list(self.emulator.objects.items()):
                if resource.plural == "pods" and not obj.deleted:
                    obj.delete()
                    self.emulator.record(resource, namespace, name, "DELETED")
            self.emulator.pod_logs.clear()

        self._mutate(apply)

    def add_event(self, event: dict[str, Any]) -> None:
        name = event["metadata"]["name"]

        def apply() -> None:
            self.emulator.objects[EVENTS, self.namespace, name] = event
            self.emulator.record(EVENTS, self.namespace, name, "ADDED")

        self._mutate(apply)

    def send_watch_event(self, plural: str, event: dict[str, Any]) -> None:
        """Send `event` as it is, garbage included, to the watches of `plural` ("pods", ...)."""

        def apply() -> None:
            self.emulator.version += 1
            change = Change(self.emulator.version, plural, self.namespace, event)
            self.emulator.history.append(change)
            self.emulator.wake()

        self._mutate(apply)

    def compact(self) -> None:
        """Forget the history so far (as etcd compaction does): a watch resuming from any
        version seen until now is answered 410 Gone and must list again."""

        def apply() -> None:
            self.emulator.oldest_version = self.emulator.version + 1
            self.emulator.history.clear()

        self._mutate(apply)

    def drop_connections(self) -> None:
        """Cut every open watch and log stream, mid-line."""

        def apply() -> None:
            self.emulator.drops += 1
            self.emulator.wake()

        self._mutate(apply)

    def put_deployment(self, deployment: dict[str, Any], at: tuple[str, str] | None = None) -> None:
        """Make (or replace) a Deployment where its metadata says, or serve it at `at`
        (namespace, name): a broken server or proxy answering with another object."""
        meta = deployment["metadata"]
        namespace, name = at or (meta["namespace"], meta["name"])

        def apply() -> None:
            self.emulator.objects[DEPLOYMENTS, namespace, name] = deployment

        self._mutate(apply)

    def remove_deployment(self, namespace: str, name: str) -> None:
        self._mutate(lambda: self.emulator.objects[DEPLOYMENTS, namespace, name].delete())

    def forbid_deployments(self) -> None:
        """No Role lets the runner read a Deployment (an identity made before stacks granted
        it, or a cluster's own user without the permission): every such request is a 403."""
        self._mutate(self.emulator.deployment_grants.clear)

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        times: int = 1,
        message: str = "",
        watch: bool | None = None,
    ) -> None:
        fault = Fault(
            method.upper(), re.compile(path), status, times, message or f"HTTP {status}", watch
        )
        self._mutate(lambda: self.emulator.faults.append(fault))

    def requests(self, method: str = "", path: str = "", watch: bool | None = None) -> int:
        """How many requests matched: the method (any if empty), a regex on the path, and
        whether they were watches (None: either)."""
        pattern = re.compile(path)
        return sum(
            1
            for r in list(self.emulator._requests)
            if (not method or r.method.value.upper() == method.upper())
            and pattern.search(r.url.path)
            and watch in (None, r.params.get("watch") == "true")
        )


def controller_deployment(
    job_api: str, image: Any, containers: list[Any] | None = None
) -> dict[str, Any]:
    """The job controller's Deployment as its manifests make it (the fields the runner reads):
    its manager container running `image`, unless `containers` says otherwise."""
    controller = JOB_CONTROLLERS[job_api]  # type: ignore[index]
    if containers is None:
        containers = [{"name": controller.container, "image": image}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": controller.deployment, "namespace": controller.namespace,
                     "uid": f"uid-{controller.deployment}"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": containers}}},
    }  # fmt: skip
