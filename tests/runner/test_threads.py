"""Threads per worker (runner/job/threads.py): recorded in every local run, the same in every
cell of a sweep whatever its worker count, given to each worker as OMP_NUM_THREADS, and a run
whose workers' threads exceed the cores here is said in one line (issue 33). That a real run's
workers train with the recorded threads is test_local_backend.py's (its manifest)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from runner import sweep as sweeps
from runner.backends.local import launch
from runner.cli import main
from runner.job import threads
from runner.job.spec import JobSpec, Placement, resolve
from runner.job.target import local_target


def test_a_local_run_records_an_equal_share_of_the_cores_unless_told(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    target = local_target(tmp_path)
    assert target.placement(1).threads_per_worker == threads.cores()
    assert target.placement(2 * threads.cores()).threads_per_worker == 1  # never none
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's own choice is the default
    assert target.placement(1).threads_per_worker == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")  # unusable: OpenMP ignores it, so do we
    assert target.placement(1).threads_per_worker == threads.cores()


def test_a_sweep_gives_every_worker_count_the_threads_its_largest_leaves(tmp_path, monkeypatch):
    # One worker with the whole machine against four with a quarter each measured the thread
    # pool: 13x "speedup" at 2 workers on a shared 2-core machine.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    held = sweeps.holding_threads(local_target(tmp_path), [1, 2, 4])
    per_cell = {w: held.placement(w).threads_per_worker for w in (1, 2, 4)}
    assert set(per_cell.values()) == {threads.share(4)}
    given = sweeps.holding_threads(replace(local_target(tmp_path), threads_per_worker=3), [1, 4])
    assert given.placement(1).threads_per_worker == given.placement(4).threads_per_worker == 3


def test_job_json_records_the_threads_and_an_older_record_reads_without_them():
    spec = resolve("cnn-digits", placement=Placement(1, 2, threads_per_worker=1))
    data = json.loads(spec.to_json())
    assert data["placement"]["threads_per_worker"] == 1
    assert JobSpec.from_dict(data).placement.threads_per_worker == 1
    del data["placement"]["threads_per_worker"]  # written before it was recorded
    assert JobSpec.from_dict(data).placement.threads_per_worker is None


@pytest.mark.parametrize("bad", [0, 1025, 1.5, True])
def test_a_damaged_threads_count_is_refused(bad):
    with pytest.raises((TypeError, ValueError)):
        Placement(1, 2, threads_per_worker=bad)


def test_every_worker_is_started_with_the_recorded_threads_whatever_the_environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # read when the run was resolved, not now
    assert launch.thread_env(Placement(1, 4, threads_per_worker=2)) == {"OMP_NUM_THREADS": "2"}


def test_threads_beyond_the_cores_are_said_in_one_line_with_what_fits():
    cores = threads.cores()
    assert threads.oversubscribed(1, cores) is None
    line = threads.oversubscribed(cores, 2)
    assert line is not None and "\n" not in line
    assert f"{cores} workers x 2 threads = {2 * cores} threads on {cores} core" in line
    assert "--threads 1 fits" in line
    assert f"at most {cores} workers fits" in (threads.oversubscribed(cores + 1, 1) or "")


def test_submit_warns_of_oversubscription_and_records_the_threads_in_the_dry_run(tmp_path):
    workers = threads.cores() + 1
    args = ["--results-dir", str(tmp_path), "submit", "cnn-digits", "--workers", str(workers),
            "--threads", "1", "--dry-run"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"{workers} workers x 1 thread" in warnings[0]
    assert '"threads_per_worker": 1' in result.stdout
    assert "OMP_NUM_THREADS=1" in result.stdout or '"OMP_NUM_THREADS": "1"' in result.stdout


def test_threads_are_refused_for_a_cluster_whose_pods_get_their_launchers(tmp_path):
    (tmp_path / "kubeconfig").write_text("")  # refused before it is read
    args = ["--results-dir", str(tmp_path), "submit", "cnn-digits", "--threads", "2",
            "--kubeconfig", str(tmp_path / "kubeconfig"), "--dry-run"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "--threads" in result.output and "applies to local runs" in result.output
