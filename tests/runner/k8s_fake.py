"""A fake Kubernetes API server for the backend's tests: kmock's emulator (an in-memory API
server speaking real HTTP) on its own thread, with the few things kmock does not do itself:
label selectors on lists, pod logs, and injected failures (403, 409, 500, ...).

The test plays the controllers: it adds pods and sets job conditions the way the Kubeflow
operators and the kubelet would. The backend under test talks to it with the official client.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kmock

PODS = "v1/pods"
EVENTS = "v1/events"
TRAINJOBS = "trainer.kubeflow.org/v1alpha1/trainjobs"
PYTORCHJOBS = "kubeflow.org/v1/pytorchjobs"
JOB_RESOURCES = {"trainjob": TRAINJOBS, "pytorchjob": PYTORCHJOBS}


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int
    message: str


class _Emulator(kmock.KubernetesEmulator):
    """kmock's emulator plus label selectors, pod logs and injected faults."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.faults: list[Fault] = []
        self.pod_logs: dict[tuple[str, str], str] = {}  # (namespace, pod) -> current log
        self.after_log_read: Callable[[str], None] = lambda pod: None
        self.now = "2030-01-01T00:00:00Z"  # creationTimestamp of what is created

    async def _handle(self, request: Any) -> Any:
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            # What the API server adds to every object it creates.
            meta = request.data.setdefault("metadata", {})
            meta.setdefault("creationTimestamp", self.now)
            meta.setdefault("uid", f"uid-{meta.get('name')}")
        for fault in self.faults:
            if (
                fault.times
                and request.method.value.upper() == fault.method
                and (fault.path.search(request.url.path))
            ):
                fault.times -= 1
                raise kmock.KubernetesError(
                    status=fault.status, reason="Injected", message=fault.message, details={}
                )
        return await super()._handle(request)

    async def _serve_fetch(self, request: Any) -> Any:
        if request.subresource == "log":
            text = self.pod_logs.get((request.namespace, request.name))
            if text is None:
                raise kmock.KubernetesObjectNotFoundError()
            self.after_log_read(request.name)
            return text.encode()
        return await super()._serve_fetch(request)

    async def _serve_list(self, request: Any) -> Any:
        result = await super()._serve_list(request)
        selector = _parse_selector(request.params.get("labelSelector", ""))
        result["items"] = [i for i in result["items"] if _matches(i, selector)]
        return result


class FakeCluster:
    """The emulator serving on 127.0.0.1 from a background event loop."""

    def __init__(self, namespace: str = "bench") -> None:
        self.namespace = namespace
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.emulator, self._server = self._run(self._start())
        self.url = f"http://{self._server.host}:{self._server.port}"

    async def _start(self) -> tuple[_Emulator, kmock.Server]:
        emulator = _Emulator()
        for resource in (PODS, EVENTS):  # listing needs them declared, even when empty
            emulator.resources[resource] = {}
        await emulator.__aenter__()
        server = kmock.Server(emulator)
        await server.__aenter__()
        return emulator, server

    def close(self) -> None:
        async def stop() -> None:
            await self._server.__aexit__(None, None, None)
            await self.emulator.__aexit__(None, None, None)

        self._run(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

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

        def apply() -> None:
            obj = self.emulator.objects[JOB_RESOURCES[job_api], self.namespace, name]
            obj.patch({"status": {"conditions": [condition]}})

        self._mutate(apply)

    def add_pod(self, pod: dict[str, Any], log: str | None = None) -> None:
        name = pod["metadata"]["name"]
        pod["metadata"].setdefault("namespace", self.namespace)
        pod["metadata"].setdefault("uid", f"uid-{name}")

        def apply() -> None:
            self.emulator.objects[PODS, self.namespace, name] = pod
            if log is not None:
                self.emulator.pod_logs[self.namespace, name] = log

        self._mutate(apply)

    def remove_pods(self) -> None:
        def apply() -> None:
            for key in [k for k in self.emulator.objects if k[0] == kmock.resource(PODS)]:
                del self.emulator.objects[key]
            self.emulator.pod_logs.clear()

        self._mutate(apply)

    def add_event(self, event: dict[str, Any]) -> None:
        name = event["metadata"]["name"]
        self._mutate(
            lambda: self.emulator.objects.__setitem__((EVENTS, self.namespace, name), event)
        )

    def fail(self, method: str, path: str, status: int, times: int = 1, message: str = "") -> None:
        fault = Fault(method.upper(), re.compile(path), status, times, message or f"HTTP {status}")
        self._mutate(lambda: self.emulator.faults.append(fault))

    def requests(self, method: str, path: str) -> int:
        pattern = re.compile(path)
        return sum(
            1
            for r in list(self.emulator._requests)
            if r.method.value.upper() == method.upper() and pattern.search(r.url.path)
        )


def _parse_selector(text: str) -> dict[str, str]:
    pairs = (part.split("=", 1) for part in text.split(",") if "=" in part)
    return {k.strip(): v.strip() for k, v in pairs}


def _matches(obj: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())
