"""What a cluster's job can plant in a results store cannot be turned against the user: a store
built by the test the way a pod on a hostPath could (links out, a linked run directory, FIFOs,
devices, sockets, a huge sparse file, a file swapped between check and open, `..`), cloud CLIs
streaming too much, and a fetch from a hostile store that keeps nothing of it. Pod logs that
forge other ranks' lines are in test_kubernetes_hostile_logs.py, API objects of the wrong shape
in test_kubernetes_hostile_objects.py."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from contract import files
from contract.rundir import EVENTS, MANIFEST, SUMMARY
from runner.backends.kubernetes import results_store
from runner.backends.kubernetes.records import Expected, check_file
from runner.backends.kubernetes.results_store import StoreLimits, fetch_results
from runner.errors import RunnerError
from runner.results import rundir
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit
from tests.runner.k8s_runlogs import MANIFEST as GOOD_MANIFEST
from tests.runner.k8s_runlogs import SUMMARY as GOOD_SUMMARY
from tests.runner.k8s_runlogs import pod_log, rank0_stdout

pytestmark = pytest.mark.timeout(60)
NAMES = (EVENTS, SUMMARY, MANIFEST)
EXPECTED = Expected(RUN_ID, 4)
SECRET = "the user's secret token\n"


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
