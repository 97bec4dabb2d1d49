"""A fake Kubernetes API server for the backend's tests: kmock's emulator (an in-memory API
server speaking real HTTP) on its own thread, with what kmock does not do itself and the backend
relies on: resource versions and watches that resume from one (with 410 Gone once a version is
compacted away, server-side timeouts and bookmarks), label and field selectors, pod logs (followed
too), injected failures (403, 409, 500, ...), and connections dropped mid-stream.

The test plays the controllers: it adds pods and sets job conditions the way the Kubeflow
operators and the kubelet would. The fake plays one itself: Kubeflow Trainer's, which makes a
JobSet (owned by the TrainJob) as a TrainJob is created and removes it with the job, and JobSet's
labelling of the pods (add_pod gives a pod that names a JobSet that JobSet's uid); and the garbage
collector's, which deletes what a deleted object owns (a run's Secret, owned by its job). The
backend under test talks to it with the official client.
Every change, through HTTP or through these helpers, gets the next resource version and is kept
in a history that watches replay from the version they ask for, as the real API server's watch
cache does.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import kmock

PODS = "v1/pods"
EVENTS = "v1/events"
SECRETS = "v1/secrets"
TRAINJOBS = "trainer.kubeflow.org/v1alpha1/trainjobs"
PYTORCHJOBS = "kubeflow.org/v1/pytorchjobs"
JOBSETS = "jobset.x-k8s.io/v1alpha2/jobsets"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
JOB_RESOURCES = {"trainjob": TRAINJOBS, "pytorchjob": PYTORCHJOBS}
LOG_CHUNK_BYTES = 16 * 1024  # a kubelet flushes a streamed log in pieces of about this size
STATUS_CHANGES = (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE)


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int
    message: str
    watch: bool | None  # None: any request; True/False: only watches / only the others


@dataclass(frozen=True)
class Change:
    """One entry of the watch history: what changed, at which resource version."""

    version: int
    plural: str
    namespace: str
    event: dict[str, Any]  # {"type": ADDED/MODIFIED/DELETED, "object": ...}


class _Emulator(kmock.KubernetesEmulator):
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

    # ---- list and watch ----------------------------------------------------------------

    async def _serve_list(self, request: Any) -> Any:
        if not any(resource == request.resource for resource in self._get_resources()):
            raise kmock.KubernetesError(status=404, reason="NotFound", message="no such resource")
        async with self._lock:
            items = [
                copy.deepcopy(obj.raw)
                for (resource, namespace, _), obj in self.objects.items()
                if resource.plural == request.resource.plural
                and namespace == request.namespace
                and not obj.deleted
                and _selected(obj.raw, request.params)
            ]
            return {"metadata": {"resourceVersion": str(self.version)}, "items": items}

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        yield b""  # the headers go now, even if nothing happens for a while
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(request.params.get("timeoutSeconds") or 3600)
        drops = self.drops
        since = request.params.get("resourceVersion") or "0"
        cursor = int(since)
        if cursor < self.oldest_version:
            yield _status_event(410, "Expired", f"too old resource version: {cursor}")
            return
        if cursor == 0:  # "any version": the current objects first, as ADDED
            listed = await self._serve_list(request)
            for item in listed["items"]:
                yield {"type": "ADDED", "object": item}
            cursor = int(listed["metadata"]["resourceVersion"])
        while True:
            tick = self._tick
            if self.drops != drops:
                # Cut mid-line, as a dying proxy or a node failure would; what changed since
                # is left for the next watch to replay.
                yield b'{"type": "MODIFIED", "object": {"metad'
                request._raw_request.transport.abort()
                return
            for change in [c for c in self.history if c.version > cursor]:
                cursor = change.version
                if self._watched(change, request):
                    yield change.event
            remaining = deadline - loop.time()
            if remaining <= 0:
                if request.params.get("allowWatchBookmarks") == "true":
                    meta = {"resourceVersion": str(cursor)}
                    yield {"type": "BOOKMARK", "object": {"metadata": meta}}
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tick.wait(), remaining)

    def _watched(self, change: Change, request: Any) -> bool:
        return (
            change.plural == request.resource.plural
            and change.namespace == request.namespace
            # A bookmark is for every watch of the collection, whatever it selects.
            and (
                change.event["type"] == "BOOKMARK"
                or _selected(change.event["object"], request.params)
            )
        )

    # ---- pod logs ------------------------------------------------------------------------

    async def _serve_fetch(self, request: Any) -> Any:
        if request.subresource == "log":
            key = (request.namespace, request.name)
            if key not in self.pod_logs:
                raise kmock.KubernetesObjectNotFoundError()
            self.after_log_read(request.name)
            if request.params.get("follow") == "true":
                return self._follow_log(request, key)
            return _chunks(self.pod_logs[key].encode())
        served = await super()._serve_fetch(request)
        swap = self.swapped.get((request.resource.plural, request.name))
        return served if swap is None else swap(copy.deepcopy(served))

    async def _follow_log(self, request: Any, key: tuple[str, str]) -> AsyncIterator[bytes]:
        """The log so far, then what is appended, until the container stops."""
        sent, text, drops = 0, self.pod_logs.get(key, ""), self.drops
        yield b""
        while True:
            tick = self._tick
            current = self.pod_logs.get(key, "")
            if not current.startswith(text[:sent]):
                return  # replaced: a new container; this stream was the old one's
            if len(current) > sent:
                async for chunk in _chunks(current[sent:].encode()):
                    yield chunk
                sent, text = len(current), current
            if key in self.ended_logs or key not in self.pod_logs:
                return
            if self.drops != drops:
                request._raw_request.transport.abort()
                return
            await tick.wait()


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    """`data` in pieces of at most LOG_CHUNK_BYTES, as a kubelet streams a log: a long line
    reaches the client in many reads, never in one."""
    yield b""
    for start in range(0, len(data), LOG_CHUNK_BYTES):
        yield data[start : start + LOG_CHUNK_BYTES]


def _status_event(code: int, reason: str, message: str) -> dict[str, Any]:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": message, "reason": reason, "code": code}  # fmt: skip
    return {"type": "ERROR", "object": status}


def _selected(obj: dict[str, Any], params: Any) -> bool:
    """labelSelector (k=v,...) and fieldSelector (dotted.path=v,...) equality terms."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for key, value in _terms(params.get("labelSelector", "")):
        if labels.get(key) != value:
            return False
    for path, value in _terms(params.get("fieldSelector", "")):
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node != value:
            return False
    return True


def _terms(text: str) -> list[tuple[str, str]]:
    pairs = (part.split("=", 1) for part in text.split(",") if "=" in part)
    return [(k.strip(), v.strip()) for k, v in pairs]


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

    async def _start(self) -> tuple[_Emulator, kmock.Server]:
        emulator = _Emulator()
        # Listing needs them declared, even when empty (the CRDs are installed).
        apis = (JOB_RESOURCES[api] for api in self._installed)
        for resource in (
            PODS,
            EVENTS,
            SECRETS,
            *apis,
            *([JOBSETS] if "trainjob" in self._installed else []),
        ):
            emulator.resources[resource] = {}
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
