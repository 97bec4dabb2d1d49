"""The infra tests' event loop, the infra program's evaluation of each stack file (run once per
stack and shared by the stack tests), and the kind stack's fake `docker` and `kind`
(kind_fakes.py) on PATH.

Pulumi's runtime (mocks included) waits on the main thread's current event loop. Async tests
elsewhere in the suite (pytest-asyncio, kmock) leave the main thread with none, so each infra
test gets a fresh one of its own, closed after it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from infra_harness import Evaluation, evaluated
from kind_fakes import FAKE_DOCKER, FAKE_KIND, NODES
from stack_reads import STACKS


@pytest.fixture(autouse=True)
def event_loop_for_pulumi() -> Iterator[None]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "kind").write_text(FAKE_KIND.format(nodes=" ".join(NODES)))
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_ROOT", str(tmp_path))
    return tmp_path


@pytest.fixture(params=STACKS)
def ev(request) -> Evaluation:
    return evaluated(request.param)
