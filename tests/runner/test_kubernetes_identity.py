"""A job is this run's by its uid, not only its name: a PyTorchJob (or TrainJob) deleted and
made again under the same name while the runner follows it, and the pods such a job makes, are
another's. Their outcome, logs and results never become this run's record, and the runner never
deletes them. A run directory written before uids were recorded reads as it did (by name). A
TrainJob's pods, known through its JobSet, are in test_kubernetes_identity_jobsets.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from contract import files
from contract.rundir import JobState, rank_log, read_state
from runner.backends.kubernetes.api.apierrors import NameConflict
from runner.backends.kubernetes.backend import KubernetesBackend
from runner.errors import RunnerError, StorageError
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import (
    RUN_ID,
    complete,
    make_backend,
    make_spec,
    pod,
    recorded_uid,
    submit,
)
from tests.runner.rundirs import summary as summary_record

pytestmark = pytest.mark.timeout(60)
SUCCESS = {"trainjob": "Complete", "pytorchjob": "Succeeded"}
APIS = list(SUCCESS)


def make_again(cluster: FakeCluster, root: Path, job_api: str, run_dir: Path) -> str:
    """What `kubectl delete` then `kubectl apply` of the same manifest do, from elsewhere: the
    job is deleted and another, with another uid, is made under its name. Its uid."""
    other = make_backend(cluster, root / "elsewhere", job_api)
    manifest = copy.deepcopy(dict(other.dryrun(make_spec(), run_dir).manifest))
    other.api.delete_job(RUN_ID)
    other.api.create_job(manifest)
    other.close()
    uid = cluster.job(job_api, RUN_ID)["metadata"]["uid"]
    assert uid != recorded_uid(run_dir)
    return uid


def owned_pod(job_api: str, node: int, phase: str, uid: str) -> dict[str, Any]:
    """A pod as the operator makes them: its owner reference names its job's uid."""
    made = pod(job_api, RUN_ID, node, phase)
    kind = {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob"}[job_api]
    made["metadata"]["ownerReferences"] = [{"kind": kind, "uid": uid, "controller": True}]
    return made


def succeed_as_another(cluster: FakeCluster, job_api: str, uid: str) -> None:
    """The job made again runs to success, with pods and logs of its own."""
    for node in (0, 1):
        log = f"[rank{2 * node}]:the other job's line\n"
        cluster.add_pod(owned_pod(job_api, node, "Succeeded", uid), log=log)
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])


def replaced(
    cluster: FakeCluster, root: Path, job_api: str, succeed: bool = True, **options: Any
) -> tuple[Any, str, Path, str]:
    """A run submitted, then its job made again under its name (and run to success by then,
    if `succeed`): its backend, handle, run directory and the other job's uid."""
    backend = make_backend(cluster, root, job_api, **options)
    handle, run_dir = submit(backend, root, make_spec())
    uid = make_again(cluster, root, job_api, run_dir)
    if succeed:
        succeed_as_another(cluster, job_api, uid)
    return backend, handle, run_dir, uid


def is_another_jobs(status: Any) -> bool:
    return status.state is JobState.FAILED and "is another" in status.reason


# ---- the job -------------------------------------------------------------------------------


@pytest.mark.parametrize("job_api", APIS)
def test_submit_records_the_uid_of_the_job_it_created(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    _, run_dir = submit(backend, tmp_path, make_spec())
    assert recorded_uid(run_dir) == cluster.job(job_api, RUN_ID)["metadata"]["uid"]
    assert rundir.read_record(run_dir).spec == make_spec()  # the rest of job.json as it was
    backend.close()


@pytest.mark.parametrize("job_api", APIS)
def test_status_of_a_job_made_again_under_the_runs_name_is_failed(cluster, tmp_path, job_api):
    backend, handle, run_dir, uid = replaced(cluster, tmp_path, job_api)
    status = backend.status(handle)
    assert is_another_jobs(status) and uid in status.reason, status
    assert read_state(run_dir) == status
    # Another process (a new backend, from job.json) says the same.
    assert make_backend(cluster, tmp_path, job_api).status(handle) == status
    backend.close()


def test_a_watch_ends_failed_when_the_job_is_made_again_under_its_name(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    statuses = backend.watch(handle)
    assert next(statuses).state is JobState.PENDING
    uid = make_again(cluster, tmp_path, "pytorchjob", run_dir)
    succeed_as_another(cluster, "pytorchjob", uid)
    rest = list(statuses)
    assert rest and all(is_another_jobs(s) for s in rest), rest
    assert is_another_jobs(read_state(run_dir))
    backend.close()


@pytest.mark.parametrize("job_api", APIS)
def test_fetch_takes_nothing_of_a_job_made_again_and_leaves_it(cluster, tmp_path, job_api):
    backend, handle, run_dir, uid = replaced(cluster, tmp_path, job_api)
    with pytest.raises(RunnerError, match="is not on the cluster"):
        backend.fetch(handle, run_dir)
    assert is_another_jobs(read_state(run_dir))
    assert not rank_log(run_dir, 0).exists()  # the other job's log is not this run's
    assert cluster.job(job_api, RUN_ID)["metadata"]["uid"] == uid  # and it is not ours to delete
    backend.close()


@pytest.mark.parametrize("job_api", APIS)
def test_cancel_never_deletes_a_job_made_again_under_the_runs_name(cluster, tmp_path, job_api):
    backend, handle, run_dir, uid = replaced(cluster, tmp_path, job_api, succeed=False)
    backend.cancel(handle)
    assert cluster.job(job_api, RUN_ID)["metadata"]["uid"] == uid
    assert is_another_jobs(read_state(run_dir))
    backend.close()


def test_a_delete_names_the_uid_so_another_job_of_the_name_is_refused(cluster, tmp_path):
    """Between reading the job and deleting it, it may be made again: the delete's
    precondition makes the server refuse, rather than delete another's job."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    _, run_dir = submit(backend, tmp_path, make_spec())
    first = recorded_uid(run_dir)
    uid = make_again(cluster, tmp_path, "pytorchjob", run_dir)
    with pytest.raises(NameConflict, match="Precondition failed"):
        backend.api.delete_job(RUN_ID, first)
    assert cluster.job("pytorchjob", RUN_ID)["metadata"]["uid"] == uid
    backend.close()


# ---- its pods ------------------------------------------------------------------------------


def test_a_pod_of_another_job_of_the_same_name_is_none_of_this_runs(cluster, tmp_path):
    """The old job's pods linger while they terminate, with the run-id label the pods'
    selector asks for: they neither start this run nor give it their logs."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    for node in (0, 1):
        log = f"[rank{2 * node}]:a line of the job deleted before\n"
        cluster.add_pod(owned_pod("pytorchjob", node, "Running", "uid-of-another"), log=log)
    status = backend.status(handle)
    assert status.state is JobState.PENDING, status
    with pytest.raises(RunnerError, match="its pod has not started"):  # none of its own yet
        list(backend.logs(handle, 0, follow=False))
    ours = recorded_uid(run_dir)
    cluster.add_pod(owned_pod("pytorchjob", 0, "Running", ours), log="[rank0]:ours\n")
    assert list(backend.logs(handle, 0, follow=False)) == ["ours"]
    backend.close()


# ---- a run directory from before uids ------------------------------------------------------


def test_a_run_recorded_without_a_uid_is_known_by_its_name(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    record = files.read_json(run_dir / rundir.JOB)
    del record["cluster"]["job_uid"]
    files.write_json(run_dir / rundir.JOB, record)
    older = make_backend(cluster, tmp_path, "pytorchjob")
    complete(cluster, "pytorchjob")
    assert older.status(handle).state is JobState.SUCCEEDED
    backend.close()
    older.close()


@pytest.mark.parametrize("uid", [7, "", ["a"]])
def test_a_damaged_recorded_uid_reads_as_none(cluster, tmp_path, uid):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    record = files.read_json(run_dir / rundir.JOB)
    record["cluster"]["job_uid"] = uid
    files.write_json(run_dir / rundir.JOB, record)
    fresh: KubernetesBackend = make_backend(cluster, tmp_path, "pytorchjob")
    assert fresh.status(handle).state is JobState.PENDING
    backend.close()
    fresh.close()


# ---- a record that cannot be written -------------------------------------------------------


@pytest.mark.parametrize("job_api", APIS)
def test_a_job_whose_run_cannot_be_recorded_is_deleted_not_left_running(cluster, tmp_path, job_api):
    """runner.api records a submit that raised as FAILED: its job must not run on, unfollowed,
    on the cluster. A state.json that cannot be replaced (here a directory in its place; a
    full disk does the same) makes the record fail after the job was created."""
    backend = make_backend(cluster, tmp_path, job_api)
    spec = make_spec()
    request = backend.dryrun(spec, tmp_path / spec.run_id)
    record = rundir.RunRecord(spec, "kubernetes", backend.handle(request), backend.reference)
    run_dir = rundir.create(tmp_path, record)
    (run_dir / rundir.STATE).mkdir()
    with pytest.raises(StorageError, match=r"cannot write .*state\.json: Is a directory"):
        backend.submit(request)
    assert cluster.job(job_api, RUN_ID) is None
    backend.close()


def test_fetch_takes_no_results_from_the_store_once_the_job_was_made_again(cluster, tmp_path):
    """The results store keeps files by the run's name, which the job made again writes to."""
    store = tmp_path / "store"
    backend, handle, run_dir, _uid = replaced(
        cluster, tmp_path, "pytorchjob", store=f"file://{store}"
    )
    (store / RUN_ID).mkdir(parents=True)
    theirs = summary_record(RUN_ID, 4, 12.5, steps=100)
    (store / RUN_ID / rundir.SUMMARY).write_text(json.dumps(theirs))
    with pytest.raises(RunnerError, match="is not on the cluster"):
        backend.fetch(handle, run_dir)
    assert not (run_dir / rundir.SUMMARY).exists()
    assert is_another_jobs(read_state(run_dir))
    backend.close()


@pytest.mark.parametrize("follow", [False, True])
@pytest.mark.parametrize("job_api", APIS)
def test_logs_never_show_a_job_made_again_under_the_runs_name(cluster, tmp_path, job_api, follow):
    """A TrainJob's pods name no TrainJob (JobSet's batch Jobs own them): once the job on the
    cluster is another, none of the pods of that name are read as this run's."""
    backend, handle, _run_dir, _uid = replaced(cluster, tmp_path, job_api)
    for node in (0, 1):  # as JobSet makes them: no owner reference to the TrainJob
        made = pod(job_api, RUN_ID, node, "Succeeded")
        cluster.add_pod(made, log=f"[rank{2 * node}]:the other job's line\n")
    with pytest.raises(RunnerError, match=r"no log of rank 0 .* another"):
        list(backend.logs(handle, 0, follow=follow))
    backend.close()
