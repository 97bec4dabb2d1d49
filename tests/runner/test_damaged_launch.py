"""The local run's supervisor in a damaged or hostile run directory: a damaged launch.json, or one
rewritten before the supervisor reads it, a logs folder or a summary linked out of the run, and
a process that cannot start. The run fails in one line naming why, runs nothing it was not
asked to, writes nothing through a link, and leaves no process behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from contract import files
from tests.runner.damaged_runs import DAMAGE, invoke, two_runs


def _launch_damage(run_dir: Path, elsewhere: Path) -> dict[str, bytes | None]:
    """launch.json as a damaged disk or a person with write access to the run leaves it (None:
    a link to a well-formed request outside the run directory)."""
    process = {"argv": ["true"], "env": {}, "cwd": str(run_dir), "netns": None}
    good = {"schema_version": 1, "run_dir": str(run_dir), "link": None, "store_port": None,
            "min_workers": None, "processes": [process]}  # fmt: skip
    (elsewhere / "launch.json").write_text(json.dumps(good))

    def changed(**fields: object) -> bytes:
        return json.dumps({**good, **fields}).encode()

    return {
        "truncated": DAMAGE["truncated"],
        "a list": DAMAGE["a list"],
        "processes not a list": changed(processes=7),
        "argv not text": changed(processes=[{**process, "argv": [1, None]}]),
        "env not text": changed(processes=[{**process, "env": {"A": 1}}]),
        "a NUL in argv": changed(processes=[{**process, "argv": ["tr\x00ue"]}]),
        "a lone surrogate in env": changed(processes=[{**process, "env": {"X": "\ud800"}}]),
        "huge netns": changed(link="100mbit", processes=[{**process, "netns": 10**30}]),
        "huge store port": changed(store_port=10**30, min_workers=1),
        "min_workers over MAX": changed(store_port=29511, min_workers=5),
        "a link": None,
    }


def _supervise(
    run_dir: Path, out: Path, digest: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The local supervisor over `run_dir`, as submit starts it (the run's environment, the
    digest of its launch.json as it is now unless `digest` says otherwise)."""
    from runner.backends.local import launch, processes, supervisor

    if digest is None:
        try:
            digest = launch.digest((run_dir / "launch.json").read_bytes())
        except OSError:  # missing, or a link to nothing: the supervisor says which
            digest = launch.digest(b"")
    env = {**os.environ, **processes.run_env(run_dir.name, run_dir)}
    with out.open("ab") as log:
        return subprocess.run(
            supervisor.command(run_dir, digest), stdout=log, stderr=subprocess.STDOUT, env=env,
            timeout=120, check=False,
        )  # fmt: skip


DAMAGED_LAUNCH = [
    "truncated", "a list", "processes not a list", "argv not text", "env not text",
    "a NUL in argv", "a lone surrogate in env", "huge netns", "huge store port",
    "min_workers over MAX", "a link",
]  # fmt: skip


@pytest.mark.parametrize("damage", DAMAGED_LAUNCH)
def test_a_damaged_launch_json_fails_the_run_in_one_line_naming_it(tmp_path, damage):
    """The supervisor reads launch.json: garbage in it is the run's failure, said in one line
    naming the file, never a supervisor that died of a traceback."""
    _, bad = two_runs(tmp_path)
    (bad / "state.json").unlink()  # as submitted: no outcome yet
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = _launch_damage(bad, elsewhere)[damage]
    if data is None:
        (bad / "launch.json").symlink_to(elsewhere / "launch.json")
    else:
        (bad / "launch.json").write_bytes(data)
    supervisor_log = bad / "logs" / "supervisor.log"
    assert _supervise(bad, supervisor_log).returncode == 1
    result = invoke(tmp_path, "status", "cnn-digits-bad")
    assert "FAILED" in result.output and "launch.json" in result.output
    assert "supervisor died" not in result.output
    for text in (result.output, supervisor_log.read_text()):
        assert "Traceback" not in text
    state = files.read_json(bad / "state.json")
    assert state["state"] == "FAILED" and "launch.json" in state["reason"]
    assert "\n" not in state["reason"]


def _request(run_dir: Path, *argvs: list[str], cwd: str | None = None) -> None:
    processes = [{"argv": argv, "env": {}, "cwd": cwd or str(run_dir), "netns": None}
                 for argv in argvs]  # fmt: skip
    files.write_json(run_dir / "launch.json", {"schema_version": 1, "run_dir": str(run_dir),
                                              "processes": processes})  # fmt: skip


def test_a_launch_json_rewritten_before_the_supervisor_reads_it_runs_nothing(tmp_path):
    """Whoever may write the run directory rewrites launch.json between submit's write and
    the supervisor's read: the supervisor ran their command. It now runs only the bytes whose
    digest submit gave it, and says in one line that the file changed."""
    from runner.backends.local import launch

    _, bad = two_runs(tmp_path)
    (bad / "state.json").unlink()
    _request(bad, ["true"])
    submitted = launch.digest((bad / "launch.json").read_bytes())
    marker = tmp_path / "planted-command-ran"
    _request(bad, ["sh", "-c", f"touch {marker}"])  # the race, won by the rewrite
    assert _supervise(bad, tmp_path / "supervisor.out", submitted).returncode == 1
    assert not marker.exists()
    state = files.read_json(bad / "state.json")
    assert state["state"] == "FAILED" and "\n" not in state["reason"]
    assert state["reason"] == (
        f"cannot start the run: {bad / 'launch.json'}: is not the request `runner submit` "
        "wrote (changed since); submit the run again"
    )
    result = invoke(tmp_path, "status", "cnn-digits-bad")
    assert "FAILED" in result.output and "launch.json" in result.output
    assert "Traceback" not in (tmp_path / "supervisor.out").read_text()


def test_a_logs_folder_that_links_out_of_the_run_is_never_written_through(tmp_path):
    """run_dir/logs -> elsewhere: the workers' output would land outside the run directory."""
    _, bad = two_runs(tmp_path)
    (bad / "state.json").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(bad / "logs")
    (bad / "logs").symlink_to(elsewhere)
    _request(bad, ["sh", "-c", "echo leaked"])
    assert _supervise(bad, tmp_path / "supervisor.out").returncode == 1
    state = files.read_json(bad / "state.json")
    assert state["state"] == "FAILED"
    assert f"{bad / 'logs'}: is a symbolic link, which is never written through" in state["reason"]
    assert list(elsewhere.iterdir()) == []
    assert "Traceback" not in (tmp_path / "supervisor.out").read_text()


def test_a_process_that_cannot_start_fails_the_run_and_ends_those_started(tmp_path):
    """Process 1's working directory is gone: process 0, already started, does not outlive
    the run, and the run says which process and why."""
    _, bad = two_runs(tmp_path)
    (bad / "state.json").unlink()
    marker = f"stackbench-started-{tmp_path.name}"
    _request(bad, ["sh", "-c", f"exec -a {marker} sleep 60"], ["true"])
    launch = files.read_json(bad / "launch.json")
    launch["processes"][1]["cwd"] = str(tmp_path / "gone")
    files.write_json(bad / "launch.json", launch)
    assert _supervise(bad, tmp_path / "supervisor.out").returncode == 1
    state = files.read_json(bad / "state.json")
    assert state["state"] == "FAILED"
    assert state["reason"].startswith(f"cannot start process 1: {tmp_path / 'gone'}: No such")
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]
    assert "Traceback" not in (tmp_path / "supervisor.out").read_text()


def test_a_summary_that_links_out_of_the_run_is_no_summary_it_wrote(tmp_path):
    """Every process exited 0 and summary.json is a link to a file outside: SUCCEEDED would
    be a record that lies (is_file() followed the link)."""
    _, bad = two_runs(tmp_path)
    (bad / "state.json").unlink()
    (tmp_path / "outside.json").write_text((bad / "summary.json").read_text())
    (bad / "summary.json").unlink()
    (bad / "summary.json").symlink_to(tmp_path / "outside.json")
    _request(bad, ["true"], ["true"])
    assert _supervise(bad, tmp_path / "supervisor.out").returncode == 1
    state = files.read_json(bad / "state.json")
    assert state["state"] == "FAILED"
    assert state["reason"] == "every process exited 0 but the run wrote no summary.json"
