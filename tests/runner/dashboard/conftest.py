"""The dashboard's real server on 127.0.0.1 (in a thread of the test process), plain HTTP
helpers to talk to it (JSON requests and a server-sent event reader), and a headless browser
for the end-to-end tests (browser.py; skipped with the reason where it cannot run)."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("aiohttp", reason="the dashboard needs aiohttp: pip install '.[dashboard]'")

from runner.dashboard.server import DashboardConfig, start
from tests.runner.dashboard.browser import chromium, missing


@contextmanager
def running_dashboard(
    root: Path, poll_s: float = 0.05, host: str = "127.0.0.1", allowed_hosts: tuple[str, ...] = ()
) -> Iterator[str]:
    """Serve `root` on a free port of `host`; yields the base URL, stops on exit."""
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            started["runner"], started["url"] = loop.run_until_complete(
                start(DashboardConfig(root, host, 0, poll_s, allowed_hosts))
            )
        except BaseException as err:  # surfaced to the test below
            started["error"] = err
            loop.close()
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(started["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10), "the dashboard did not start within 10 s"
    if "error" in started:
        raise started["error"]
    try:
        yield started["url"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    root.mkdir()
    return root


@pytest.fixture
def dashboard(results: Path) -> Iterator[str]:
    with running_dashboard(results) as url:
        yield url


@pytest.fixture
def browser(tmp_path):
    reason = missing()
    if reason:
        pytest.skip(reason)
    with chromium(tmp_path / "profile") as driver:
        yield driver


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET, error statuses included."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def get_json(url: str) -> Any:
    status, _, body = get(url)
    assert status == 200, body
    return json.loads(body)


def raw_get(base: str, path: str) -> tuple[int, bytes]:
    """A GET of `path` exactly as written (urllib would normalise `..` away)."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class EventStream:
    """A server-sent event stream read message by message, with a deadline per read."""

    def __init__(self, base: str, path: str) -> None:
        parts = urlsplit(base)
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        self._conn.request("GET", path, headers={"Accept": "text/event-stream"})
        self.response = self._conn.getresponse()

    def next(self) -> tuple[str, Any]:
        """The next message (name, payload); comments (keep-alives) are skipped."""
        name, data = "message", []
        while True:
            line = self.response.readline()
            assert line, "the stream ended"
            text = line.decode().rstrip("\n")
            if text.startswith("event: "):
                name = text[len("event: ") :]
            elif text.startswith("data: "):
                data.append(text[len("data: ") :])
            elif text == "" and data:
                return name, json.loads("\n".join(data))

    def until(self, name: str, max_messages: int = 50) -> Any:
        for _ in range(max_messages):
            got, payload = self.next()
            if got == name:
                return payload
        raise AssertionError(f"no {name!r} message in {max_messages}")

    def close(self) -> None:
        self._conn.close()
