"""KubernetesBackend's fetch against a fake API server (kmock): a run's results rebuilt from rank
0's log (or read from the results store), its verdict kept once the pods are gone, a success
without a good summary failed, and one line for what the run directory or the cluster cannot
give."""

from __future__ import annotations

import json

import pytest

from contract import events as keys
from contract import files
from contract.rundir import JobState, rank_log, read_state
from runner.errors import RunnerError
from runner.results import rundir
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit
from tests.runner.k8s_runlogs import (
    APIS,
    MANIFEST,
    SUCCESS,
    SUMMARY,
    pod_log,
    rank0_stdout,
    run_pods,
)

pytestmark = pytest.mark.timeout(60)


# ---- fetch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("job_api", APIS)
def test_fetch_rebuilds_results_from_rank0_log_and_deletes_the_job(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, job_api, phase="Succeeded")
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    assert backend.fetch(handle, run_dir) == []
    assert rundir.read_summary(run_dir).to_dict() == SUMMARY
    assert files.read_json(run_dir / rundir.MANIFEST) == MANIFEST
    logged = [e["key"] for e in keys.read_events(run_dir / rundir.EVENTS)]
    assert logged.count(keys.RUN_START) == 1 and keys.RUN_STOP in logged
    assert rank_log(run_dir, 3).read_text() == "rank 3 training\nrank 3 done\n"
    # torchrun's own lines (unprefixed) are no rank's: they are kept beside, per node.
    assert rank_log(run_dir, 2).read_text() == "rank 2 training\nrank 2 done\n"
    launcher = (run_dir / "logs" / "node-1.unattributed.log").read_text()
    assert launcher == "launcher: starting workers\n"
    assert read_state(run_dir).state is JobState.SUCCEEDED
    assert cluster.job(job_api, RUN_ID) is None  # TrainJob has no TTL: fetch cleans up


def test_a_fetch_that_cannot_write_into_the_run_directory_is_one_line(
    cluster, tmp_path, monkeypatch
):
    """A logs/ folder planted as a link (or a full disk) refuses the fetch's writes: `runner
    fetch` says so in one line naming the path, never through the link, never a traceback."""
    from click.testing import CliRunner

    from runner import api
    from runner.cli import main

    backend = make_backend(cluster, tmp_path, "pytorchjob")
    _, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, "pytorchjob", phase="Succeeded")
    cluster.set_job_condition("pytorchjob", RUN_ID, SUCCESS["pytorchjob"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "logs").rmdir()
    (run_dir / "logs").symlink_to(elsewhere)
    monkeypatch.setattr(api, "backend_for", lambda *args, **kwargs: backend)
    result = CliRunner().invoke(main, ["--results-dir", str(run_dir.parent), "fetch", RUN_ID])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert f"cannot write {run_dir / 'logs'}: is a symbolic link" in result.output
    assert list(elsewhere.iterdir()) == []


def test_a_status_the_run_directory_cannot_record_is_one_line_naming_it(cluster, tmp_path):
    """`runner status` records what it saw in state.json: a disk that refuses (here a folder
    where the file goes) is a one-line error naming the path, not an OSError's traceback."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, "pytorchjob", phase="Running")
    (run_dir / "state.json").unlink()
    (run_dir / "state.json").mkdir()
    with pytest.raises(RunnerError, match=r"cannot write .*state\.json"):
        backend.status(handle)
    backend.close()


@pytest.mark.parametrize("job_api", APIS)
def test_a_complete_run_fetched_again_is_still_complete(cluster, tmp_path, job_api):
    """The first fetch deleted the job; a second (`runner fetch` twice, or after a TTL) has
    nothing to delete and nothing missing, and says so rather than fail on the delete."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, job_api, phase="Succeeded")
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    assert backend.fetch(handle, run_dir) == []
    assert cluster.job(job_api, RUN_ID) is None
    assert backend.fetch(handle, run_dir) == []
    assert read_state(run_dir).state is JobState.SUCCEEDED


DIVERGED = "diverged at epoch 1, step 3: loss nan"


@pytest.mark.parametrize(
    ("rank0", "reason"),
    [
        ("training\ndone\n", "every process exited 0, but rank 0 wrote no usable summary.json"),
        (
            rank0_stdout().replace('"diverged": null', f'"diverged": "{DIVERGED}"'),
            DIVERGED,
        ),
    ],
    ids=["no-summary", "diverged"],
)
@pytest.mark.parametrize("job_api", APIS)
def test_a_job_that_succeeded_without_a_good_summary_is_a_failed_run(
    cluster, tmp_path, job_api, rank0, reason
):
    """As a local run, a run succeeded only if rank 0 wrote its summary, and not one that says
    it diverged: the job's word is recorded only until fetch has read rank 0's whole log."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Succeeded"), log=pod_log(range(2), rank0))
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Succeeded"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    assert [s.state for s in backend.watch(handle)] == [JobState.SUCCEEDED]
    backend.fetch(handle, run_dir)
    recorded = read_state(run_dir)
    assert recorded is not None
    assert (recorded.state, recorded.reason, recorded.failed_rank) == (JobState.FAILED, reason, 0)
    assert backend.status(handle) == recorded


@pytest.mark.parametrize("job_api", APIS)
def test_a_fetch_again_once_the_pods_are_gone_keeps_the_failed_verdict(cluster, tmp_path, job_api):
    """The first fetch read rank 0's whole log and found no summary: FAILED. A later fetch
    that cannot read it (the pods deleted) has no ground to overturn that into the job's
    SUCCEEDED."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Succeeded"), log=pod_log(range(2), "done\n"))
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Succeeded"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    backend.fetch(handle, run_dir)
    first = read_state(run_dir)
    assert first is not None and first.state is JobState.FAILED
    cluster.remove_pods()
    with pytest.raises(RunnerError, match="its pods are gone"):
        backend.fetch(handle, run_dir)
    assert read_state(run_dir) == first
    assert backend.status(handle) == first


@pytest.mark.parametrize("job_api", APIS)
def test_a_fetch_once_the_pods_are_gone_keeps_the_failure_cause_status_saw(
    cluster, tmp_path, job_api
):
    """status read which node failed, and how, from its pod; the autoscaler then removed the
    node, and the pod with it. fetch reads only the job's bare Failed condition by then, which
    must not replace the cause in the record."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    container = "node" if job_api == "trainjob" else "pytorch"
    oom = [{"name": container, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]  # fmt: skip
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Running"), log=pod_log(range(2), "training\n"))
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Failed", containerStatuses=oom), log="")
    cluster.set_job_condition(job_api, RUN_ID, "Failed", "the job failed")
    seen = backend.status(handle)
    assert seen.exit_code == 137 and "node 1" in seen.reason and "OOMKilled" in seen.reason
    cluster.remove_pods()
    with pytest.raises(RunnerError, match="its pods are gone"):
        backend.fetch(handle, run_dir)
    assert read_state(run_dir) == seen


def test_fetch_prefers_the_results_store(cluster, tmp_path):
    store = tmp_path / "store"
    backend = make_backend(cluster, tmp_path / "results", "trainjob", store=f"file://{store}")
    handle, run_dir = submit(backend, tmp_path / "results", make_spec())
    (store / RUN_ID).mkdir(parents=True)
    from_store = {**SUMMARY, "from": "store"}
    (store / RUN_ID / "summary.json").write_text(json.dumps(from_store))
    run_pods(cluster, "trainjob", phase="Succeeded")
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    assert files.read_json(run_dir / rundir.SUMMARY) == from_store  # as the store had it
    # What the store lacks comes from the log.
    assert files.read_json(run_dir / rundir.MANIFEST) == MANIFEST


def test_logs_of_a_fetched_run_come_from_its_directory_without_the_cluster(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, "trainjob", phase="Succeeded")
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    asked = cluster.requests()
    assert list(backend.logs(handle, 3, follow=True)) == ["rank 3 training", "rank 3 done"]
    assert cluster.requests() == asked


def test_a_damaged_state_json_is_replaced_by_what_the_cluster_says(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    (run_dir / rundir.STATE).write_text('{"state": "SUCCEEDED", "schema_version": "x"}')
    assert backend.status(handle).state is JobState.PENDING
    assert read_state(run_dir).state is JobState.PENDING


def test_fetch_of_a_running_job_keeps_it_and_reports_what_is_missing(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod("trainjob", RUN_ID, 0), log="[rank0]:still going\n")
    missing = backend.fetch(handle, run_dir)
    assert "summary.json" in missing and "logs/rank-3.log" in missing
    assert cluster.job("trainjob", RUN_ID) is not None


def test_fetch_after_the_pods_are_gone_is_a_clear_error(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded")  # pods cleaned up meanwhile
    with pytest.raises(RunnerError) as err:
        backend.fetch(handle, run_dir)
    message = str(err.value)
    assert "pods are gone" in message and "logs/rank-0.log" in message
    assert "rerun" in message


def test_fetch_after_the_job_is_deleted_is_a_clear_error(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    backend.api.delete_job(RUN_ID)
    with pytest.raises(
        RunnerError, match=r"not on the cluster.*FAILED.*deleted before it finished"
    ):
        backend.fetch(handle, run_dir)
    assert read_state(run_dir).state is JobState.FAILED
