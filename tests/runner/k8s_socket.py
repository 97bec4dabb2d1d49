"""A real socket server on 127.0.0.1 that answers HTTP the way a broken or hostile API server (or
something in front of one) would: dripping its answer a byte at a time, redirecting elsewhere,
asking to be retried later, or streaming far more than any answer needs. Each connection is
served on its own thread by `answer(request, conn)`, which writes raw bytes: no HTTP library
shapes what the client under test receives. What it is not: an API server (k8s_fake.py is one).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class RawServer:
    answer: Callable[[Request, socket.socket], None]
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            request = _read_request(conn)
            if request is None:
                return
            self.requests.append(request)
            self.answer(request, conn)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()

    def kubeconfig(self, namespace: str = "bench") -> str:
        return json.dumps({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "raw", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "the-cluster-token"}}],
            "contexts": [{"name": "raw", "context": {"cluster": "raw", "user": "tester",
                                                     "namespace": namespace}}],
            "current-context": "raw",
        })  # fmt: skip


def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return Request(method, path, headers)


def head(status: str, headers: dict[str, str] | None = None, chunked: bool = False) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def drip(conn: socket.socket, data: bytes, every_s: float, stop: RawServer) -> None:
    """`data` one byte every `every_s`: no read of the client ever waits long enough to time
    out, and the whole takes as long as the server likes."""
    for i in range(len(data)):
        if stop.stopped:
            return
        conn.sendall(data[i : i + 1])
        time.sleep(every_s)


def send_chunked(conn: socket.socket, pieces: Iterator[bytes]) -> None:
    for piece in pieces:
        conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
    conn.sendall(b"0\r\n\r\n")
