"""The dashboard's reader of run directories: what a row says about live, remote, dead and
damaged runs, and that it follows the files as they change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import psutil

from contract.rundir import JobState, JobStatus
from runner.backends.local import processes
from runner.dashboard import data, files, reports
from runner.dashboard.data import RunTable, run_path, run_row
from runner.results import rundir
from tests.runner.rundirs import make_run


def _run_env(run_dir):
    """A stand-in supervisor must prove it belongs to the run, as the real one does."""
    return {**os.environ, **processes.run_env(run_dir.name, run_dir)}


def record_supervisor(run_dir, proc):
    # As the backend does: the pid is recorded once the process runs its own program.
    deadline = time.monotonic() + 10
    while processes.RUN_ID_ENV not in psutil.Process(proc.pid).environ():
        assert time.monotonic() < deadline, "the stand-in supervisor never started"
        time.sleep(0.01)
    info = {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time()}
    (run_dir / "supervisor.json").write_text(json.dumps(info))


def test_a_local_run_whose_supervisor_was_killed_reads_as_failed(tmp_path):
    run_dir = make_run(tmp_path, "cnn-a", 2, None, state="RUNNING", write_summary=False)
    supervisor = subprocess.Popen(["sleep", "60"], env=_run_env(run_dir))
    try:
        record_supervisor(run_dir, supervisor)
        assert run_row(tmp_path, "cnn-a")["state"] == "RUNNING"
        supervisor.kill()  # kill -9: nothing gets to record an outcome
        supervisor.wait()
        row = run_row(tmp_path, "cnn-a")
    finally:
        supervisor.kill()
        supervisor.wait()
    assert row["state"] == "FAILED" and "supervisor died" in row["reason"]


def test_the_table_follows_a_dead_supervisor_without_any_file_changing(tmp_path):
    run_dir = make_run(tmp_path, "cnn-a", 2, None, state="RUNNING", write_summary=False)
    table = RunTable(tmp_path)
    supervisor = subprocess.Popen(["sleep", "60"], env=_run_env(run_dir))
    try:
        record_supervisor(run_dir, supervisor)
        assert table.rows()[0]["state"] == "RUNNING"
        supervisor.kill()
        supervisor.wait()
        assert table.rows()[0]["state"] == "FAILED"
    finally:
        supervisor.kill()
        supervisor.wait()


def test_the_table_sees_a_state_change_and_a_new_run(tmp_path):
    run_dir = make_run(tmp_path, "cnn-a", 2, None, state="RUNNING", stack="gke")
    table = RunTable(tmp_path)
    assert [r["state"] for r in table.rows()] == ["RUNNING"]

    rundir.write_state(run_dir, JobStatus(JobState.CANCELLED, "cancelled by a person"))
    make_run(tmp_path, "cnn-b", 2, 10.0, created_at="2026-02-01T00:00:00+00:00")

    assert [(r["run_id"], r["state"]) for r in table.rows()] == [
        ("cnn-b", "SUCCEEDED"), ("cnn-a", "CANCELLED"),
    ]  # fmt: skip


def test_a_cluster_run_says_when_its_results_are_not_fetched_yet(tmp_path):
    running = make_run(
        tmp_path, "k-run", 2, None, state="RUNNING", stack="gke", write_summary=False
    )
    (running / "events.jsonl").unlink()
    done = make_run(tmp_path, "k-done", 2, None, stack="gke", write_summary=False)
    (done / "events.jsonl").unlink()

    assert "followed on kubernetes" in run_row(tmp_path, "k-run")["notes"][0]
    assert run_row(tmp_path, "k-done")["notes"] == ["results not fetched yet: runner fetch k-done"]
    assert run_row(tmp_path, "k-done")["stack"] == "gke"


def test_a_job_record_naming_another_run_is_damaged(tmp_path):
    run_dir = make_run(tmp_path, "cnn-a", 2, 10.0)
    job = json.loads((run_dir / "job.json").read_text())
    job["run_id"] = "../../elsewhere"
    (run_dir / "job.json").write_text(json.dumps(job))

    row = run_row(tmp_path, "cnn-a")

    assert (
        row["state"] == "DAMAGED" and "names run '../../elsewhere'" in row["damaged"][0]["problem"]
    )


def test_a_record_from_a_newer_runner_is_damaged_and_says_to_upgrade(tmp_path):
    run_dir = make_run(tmp_path, "cnn-a", 2, 10.0)
    (run_dir / "state.json").write_text(json.dumps({"schema_version": 99, "state": "SUCCEEDED"}))

    row = run_row(tmp_path, "cnn-a")

    assert row["state"] == "DAMAGED"
    assert row["damaged"][0]["file"] == "state.json" and "upgrade" in row["damaged"][0]["problem"]


def test_a_live_run_shows_its_latest_quality_before_any_summary(tmp_path):
    run_dir = make_run(tmp_path, "cnn-a", 2, None, state="PENDING", write_summary=False)
    # a run still writing: its events end with a half line
    with open(run_dir / "events.jsonl", "a") as f:
        f.write('{"key": "eval_accuracy", "value": 0.')

    row = run_row(tmp_path, "cnn-a")

    assert row["value"] == 0.8 + 0.05 * 3 and row["epoch"] is None  # rundirs' last evaluation


def test_a_run_removed_while_the_table_is_read_drops_out_of_it_without_an_error(tmp_path):
    # A run directory removed between the listing and its row's reads (`rm -r` of a run while
    # the dashboard is open) made the whole table a 404 naming that run, and its stream died.
    make_run(tmp_path, "keep", 1, 1.0)
    done = threading.Event()

    def churn() -> None:
        try:
            for i in range(300):
                copy = tmp_path / f"gone-{i % 3}"
                shutil.copytree(tmp_path / "keep", copy)
                shutil.rmtree(copy)
        finally:
            done.set()

    worker = threading.Thread(target=churn)
    worker.start()
    table, errors = RunTable(tmp_path), []
    try:
        while not done.is_set():
            try:
                table.rows()
            except Exception as err:  # what a page would have got instead of the table
                errors.append(repr(err))
    finally:
        worker.join()
    assert errors == []
    assert [row["run_id"] for row in table.rows()] == ["keep"]


def test_a_run_directory_swapped_for_a_link_after_it_was_checked_is_never_read(tmp_path):
    # run_path checks that a run directory is no link, and then each reader opened it again
    # by name, following whatever is there by then: a directory swapped for a link in between
    # (results/cnn-a -> a folder outside) had its records, events and file list read.
    results, outside = tmp_path / "results", tmp_path / "outside"
    results.mkdir()
    path = run_path(results, make_run(results, "cnn-a", 2, 12.5).name)  # checked: a folder
    make_run(outside, "cnn-a", 2, None, state="RUNNING", write_summary=False)
    os.rename(path, tmp_path / "moved")
    path.symlink_to(outside / "cnn-a")  # the swap, after the check

    state, damage = data.read_record(path, "state.json")
    assert state is None and damage and "symbolic link" in damage["problem"]
    assert data.read_job(path, "cnn-a")[0] is None
    assert data._latest(path) == {}
    assert any(p["file"] == "events.jsonl" for p in reports._unsafe_for_load_run(path))
    assert files.scan(path) == []


def test_a_cancelled_run_that_met_its_target_says_when_but_has_no_result(tmp_path):
    run_dir = make_run(tmp_path, "cnn-c", 2, None, state="CANCELLED", write_summary=False)
    met = {"time_ms": 1_700_000_004_250, "key": "stackbench_time_to_target_s", "value": 4.25,
           "metadata": {"epoch_num": 2}}  # fmt: skip
    with open(run_dir / "events.jsonl", "a") as f:
        f.write(json.dumps(met) + "\n")

    row = run_row(tmp_path, "cnn-c")

    assert row["target_met_s"] == 4.25  # shown, as the run met it
    assert row["time_to_target_s"] is None and row["reached"] is not True  # no result


def test_every_configuration_key_is_a_key_of_the_row(tmp_path):
    make_run(tmp_path, "cnn-k", 2, 5.0, overrides=("policy=batch", "strategy=allreduce"))

    keys = run_row(tmp_path, "cnn-k")["keys"]

    assert keys["policy"] == "batch" and keys["strategy"] == "allreduce"
    assert keys["link"] == "unshaped" and keys["workers"] == "2" and keys["division"] == "open"
    assert keys["batch_size"] == "32"  # a key left at its default is a key too
