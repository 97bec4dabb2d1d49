"""Fixtures of the runner tests: a local HTTP server for `runner data fetch`, and the fake
Kubernetes API server (k8s_fake.py) the KubernetesBackend tests talk to."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator

import pytest

from tests.runner.k8s_fake import FakeCluster


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        return None  # keep the test output to what the tests print


@pytest.fixture
def server(tmp_path):
    """(directory served, base URL): a real HTTP server on 127.0.0.1."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for the serving loop's next poll: 0.05 s, not the default 0.5 s.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    """A fake API server with namespace `bench`, closed after the test."""
    fake = FakeCluster(namespace="bench")
    yield fake
    fake.close()
