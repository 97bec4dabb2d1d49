"""The fake API server's emulator (k8s_fake.py): kmock's in-memory API server plus resource
versions and the history of changes, injected faults, the API server's create defaults and
delete preconditions, and the two controllers the fake plays itself: Kubeflow Trainer's (a
TrainJob's JobSet) and the garbage collector's (what a deleted object owns). Its lists, watches
and pod logs are in k8s_streams.py.

RBAC is enforced for Deployments alone (the job controllers', in their own namespaces): a
request for one is answered as the real authorizer answers a user without a Role allowing it,
403 Forbidden with the API server's Status object and wording, before whether the object exists
is looked at (so a missing Deployment without the Role is a 403 too, and with it a 404). What
it differs in: only `get` of a granted (namespace, name) is allowed, as the runner's
resourceNames Role allows, never list or watch; every other request is allowed, as to an
admin (tests/runner/test_runner_role.py checks those against the runner's Role instead)."""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kmock

from contract.stack import RUNNER_IDENTITY
from tests.runner.k8s_streams import Change, WatchStreams

PODS = "v1/pods"
EVENTS = "v1/events"
SECRETS = "v1/secrets"
TRAINJOBS = "trainer.kubeflow.org/v1alpha1/trainjobs"
PYTORCHJOBS = "kubeflow.org/v1/pytorchjobs"
JOBSETS = "jobset.x-k8s.io/v1alpha2/jobsets"
DEPLOYMENTS = "apps/v1/deployments"
# Who the fake's RBAC answers as: the runner's identity in the jobs' namespace (contract/stack.py).
RBAC_USER = "system:serviceaccount:{namespace}:" + RUNNER_IDENTITY
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
JOB_RESOURCES = {"trainjob": TRAINJOBS, "pytorchjob": PYTORCHJOBS}
STATUS_CHANGES = (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE)


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int
    message: str
    watch: bool | None  # None: any request; True/False: only watches / only the others


class Emulator(WatchStreams, kmock.KubernetesEmulator):
    """kmock's emulator plus versions, watches, selectors, pod logs and injected faults."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.faults: list[Fault] = []
        self.pod_logs: dict[tuple[str, str], str] = {}  # (namespace, pod) -> current log
        self.ended_logs: set[tuple[str, str]] = set()  # containers that stopped: follows end
        self.after_log_read: Callable[[str], None] = lambda pod: None
        # A GET of (plural, name) answered with what `fn` makes of the object of that name: a
        # broken or hostile server, or proxy, serving another object than the one asked for.
        self.swapped: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self.now = "2030-01-01T00:00:00Z"  # creationTimestamp of what is created
        # A real cluster's versions start far from zero (etcd has a history before our objects),
        # and "0" means "any version" to a watch: start higher, so it never means that here.
        self.version = 1000
        self.history: list[Change] = []
        self.oldest_version = 0  # a watch from before this version is told 410 Gone
        self.drops = 0  # bumped to cut every open stream
        self.make_jobsets = True  # Kubeflow Trainer makes a TrainJob's JobSet at once
        # The Deployments (namespace, name) a Role lets the runner `get` (resourceNames).
        self.deployment_grants: set[tuple[str, str]] = set()
        self.user_namespace = "bench"  # the runner's account's, for the 403's wording
        self._tick = asyncio.Event()

    # ---- the history of changes --------------------------------------------------------

    def record(self, resource: Any, namespace: str, name: str, kind: str) -> None:
        """Give the object its next resource version and keep the change (under the lock)."""
        self.version += 1
        obj = self.objects[resource, namespace, name]
        if kind == "DELETED":
            raw = copy.deepcopy(obj.last.raw)
        else:
            obj.patch({"metadata": {"resourceVersion": str(self.version)}})
            raw = copy.deepcopy(obj.raw)
        raw.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        plural = kmock.resource(resource).plural if isinstance(resource, str) else resource.plural
        self.history.append(Change(self.version, plural, namespace, {"type": kind, "object": raw}))
        self.wake()

    def wake(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    async def _handle(self, request: Any) -> Any:
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            # What the API server adds to every object it creates.
            meta = request.data.setdefault("metadata", {})
            meta.setdefault("creationTimestamp", self.now)
            # Unique, as the API server's UUIDs are: a job made again under a name is another.
            meta.setdefault("uid", f"uid-{meta.get('name')}-{self.version + 1}")
        if request.action == kmock.action.DELETE:
            await self._check_preconditions(request)
        if request.resource is not None and request.resource.plural == "deployments":
            self._authorize_deployment(request)
        for fault in self.faults:
            is_watch = request.params.get("watch") == "true"
            if (
                fault.times
                and request.method.value.upper() == fault.method
                and fault.path.search(request.url.path)
                and fault.watch in (None, is_watch)
            ):
                fault.times -= 1
                raise kmock.KubernetesError(
                    status=fault.status, reason="Injected", message=fault.message, details={}
                )
        response = await super()._handle(request)
        if request.resource is not None and request.action in STATUS_CHANGES:
            name = request.name or (request.data or {}).get("metadata", {}).get("name")
            kind = {kmock.action.CREATE: "ADDED", kmock.action.DELETE: "DELETED"}
            async with self._lock:
                self.record(request.resource, request.namespace, name,
                            kind.get(request.action, "MODIFIED"))  # fmt: skip
                if request.action == kmock.action.DELETE:
                    self._collect_garbage(request.namespace, self.history[-1].event["object"])
                if request.resource.plural == "trainjobs":
                    self._trainer(request.action, request.namespace, name)
        return response

    def _authorize_deployment(self, request: Any) -> None:
        """The RBAC authorizer's answer to a Deployment request: allowed only for a `get` of a
        granted one; otherwise 403 as kube-apiserver words it (its Status: reason Forbidden,
        details naming the object and the resource, apps' group)."""
        name, namespace = request.name, request.namespace
        if request.action == kmock.action.FETCH and (namespace, name) in self.deployment_grants:
            return
        verb = {kmock.action.FETCH: "get", kmock.action.LIST: "list"}.get(request.action, "get")
        if request.params.get("watch") == "true":
            verb = "watch"
        user = RBAC_USER.format(namespace=self.user_namespace)
        what = f'deployments.apps "{name}"' if name else "deployments.apps"
        raise kmock.KubernetesError(
            status=403,
            reason="Forbidden",
            message=f'{what} is forbidden: User "{user}" cannot {verb} resource "deployments" '
            f'in API group "apps" in the namespace "{namespace}"',
            details={"name": name or "", "group": "apps", "kind": "deployments"},
        )

    def _trainer(self, action: Any, namespace: str, name: str) -> None:
        """Kubeflow Trainer's part (under the lock): a TrainJob created gets its JobSet, of the
        same name, owned by it; a TrainJob deleted takes its JobSet with it (garbage collection,
        at once here)."""
        if action == kmock.action.DELETE:
            self.remove_jobset(namespace, name)
        elif action == kmock.action.CREATE and self.make_jobsets:
            job = self.objects[TRAINJOBS, namespace, name].raw
            self.put_jobset(namespace, name, job["metadata"]["uid"])

    def _collect_garbage(self, namespace: str, owner: dict[str, Any]) -> None:
        """Kubernetes' garbage collector (kube-controller-manager), background propagation as
        the runner deletes: what names the deleted `owner`'s uid in its ownerReferences goes
        too (under the lock). The real one acts within seconds; this one at once, and only on
        objects of the owner's namespace (a namespaced owner has no dependents elsewhere)."""
        uid = (owner.get("metadata") or {}).get("uid")
        for (resource, ns, name), obj in list(self.objects.items()):
            if not uid or ns != namespace or obj.deleted:
                continue
            refs = (obj.raw.get("metadata") or {}).get("ownerReferences") or ()
            if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
                obj.delete()
                self.record(resource, ns, name, "DELETED")

    def put_jobset(self, namespace: str, name: str, owner_uid: str) -> str:
        """Make (or replace) the JobSet `name`, controlled by the TrainJob `owner_uid`; its
        uid (under the lock)."""
        self.version += 1
        uid = f"uid-jobset-{name}-{self.version}"
        owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "name": name, "uid": owner_uid, "controller": True}  # fmt: skip
        meta = {"name": name, "namespace": namespace, "uid": uid,
                "creationTimestamp": self.now, "ownerReferences": [owner]}  # fmt: skip
        jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta}
        self.objects[JOBSETS, namespace, name] = jobset
        self.record(JOBSETS, namespace, name, "ADDED")
        return uid

    def remove_jobset(self, namespace: str, name: str) -> None:
        obj = self.jobset(namespace, name)
        if obj is not None:
            self.objects[JOBSETS, namespace, name].delete()
            self.record(JOBSETS, namespace, name, "DELETED")

    def jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self.objects[JOBSETS, namespace, name]
        except KeyError:
            return None
        return None if obj.deleted else obj.raw

    async def _check_preconditions(self, request: Any) -> None:
        """A delete's `preconditions.uid`, as the API server checks it: 409 if it differs."""
        wanted = ((request.data or {}).get("preconditions") or {}).get("uid")
        if not wanted or request.resource is None:
            return
        async with self._lock:
            try:
                obj = self.objects[request.resource, request.namespace, request.name]
            except KeyError:
                return  # the delete answers 404 itself
            uid = None if obj.deleted else obj.raw.get("metadata", {}).get("uid")
        if uid is not None and uid != wanted:
            raise kmock.KubernetesError(
                status=409,
                reason="Conflict",
                message=f"Precondition failed: UID in precondition: {wanted}, UID in object "
                f"meta: {uid}",
                details={},
            )
