"""Shared fixtures: one real local run of the quickstart, reused by the tests that read it."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from runner import api
from runner.backends.local.backend import LocalBackend
from runner.job.spec import resolve
from runner.job.target import local_target


def pytest_configure(config: pytest.Config) -> None:
    """A suite started as a background job without job control (`make test &` in a script)
    inherits SIGINT ignored, and so would every runner it starts: the Ctrl-C tests' SIGINT
    would then be ignored as a background job's is (runner/cli/__init__.py), the runner train
    on, and each test wait out its timeout. Python's own handler, which exec resets to the
    default in the processes the tests start, is what a terminal gives them."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with the most real runs (`slow` tests) first, each file's tests in their own
    order. `make test` runs two pytest-xdist workers that take a test file at a time in this
    order: the heaviest first, so that the workers end together rather than one running the
    last heavy file alone. A plain `pytest` runs in the same order, so an order-dependent
    failure seen there is seen here."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    first: dict[Path, int] = {}
    for index, item in enumerate(items):
        first.setdefault(item.path, index)
    items.sort(key=lambda item: (-slow[item.path], first[item.path]))


def submit_local(results: Path, overrides: list[str], workers: int = 2) -> api.Run:
    # Placed as the CLI places a local run: its threads per worker recorded (runner/job/threads.py).
    spec = resolve("cnn-digits", overrides, local_target(results).placement(workers))
    return api.submit(spec, LocalBackend(results), results)


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, api.Run]:
    """A real 2-worker cnn-digits run on gloo, followed to the end (about 10 s)."""
    results = tmp_path_factory.mktemp("results")
    run = submit_local(results, [])
    status = api.wait(results, run)
    assert status.state.value == "SUCCEEDED", status
    return results, run
