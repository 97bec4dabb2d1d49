"""The fake API server's streams (k8s_fake.py): lists, and watches replayed from the history of
changes from the version they ask for (410 Gone once it was compacted away, server-side timeouts,
bookmarks), with label and field selectors; and pod logs, followed too, as a kubelet streams
them. Both end mid-line when the test drops the connections."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import kmock

LOG_CHUNK_BYTES = 16 * 1024  # a kubelet flushes a streamed log in pieces of about this size


@dataclass(frozen=True)
class Change:
    """One entry of the watch history: what changed, at which resource version."""

    version: int
    plural: str
    namespace: str
    event: dict[str, Any]  # {"type": ADDED/MODIFIED/DELETED, "object": ...}


class WatchStreams:
    """The emulator's list, watch and pod log serving (a mixin of k8s_emulator.Emulator, whose
    lock, objects, history and wake-up tick it reads)."""

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
