"""Calls to the API server against a real socket server on 127.0.0.1 (k8s_socket.py) that behaves
as a broken server or something in front of one does: it drips its answers a byte at a time
(every call ends at its total deadline, with one line naming the server and the deadline), sends
a watch that never brings a change (the collection is listed again), redirects (named, never
followed with the token), asks to be retried later than the deadline allows, or streams far more
than an answer or a log may hold (refused or cut as it comes, never held in memory)."""

from __future__ import annotations

import itertools
import json
import resource
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runner.backends.kubernetes.api.client import KubeApi, Selector
from runner.backends.kubernetes.api.limits import MIB, ApiLimits
from runner.backends.kubernetes.api.streams import DeadlinePassed
from runner.backends.kubernetes.follow.reflector import WatchConfig
from runner.backends.kubernetes.follow.watch import JobObserver
from runner.errors import RunnerError
from tests.runner.k8s_helpers import RUN_ID, stack_connection
from tests.runner.k8s_socket import RawServer, Request, drip, head, send_chunked

pytestmark = pytest.mark.timeout(60)
DRIP_EVERY_S = 0.5  # slower than nothing: each read gets a byte well within its timeout
LIMITS = ApiLimits(call_deadline_s=1.5, log_deadline_s=1.5, watch_slack_s=1.0)


def job(conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta = {"name": RUN_ID, "namespace": "bench", "uid": "uid-1", "resourceVersion": "7",
            "creationTimestamp": "2030-01-01T00:00:00Z"}  # fmt: skip
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": meta,
        "spec": {"trainer": {"numNodes": 1, "numProcPerNode": 1}},
        "status": {"conditions": conditions or []},
    }


def api_for(server: RawServer, limits: ApiLimits = LIMITS) -> KubeApi:
    conn = stack_connection("trainjob", None, kubeconfig=server.kubeconfig())
    # The per-read timeout is far longer than a drip: only the total deadline can end a call.
    return KubeApi(conn, max_attempts=2, retry_backoff_s=0.01, request_timeout_s=20, limits=limits)


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[Request, socket.socket], None]], RawServer]]:
    servers: list[RawServer] = []

    def start(answer: Callable[[Request, socket.socket], None]) -> RawServer:
        servers.append(RawServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def dripping(server_ref: list[RawServer]) -> Callable[[Request, socket.socket], None]:
    body = json.dumps(job()).encode()

    def answer(request: Request, conn: socket.socket) -> None:
        whole = head("200 OK", {"Content-Length": str(len(body))}) + body
        drip(conn, whole, DRIP_EVERY_S, server_ref[0])

    return answer


CALLS: dict[str, Callable[[KubeApi], Any]] = {
    "get": lambda api: api.get_job(RUN_ID),
    "list": lambda api: api.list_objects("pods", Selector()),
    "create": lambda api: api.create_job(job()),
    "delete": lambda api: api.delete_job(RUN_ID),
    "log": lambda api: list(api.read_log("pod-0", "node").lines()) and None,
}


@pytest.mark.parametrize("call", ["get", "list", "create", "delete"])
def test_a_dripping_server_ends_every_call_at_its_deadline(serve, call):
    ref: list[RawServer] = []
    server = serve(dripping(ref))
    ref.append(server)
    api = api_for(server)
    with pytest.raises(DeadlinePassed) as err:
        CALLS[call](api)
    message = str(err.value)
    assert server.url in message and "deadline of 1.5 s" in message and "\n" not in message
    assert "STACKBENCH_K8S_CALL_DEADLINE_S" in message
    api.close()


def test_a_dripping_log_is_read_until_its_deadline_and_said_incomplete(serve):
    def answer(request: Request, conn: socket.socket) -> None:
        conn.sendall(head("200 OK", chunked=True))
        for i in itertools.count():  # a line at a time, never the end
            if server.stopped:
                return
            drip(conn, b"%x\r\n%s\r\n" % (8, b"line %02d\n" % (i % 100)), 0.05, server)

    server = serve(answer)
    api = api_for(server)
    read = api.read_log("pod-0", "node")
    lines = list(read.lines())
    assert lines and not read.whole  # what came before the deadline, said to be partial
    api.close()


def test_a_watch_that_never_brings_a_change_falls_back_to_a_list(serve):
    """The list says Complete at once; the watch sends bookmarks only, for as long as it is
    open. The observer sees the job Complete by listing again, not after the watch's end."""
    lists = itertools.count()
    complete = [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2030-01-01T00:01:00Z"}
    ]

    def answer(request: Request, conn: socket.socket) -> None:
        if "watch=true" in request.path:
            conn.sendall(head("200 OK", chunked=True))
            bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}
            send_chunked(conn, (json.dumps(bookmark).encode() + b"\n" for _ in range(1000)))
            threading.Event().wait(30)  # then silence, the connection held open
            return
        if "/pods" in request.path or "/events" in request.path:
            items: list[dict[str, Any]] = []
        else:  # the job: the first list before it ended, every later one after
            items = [job(complete if next(lists) else None)]
        body = json.dumps({"metadata": {"resourceVersion": "7"}, "items": items}).encode()
        conn.sendall(head("200 OK", {"Content-Length": str(len(body))}) + body)

    server = serve(answer)
    api = api_for(server, ApiLimits(watch_slack_s=30))  # the watch's own deadline is far off
    config = WatchConfig(min_timeout_s=60, relist_quiet_s=0.5, backoff_initial_s=0.01, jitter=0)
    observer = JobObserver(api, RUN_ID, config)
    try:
        version = 0
        for _ in range(50):
            version = observer.wait(version, timeout_s=20)
            view = observer.view()
            if view.job is not None and view.job["status"]["conditions"]:
                break
        assert view.job is not None and view.job["status"]["conditions"][0]["type"] == "Complete"
    finally:
        observer.close()
        api.close()


def test_a_redirect_is_named_and_never_followed_with_the_token(serve):
    elsewhere = serve(lambda request, conn: conn.sendall(head("200 OK") + b"{}"))

    def answer(request: Request, conn: socket.socket) -> None:
        location = f"http://127.0.0.1:{elsewhere.port}/apis/stolen"
        conn.sendall(head("302 Found", {"Location": location, "Content-Length": "0"}))

    server = serve(answer)
    api = api_for(server)
    with pytest.raises(RunnerError) as err:
        api.get_job(RUN_ID)
    message = str(err.value)
    assert f"redirect (HTTP 302) to 127.0.0.1:{elsewhere.port}" in message
    assert "unreachable" not in message and "MaxRetryError" not in message
    assert server.requests[0].headers["authorization"] == "Bearer the-cluster-token"
    assert elsewhere.requests == []  # the token never went there
    api.close()


def test_a_retry_after_past_the_deadline_is_not_waited_for(serve):
    def answer(request: Request, conn: socket.socket) -> None:
        body = b'{"kind": "Status", "message": "too many requests"}'
        headers = {"Retry-After": "30", "Content-Length": str(len(body))}
        conn.sendall(head("429 Too Many Requests", headers) + body)

    server = serve(answer)
    api = api_for(server)
    with pytest.raises(DeadlinePassed, match=r"deadline of 1\.5 s.*HTTP 429"):
        api.get_job(RUN_ID)
    assert len(server.requests) == 1
    api.close()


def endless(piece: bytes, stop: RawServer, total_bytes: int) -> Iterator[bytes]:
    sent = 0
    while sent < total_bytes and not stop.stopped:
        sent += len(piece)
        yield piece


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def test_a_gigabyte_answer_is_refused_as_it_comes(serve):
    """A list answer of 1 GiB (a JSON array that never closes): refused at the cap, read no
    further, the runner's memory not grown by it."""

    def answer(request: Request, conn: socket.socket) -> None:
        conn.sendall(head("200 OK", chunked=True))
        with pytest.raises(OSError):  # the client hangs up once past the cap
            send_chunked(
                conn,
                itertools.chain([b'{"items": ['], endless(b'{"a": 1},' * 8192, server, 1 << 30)),
            )

    server = serve(answer)
    api = api_for(server, ApiLimits(max_answer_bytes=16 * MIB))
    before = peak_rss_mib()
    with pytest.raises(RunnerError, match=r"larger than 16 MiB.*STACKBENCH_K8S_MAX_ANSWER_MIB"):
        api.list_objects("pods", Selector())
    assert peak_rss_mib() - before < 200
    api.close()


def test_a_gigabyte_log_is_cut_at_its_cap_line_by_line(serve):
    """A pod log of 1 GiB offered; read line by line up to max_log_bytes and then cut, never
    gathered in memory, and said to be cut."""

    def answer(request: Request, conn: socket.socket) -> None:
        conn.sendall(head("200 OK", chunked=True))
        with pytest.raises(OSError):
            send_chunked(conn, endless(b"[rank0]:x" * 7000 + b"\n", server, 1 << 30))

    server = serve(answer)
    api = api_for(server, ApiLimits(max_log_bytes=64 * MIB, log_deadline_s=60))
    before = peak_rss_mib()
    read = api.read_log("pod-0", "node")
    size = sum(len(line) + 1 for line in read.lines())
    assert read.cut and not read.whole
    assert 63 * MIB < size <= 64 * MIB
    assert peak_rss_mib() - before < 200
    api.close()


def test_a_gigabyte_error_body_is_cut_and_its_status_said(serve):
    """A 500 whose body never ends: the status and the start of the server's words, read no
    further (the client reads an error's body whole to find its message)."""

    def answer(request: Request, conn: socket.socket) -> None:
        conn.sendall(head("500 Internal Server Error", chunked=True))
        start = b'{"kind": "Status", "message": "failed calling webhook' + b" x" * 100
        with pytest.raises(OSError):
            send_chunked(conn, itertools.chain([start], endless(b"x" * 65536, server, 1 << 30)))

    server = serve(answer)
    api = api_for(server)
    before = peak_rss_mib()
    with pytest.raises(RunnerError, match="HTTP 500"):
        api.get_job(RUN_ID)
    assert peak_rss_mib() - before < 200
    api.close()
