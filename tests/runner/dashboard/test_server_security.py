"""What the dashboard's server refuses, against the real server on 127.0.0.1: files served as
text, JSON or a download, never as HTML; paths out of the run directory and symbolic links; a
page without its Content-Security-Policy; other host names (DNS rebinding) whatever address it
is bound to, unless allowed; and anything but reads."""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import socket
from urllib.parse import urlsplit

import pytest

from tests.runner.dashboard.conftest import get, get_json, raw_get, running_dashboard
from tests.runner.rundirs import make_run


def test_files_are_served_as_text_json_or_download_never_as_html(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    (run_dir / "logs" / "rank-0.log").write_text("<script>alert(1)</script>\n")
    (run_dir / "notes.html").write_text("<html><script>alert(1)</script></html>")

    status, headers, body = get(dashboard + "api/runs/cnn-a/files/logs/rank-0.log")
    assert status == 200 and body == b"<script>alert(1)</script>\n"
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
    status, headers, _ = get(dashboard + "api/runs/cnn-a/files/summary.json")
    assert headers["Content-Type"].startswith("application/json")
    status, headers, _ = get(dashboard + "api/runs/cnn-a/files/notes.html")
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"].startswith("attachment")
    _, headers, _ = get(dashboard + "api/runs/cnn-a/files/job.json?download=1")
    assert headers["Content-Disposition"] == 'attachment; filename="job.json"'


def test_paths_out_of_the_run_directory_are_refused(results, dashboard, tmp_path):
    make_run(results, "cnn-a", 2, 12.5)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    (results / "secret.txt").write_text("SECRET")
    for path in [
        "/api/runs/cnn-a/files/../secret.txt",
        "/api/runs/cnn-a/files/..%2Fsecret.txt",
        "/api/runs/cnn-a/files/%2e%2e/%2e%2e/secret.txt",
        "/api/runs/cnn-a/files/logs/../../secret.txt",
        "/api/runs/cnn-a/files//etc/passwd",
        "/api/runs/..%2F..%2Fetc/files/passwd",
        "/api/runs/cnn-a/logs/..%2F..%2Fsecret.txt",
    ]:
        status, body = raw_get(dashboard, path)
        assert status in (400, 403, 404), (path, status)
        assert b"SECRET" not in body and b"root:" not in body, path


def test_symbolic_links_inside_a_run_are_never_followed(results, dashboard, tmp_path):
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    (run_dir / "link.txt").symlink_to(secret)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "rank-0.log").write_text("SECRET")
    os.rename(run_dir / "logs", run_dir / "logs-real")
    (run_dir / "logs").symlink_to(outside)

    for path in ["link.txt", "logs/rank-0.log"]:
        status, _, body = get(dashboard + f"api/runs/cnn-a/files/{path}")
        assert status == 403 and b"SECRET" not in body, path
        assert "symbolic link" in json.loads(body)["error"]
    status, _, body = get(dashboard + "api/runs/cnn-a/logs/rank-0.log")
    assert status == 403 and b"SECRET" not in body
    files = {f["path"]: f["kind"] for f in get_json(dashboard + "api/runs/cnn-a")["files"]}
    assert files["link.txt"] == files["logs"] == "link"


def test_the_app_page_has_a_strict_content_security_policy(dashboard):
    status, headers, body = get(dashboard)

    assert status == 200 and b'<div id="app">' in body
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self' 'sha256-" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_requests_for_another_host_name_are_refused(dashboard):
    # A page on another site reaching 127.0.0.1 through DNS rebinding sends its own Host.
    status, _, body = get(dashboard + "api/runs", headers={"Host": "attacker.example:80"})

    assert status == 403 and b"127.0.0.1" in body


def get_as(address: str, port: int, path: str, host: str | None) -> tuple[int, bytes]:
    """A GET sent to address:port whose Host header says `host` (None: no Host at all), as a
    browser on a rebound name sends it."""
    conn = http.client.HTTPConnection(address, port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def lan_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, if it has one."""
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                return a.address
    return None


REBOUND = ["attacker.example", "attacker.example:8765", "127.0.0.1.attacker.example", "[::1",
           "localhost:x", "a b", ""]  # fmt: skip


def test_a_dashboard_bound_to_every_address_answers_only_this_machines_names(results):
    make_run(results, "cnn-a", 2, 12.5)
    with running_dashboard(results, host="0.0.0.0") as url:
        port = urlsplit(url).port
        assert port is not None
        for path in ["/", "/api/runs", "/static/style.css", "/api/stream?table=1"]:
            for host in REBOUND:
                status, body = get_as("127.0.0.1", port, path, host)
                assert status == 403, (path, host, status)
                assert b"--allow-host" in body and b"\n" not in body, body  # one line
            assert get_as("127.0.0.1", port, path, None)[0] == 400  # aiohttp wants a Host
        ours = ["127.0.0.1", "localhost", "[::1]", "0.0.0.0", socket.gethostname(),
                *([lan] if (lan := lan_address()) else [])]  # fmt: skip
        for host in ours:
            for shown in (host, f"{host}:{port}"):
                status, body = get_as("127.0.0.1", port, "/api/runs", shown)
                assert status == 200, (shown, body)
                assert [r["run_id"] for r in json.loads(body)["rows"]] == ["cnn-a"]


def test_a_dashboard_bound_to_a_lan_address_answers_only_that_address(results):
    lan = lan_address()
    if lan is None:
        pytest.skip("this machine has no IPv4 address but loopback")
    with running_dashboard(results, host=lan) as url:
        port = urlsplit(url).port
        assert port is not None
        assert get_as(lan, port, "/api/runs", f"{lan}:{port}")[0] == 200
        for host in [*REBOUND, "localhost", "127.0.0.1"]:
            status, body = get_as(lan, port, "/api/runs", host)
            assert status == 403 and lan.encode() in body, (host, status)


def test_a_name_allowed_with_allow_host_is_answered_and_no_other(results):
    with running_dashboard(results, allowed_hosts=("bench.example.org",)) as url:
        port = urlsplit(url).port
        assert port is not None
        for host in ["bench.example.org", "BENCH.example.org.:443", "localhost"]:
            assert get_as("127.0.0.1", port, "/api/runs", host)[0] == 200, host
        for host in ["example.org", "bench.example.org.attacker.example", "x.bench.example.org"]:
            assert get_as("127.0.0.1", port, "/api/runs", host)[0] == 403, host


def test_only_reads_are_served(dashboard):
    import urllib.request

    request = urllib.request.Request(dashboard + "api/runs", data=b"{}", method="POST")
    try:
        urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as err:
        assert err.code == 405
    else:
        raise AssertionError("POST was accepted")
