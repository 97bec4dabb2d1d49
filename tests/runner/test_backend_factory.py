"""runner/backends/factory.py, the one place backends are built, and what runner.api asks of
them through the protocol alone: a listing that never reaches a cluster, a handle that must
name its own run, a leash that only a local run has."""

from __future__ import annotations

import json

from contract.rundir import JobState
from runner import api
from runner.backends import factory
from runner.results import rundir
from tests.runner.rundirs import make_run


def test_a_recorded_run_gets_the_backend_that_ran_it_without_connecting(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no pulumi: reconnecting would fail loudly
    local = rundir.read_record(make_run(tmp_path, "here", 2, 5.0))
    cluster = rundir.read_record(make_run(tmp_path, "there", 2, 5.0, stack="gke-gpu-8"))
    assert factory.for_record(local, tmp_path).name == "local"
    backend = factory.for_record(cluster, tmp_path)
    assert (backend.name, backend.fetches_results) == ("kubernetes", True)
    assert factory.listed_status(cluster, tmp_path).state is JobState.SUCCEEDED
    backend.release(cluster.handle)  # nothing ties a cluster job to this process
    backend.close()


def test_listing_reads_a_cluster_runs_recorded_state_and_never_the_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    make_run(tmp_path, "there", 2, 5.0, stack="gke-gpu-8", state="FAILED")
    [info] = api.list_runs(tmp_path)
    assert info.damage is None and info.status.state is JobState.FAILED  # type: ignore[union-attr]


def test_a_cluster_run_whose_record_names_no_cluster_is_listed_damaged_not_raised(tmp_path):
    run_dir = make_run(tmp_path, "there", 2, 5.0, stack="gke-gpu-8")
    make_run(tmp_path, "here", 2, 5.0)
    record = rundir.read_record(run_dir).to_dict()
    record.pop("cluster")
    (run_dir / "job.json").write_text(json.dumps(record))
    infos = {i.run_dir.name: i for i in api.list_runs(tmp_path)}
    assert "does not say which cluster ran" in (infos["there"].damage or "")
    assert infos["here"].damage is None


def test_a_handle_must_name_its_own_run_under_its_own_backend(tmp_path):
    local = rundir.read_record(make_run(tmp_path, "here", 2, 5.0))
    cluster = rundir.read_record(make_run(tmp_path, "there", 2, 5.0, stack="gke-gpu-8"))
    assert factory.handle_names(local, "here") and not factory.handle_names(local, "there")
    assert factory.handle_names(cluster, "there") and not factory.handle_names(cluster, "here")
    swapped = rundir.RunRecord(local.spec, "local", cluster.handle, None)
    assert not factory.handle_names(swapped, "here")
