"""Fixtures of the runner tests: a local HTTP server for `runner data fetch`, the fake
Kubernetes API server (k8s_fake.py) the KubernetesBackend tests talk to, and the fake `pulumi`
of the teardown tests (fake_pulumi.py)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runner.fake_pulumi import project_copy
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import close_made_backends
from tests.runner.test_cluster import OUTPUTS


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
    close_made_backends()
    fake.close()


@pytest.fixture
def pulumi_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A `pulumi` that logs every call (one line each) and answers `stack output`, `destroy`
    and `stack export` from files the test writes; run from a copy of the project whose stack
    has deletion protection off, as before a teardown."""
    monkeypatch.chdir(project_copy(tmp_path / "project", protected=False))
    bin_dir, log = tmp_path / "bin", tmp_path / "pulumi.log"
    bin_dir.mkdir()
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    (tmp_path / "export.json").write_text(json.dumps({"deployment": {"resources": []}}))
    (tmp_path / "destroy_rc").write_text("0")
    script = bin_dir / "pulumi"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {log}
case "$1 $2" in
  "stack output") cat {tmp_path}/outputs.json ;;
  "stack export") cat {tmp_path}/export.json ;;
  destroy*) echo "Destroying (gke-gpu-8):"; cat {tmp_path}/destroy_out 2>/dev/null;
            echo "Resources: 12 deleted";
            exit $(cat {tmp_path}/destroy_rc) ;;
esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    return log
