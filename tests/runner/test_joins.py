"""`runner join`'s request (runner/backends/local/joins.py) in a damaged run directory: whatever
holds the name of its `requests` folder, the asker says so in one line, never with a
traceback, and creates nothing through a link."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from contract import files
from contract.rundir import STATE, JobState, JobStatus, read_state
from runner.backends.local import joins, launch, processes
from runner.backends.local.supervisor import command
from runner.errors import RunnerError


@pytest.mark.parametrize("damage", ["file", "dangling link", "link to a folder"])
def test_a_requests_name_that_is_not_a_folder_is_refused_in_one_line(tmp_path, damage):
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run_dir.mkdir()
    folder = run_dir / joins.REQUESTS
    if damage == "file":
        folder.write_text("not a folder")
    elif damage == "dangling link":
        folder.symlink_to(tmp_path / "missing")
    else:
        elsewhere.mkdir()
        folder.symlink_to(elsewhere)
    with pytest.raises(RunnerError, match=r"requests is not a directory; remove it and ask again"):
        joins.ask(run_dir, timeout_s=0.2)
    assert not (tmp_path / "missing").exists()
    assert not elsewhere.exists() or os.listdir(elsewhere) == []


def test_a_run_directory_that_refuses_writes_is_named_in_one_line(tmp_path: Path):
    if os.geteuid() == 0:
        pytest.skip("root writes through permissions")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_dir.chmod(0o500)
    try:
        with pytest.raises(RunnerError, match=r"cannot write .*requests: Permission denied"):
            joins.ask(run_dir, timeout_s=0.2)
    finally:
        run_dir.chmod(0o700)


PIDS_CGROUPS = Path("/sys/fs/cgroup/pids")  # cgroup v1's pids controller, as here


@contextlib.contextmanager
def _task_limit(pid: int, spare: int) -> Iterator[Path]:
    """Process `pid` (all its threads) in a pids cgroup of its own that takes `spare` more
    tasks than it has now: the kernel's limit a container puts on processes and threads.
    Skips where no such cgroup can be made (not root, cgroup v2 only)."""
    group = PIDS_CGROUPS / f"stackbench-test-{secrets.token_hex(4)}"
    try:
        group.mkdir()
    except OSError as err:
        pytest.skip(f"cannot make a pids cgroup: {err}")
    try:
        (group / "cgroup.procs").write_text(str(pid))
        tasks = len((group / "tasks").read_text().split())
        (group / "pids.max").write_text(str(tasks + spare))
        yield group
    finally:
        for task in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # gone meanwhile
                (PIDS_CGROUPS / "cgroup.procs").write_text(task)
        group.rmdir()


def test_a_joiner_the_system_cannot_watch_is_a_refusal_and_the_run_goes_on(tmp_path):
    """A supervisor at its task limit (a container's pids limit): the joiner's process can be
    forked, but not the thread that watches it. That RuntimeError escaped the join and ended
    the supervisor with a traceback, its run left RUNNING in its record; it is now the
    asker's one-line refusal, the joiner is not left running unwatched, and the run goes on."""
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / joins.REQUESTS).mkdir()
    sleeper = {"argv": ["sleep", "60"], "env": {}, "cwd": str(run_dir)}
    leaver = {"argv": ["true"], "env": {}, "cwd": str(run_dir)}  # leaves room for a joiner
    files.write_json(run_dir / "launch.json", {"run_dir": str(run_dir), "min_workers": 1,
                                               "processes": [sleeper, leaver]})  # fmt: skip
    env = {**os.environ, **processes.run_env(run_dir.name, run_dir)}
    log = tmp_path / "supervisor.out"
    with open(log, "wb") as out:
        digest = launch.digest((run_dir / "launch.json").read_bytes())
        supervisor = subprocess.Popen(
            command(run_dir, digest), stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        while (read_state(run_dir) or JobStatus(JobState.PENDING)).state is not JobState.RUNNING:
            assert supervisor.poll() is None, log.read_text()
            time.sleep(0.05)
        while len(psutil.Process(supervisor.pid).children()) > 1:  # until `true` has exited
            time.sleep(0.05)
        token = f"join-{secrets.token_hex(8)}"
        answer = run_dir / joins.REQUESTS / (token + joins.ANSWER_SUFFIX)
        with _task_limit(supervisor.pid, spare=1):  # the joiner's process, not its watcher
            (run_dir / joins.REQUESTS / token).touch()
            while not answer.exists():
                assert supervisor.poll() is None, log.read_text()
                time.sleep(0.05)
        said = files.read_json(answer)
        assert said["started"] is False, said
        assert said["message"].startswith("cannot start a worker: "), said
        assert len(said["message"].splitlines()) == 1
        time.sleep(0.5)
        assert supervisor.poll() is None, log.read_text()  # the run goes on
        assert read_state(run_dir).state is JobState.RUNNING  # type: ignore[union-attr]
        children = psutil.Process(supervisor.pid).children()
        assert [p.cmdline() for p in children] == [sleeper["argv"]]  # worker 0 alone
    finally:
        supervisor.terminate()
        supervisor.wait(timeout=60)
    assert files.read_json(run_dir / STATE)["state"] == "CANCELLED"
    assert "Traceback" not in log.read_text()


def test_a_flood_of_requests_is_answered_a_bounded_pass_at_a_time_each_once(tmp_path):
    """Anyone who may write the run directory can drop thousands of request files (and
    other names, and links): each pass of the supervisor's loop answers at most
    ANSWERS_PER_PASS of them, so the loop still watches the workers and cancels between
    passes; every request is answered once, a link or another name never, a request its
    asker took back before its turn not at all, and a new one is seen at the next pass."""
    from contract.network import UNSHAPED_LOOPBACK
    from runner.backends.base import LocalRequest, Process
    from runner.backends.local.launch import Started

    run_dir = tmp_path / "run"
    folder = run_dir / joins.REQUESTS
    folder.mkdir(parents=True)
    flood = sorted(f"join-{i:016x}" for i in range(10 * joins.ANSWERS_PER_PASS + 3))
    for token in flood:
        (folder / token).touch()
    for i in range(100):
        (folder / f"other-{i}").touch()
        (folder / f"join-{i + 10**6:016x}").symlink_to(tmp_path / "elsewhere")
    sleeper = Process(("sleep", "60"), {}, str(run_dir))
    request = LocalRequest(str(run_dir), (sleeper, sleeper), min_workers=1)
    exits = processes.Exits()
    for _ in request.processes:  # a full run: every request is refused, nothing started
        exits.add(subprocess.Popen(sleeper.argv))
    server = joins.Server(run_dir)
    try:
        answered: list[str] = []
        for i in range(11):
            if i == 1:  # listed at the first pass; its asker gave up before its turn
                (folder / flood[-1]).unlink()
            before = _answers(folder)
            server.serve(request, Started(None, UNSHAPED_LOOPBACK), exits)
            new = sorted(set(_answers(folder)) - set(before))
            assert len(new) <= joins.ANSWERS_PER_PASS
            answered += new
        assert answered == flood[:-1]  # each once, in order; the withdrawn one never
        assert len(exits.processes) == 2
        late = "join-" + "f" * 16
        (folder / late).touch()
        server.serve(request, Started(None, UNSHAPED_LOOPBACK), exits)
        assert _answers(folder)[-1] == late
        assert files.read_json(folder / (late + joins.ANSWER_SUFFIX))["started"] is False
    finally:
        processes.end([psutil.Process(p.pid) for p in exits.processes], 5.0)
        for p in exits.processes:
            p.wait()
    assert not (tmp_path / "elsewhere").exists()


def _answers(folder: Path) -> list[str]:
    """The tokens answered in `folder`, sorted."""
    names = os.listdir(folder)
    return sorted(
        n.removesuffix(joins.ANSWER_SUFFIX) for n in names if n.endswith(joins.ANSWER_SUFFIX)
    )
