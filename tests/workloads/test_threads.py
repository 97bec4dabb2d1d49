"""execution.max_cpu_threads: the intra-op threads a run's process trains with, as its
manifest records them (a real run of the entry point, in a process of its own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.job.benchmarks import BENCHMARKS
from tests.workloads.entry import run_entry, succeeded

pytestmark = pytest.mark.slow


def threads_of_a_run(tmp_path: Path, launcher_threads: int, **changes: object) -> int:
    config = BENCHMARKS["cnn-digits"].config.replace(max_epochs=1, stop_at_target=False, **changes)
    out = tmp_path / "out"
    succeeded(run_entry(config, out, omp_threads=launcher_threads))
    return json.loads((out / "manifest.json").read_text())["torch_threads"]


def test_a_run_trains_with_at_most_max_cpu_threads(tmp_path):
    assert threads_of_a_run(tmp_path, launcher_threads=2, max_cpu_threads=1) == 1


def test_max_cpu_threads_never_adds_threads_to_what_the_launcher_gave(tmp_path):
    assert threads_of_a_run(tmp_path, launcher_threads=2, max_cpu_threads=8) == 2


def test_without_max_cpu_threads_a_run_keeps_the_launchers_threads(tmp_path):
    assert threads_of_a_run(tmp_path, launcher_threads=2) == 2


def test_logreg_epsilon_trains_in_one_thread_by_default():
    assert BENCHMARKS["logreg-epsilon"].config.execution.max_cpu_threads == 1
