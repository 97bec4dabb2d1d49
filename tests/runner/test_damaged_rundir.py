"""Damaged and hostile run directories under the commands that read them: one bad file never
breaks commands about other runs; commands about the damaged run say which file and what is
wrong, without a traceback; links out of the run are never followed, and a huge events file or
log is followed a chunk at a time. The supervisor's side is in test_damaged_launch.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contract import files
from contract.events import read_events
from contract.rundir import JobState, JobStatus
from tests.runner.damaged_runs import DAMAGE, invoke, two_runs
from tests.runner.rundirs import make_run


@pytest.mark.parametrize("name", ["job.json", "state.json", "summary.json"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_runs_lists_a_damaged_run_beside_the_good_one(tmp_path, name, damage):
    _, bad = two_runs(tmp_path)
    (bad / name).write_bytes(DAMAGE[damage])
    result = invoke(tmp_path, "runs")
    assert result.exit_code == 0, result.output
    assert "cnn-digits-good" in result.output and "target in 10.0 s" in result.output
    assert "cnn-digits-bad" in result.output
    assert "Traceback" not in result.output
    assert name in result.output
    if name != "summary.json":
        assert "DAMAGED" in result.output
    else:  # the run itself is fine: its state is still shown
        assert result.output.count("SUCCEEDED") == 2
    listed = json.loads(invoke(tmp_path, "runs", "--json").output)
    assert {r.get("run_id") or Path(r["run_dir"]).name for r in listed} == {
        "cnn-digits-good",
        "cnn-digits-bad",
    }


def test_a_job_of_an_absurd_world_size_is_damaged_and_every_command_about_it_returns(tmp_path):
    """Anything that goes over the ranks (their logs, missing results) would never end."""
    _, bad = two_runs(tmp_path)
    job = files.read_json(bad / "job.json")
    job["placement"]["num_nodes"] = 10**12
    files.write_json(bad / "job.json", job)
    for args in (("runs",), ("status", "cnn-digits-bad"), ("report", "cnn-digits-bad")):
        result = invoke(tmp_path, *args)
        assert "Traceback" not in result.output
        assert "job.json" in result.output and "at most 100000 workers" in result.output


@pytest.mark.parametrize("name", ["job.json", "state.json"])
def test_status_of_a_damaged_run_names_the_file_in_one_line(tmp_path, name):
    _, bad = two_runs(tmp_path)
    (bad / name).write_bytes(DAMAGE["truncated"])
    result = invoke(tmp_path, "status", "cnn-digits-bad")
    assert result.exit_code == 1
    assert name in result.output and "not valid JSON" in result.output
    assert "Traceback" not in result.output
    assert invoke(tmp_path, "status", "cnn-digits-good").exit_code == 0


def test_a_summary_without_its_target_is_reported_not_a_crash(tmp_path):
    _, bad = two_runs(tmp_path)
    summary = files.read_json(bad / "summary.json")
    del summary["target"]
    files.write_json(bad / "summary.json", summary)
    result = invoke(tmp_path, "runs")
    assert result.exit_code == 0
    assert "summary.json: field 'target' is not a JSON object" in result.output


def test_a_record_that_links_out_of_the_run_directory_is_never_followed(tmp_path):
    _, bad = two_runs(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(JobStatus(JobState.SUCCEEDED, "from outside").to_dict()))
    (bad / "state.json").unlink()
    (bad / "state.json").symlink_to(secret)
    result = invoke(tmp_path, "runs")
    assert "from outside" not in result.output
    assert "symbolic link" in result.output


def test_a_newer_schema_version_asks_for_an_upgrade(tmp_path):
    _, bad = two_runs(tmp_path)
    state = files.read_json(bad / "state.json")
    files.write_json(bad / "state.json", {**state, "schema_version": 99})
    result = invoke(tmp_path, "status", "cnn-digits-bad")
    assert result.exit_code == 1 and "upgrade stackbench" in result.output


def test_events_with_bad_bytes_and_a_partial_last_line_keep_every_whole_event(tmp_path):
    path = tmp_path / "events.jsonl"
    good = json.dumps({"key": "run_start", "time_ms": 1, "value": None, "metadata": {}})
    stop = json.dumps({"key": "run_stop", "time_ms": 2, "value": None, "metadata": {}})
    path.write_bytes(
        good.encode() + b"\n\xff\xfe not json \x00\n" + b'{"key": "epoch_start"}\n'
        + stop.encode() + b"\n" + b'{"key": "epoch_st'
    )  # fmt: skip
    assert [e["key"] for e in read_events(path)] == ["run_start", "run_stop"]


def test_a_report_leaves_a_damaged_run_out_and_says_which(tmp_path):
    from runner.results import study as studies

    for i, tta in enumerate((10.0, 11.0, 12.0)):
        make_run(tmp_path, f"cnn-digits-r{i}", 2, tta)
    planned = tuple(
        studies.replace(p, run_id=f"cnn-digits-r{i}", state="SUCCEEDED")
        for i, p in enumerate(studies.plan((2,), {}, 3, 0))
    )
    study = studies.Study("study-d", "cnn-digits", (2,), {}, (), 3, "local", planned, "complete")
    studies.save(tmp_path, study)
    (tmp_path / "cnn-digits-r1" / "summary.json").write_bytes(DAMAGE["truncated"])
    result = invoke(tmp_path, "report", "study-d", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "left out, damaged: cnn-digits-r1: summary.json is not valid JSON" in result.output
    assert (tmp_path / "out" / "report.md").is_file()


@pytest.mark.parametrize("name", ["job.json", "state.json", "summary.json"])
def test_a_record_that_is_a_directory_is_damage_not_a_crash(tmp_path, name):
    _, bad = two_runs(tmp_path)
    (bad / name).unlink()
    (bad / name).mkdir()  # os.fdopen refuses a directory with IsADirectoryError
    result = invoke(tmp_path, "runs")
    assert result.exit_code == 0, result.output
    assert f"{name}: is not a regular file" in result.output
    assert "target in 10.0 s" in result.output  # the good run


def test_a_number_too_large_for_a_float_is_damage_not_a_crash(tmp_path):
    # JSON allows integers of hundreds of digits; math.isfinite and float() raise
    # OverflowError on them, which escaped every reader that expected ValueError.
    huge = "1" + "0" * 400
    _, bad = two_runs(tmp_path)
    text = (bad / "summary.json").read_text()
    (bad / "summary.json").write_text(
        re.sub(r'"run_time_s": [0-9.]+', f'"run_time_s": {huge}', text)
    )
    good_events = tmp_path / "cnn-digits-good" / "events.jsonl"
    with good_events.open("a") as f:
        f.write(f'{{"key": "train_loss", "time_ms": {huge}, "value": 0.5}}\n')
        f.write(f'{{"key": "train_loss", "time_ms": 1700000000000, "value": {huge}}}\n')
    result = invoke(tmp_path, "runs")
    assert result.exit_code == 0, result.output
    assert "summary.json: field 'run_time_s' is not a finite number" in result.output
    assert not any(e["time_ms"] == int(huge) for e in read_events(good_events))
    out = tmp_path / "out"
    reported = invoke(tmp_path, "report", "cnn-digits-good", "--out", str(out))
    assert reported.exit_code == 0, reported.output
    assert (out / "curves.png").stat().st_size > 0


@pytest.mark.parametrize("name", ["job.json", "state.json", "summary.json"])
def test_a_record_that_is_a_socket_is_damage_not_a_crash(tmp_path, name):
    import socket

    _, bad = two_runs(tmp_path)
    (bad / name).unlink()
    with socket.socket(socket.AF_UNIX) as sock:  # open() of a socket fails with ENXIO
        sock.bind(str(bad / name))
        result = invoke(tmp_path, "runs")
        assert result.exit_code == 0, result.output
        assert f"{name}: cannot be read (No such device or address)" in result.output
        assert "target in 10.0 s" in result.output  # the good run
        status = invoke(tmp_path, "status", "cnn-digits-bad")
        assert "Traceback" not in status.output
        assert name in status.output if name != "summary.json" else "SUCCEEDED" in status.output


@pytest.mark.parametrize("follow", [(), ("--follow",)])
def test_a_fifo_in_place_of_a_rank_log_is_damage_not_a_command_that_hangs(tmp_path, follow):
    import os
    import subprocess
    import sys

    _, bad = two_runs(tmp_path)
    os.mkfifo(bad / "logs" / "rank-0.log")  # open() for reading waited for a writer, for ever
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "--results-dir", str(tmp_path), "logs",
         "cnn-digits-bad", "--rank", "0", *follow],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "rank-0.log: is not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("created_at", 5),  # sorting the runs compared it with the others' text: a TypeError
        ("division", ["open"]),
        ("placement.num_nodes", 1.5),  # it sized the run page's list of rank logs
        ("placement.procs_per_node", True),
    ],
)
def test_a_job_record_of_the_wrong_types_is_damage_not_a_crash(tmp_path, field, value):
    _, bad = two_runs(tmp_path)
    job = json.loads((bad / "job.json").read_text())
    outer, _, inner = field.rpartition(".")
    (job[outer] if outer else job)[inner] = value
    (bad / "job.json").write_text(json.dumps(job))
    result = invoke(tmp_path, "runs")
    assert result.exit_code == 0, result.output
    assert "DAMAGED" in result.output and "does not describe a job" in result.output
    assert "target in 10.0 s" in result.output  # the good run


def test_a_failed_run_whose_summary_reached_the_target_lists_no_time_to_target(tmp_path):
    # Rank 0 wrote "reached" before another rank failed: a miss, as the report counts it.
    _, bad = two_runs(tmp_path)
    files.write_json(bad / "state.json", JobStatus(JobState.FAILED, "rank 1 exited").to_dict())
    result = invoke(tmp_path, "runs")
    assert result.exit_code == 0, result.output
    assert "target in 12.0 s" not in result.output and "no time to target" in result.output
    assert "target in 10.0 s" in result.output  # the good run


# Follows a run's events and a rank log in a process that may not hold 1 GiB (RLIMIT_AS).
_FOLLOWS_IN_BOUNDED_MEMORY = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
from runner.backends.local.tail import EventTail, follow_lines
events = EventTail(Path(sys.argv[1])).read_new()
lines = [len(line) for line in follow_lines(Path(sys.argv[2]), lambda: True, False)]
print([e["key"] for e in events], lines[0], max(lines))
"""


def test_a_huge_events_file_or_log_is_followed_a_chunk_at_a_time(tmp_path):
    """events.jsonl or a rank log made huge (here sparse: 1 GiB of NULs without a newline,
    which costs no disk): the follower read all of it at once, MemoryError or the OOM
    killer (and a killed follower cancels its run)."""
    events, log = tmp_path / "events.jsonl", tmp_path / "rank-0.log"
    with events.open("wb") as f:
        f.write(b'{"key": "run_start", "time_ms": 1}\n')
        f.seek(1 << 30)
        f.write(b'\n{"key": "run_stop", "time_ms": 2}\n')
    with log.open("wb") as f:
        f.write(b"first\n")
        f.truncate(1 << 30)
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _FOLLOWS_IN_BOUNDED_MEMORY, str(events), str(log)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-1000:]
    keys, first, longest = done.stdout.rsplit(" ", 2)
    assert (keys, first) == ("['run_start', 'run_stop']", "5")
    assert int(longest) < 2 << 20  # a line that never ends, shown in pieces


@pytest.mark.parametrize("follow", [(), ("--follow",)])
def test_logs_never_shows_a_file_through_a_logs_folder_linked_out_of_the_run(tmp_path, follow):
    _, bad = two_runs(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "rank-0.log").write_text("a secret from outside the run\n")
    shutil.rmtree(bad / "logs")
    (bad / "logs").symlink_to(outside)
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "--results-dir", str(tmp_path), "logs",
         "cnn-digits-bad", "--rank", "0", *follow],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "secret" not in done.stdout + done.stderr
    assert done.returncode == 1, done.stderr
    assert f"{bad / 'logs'}: is a symbolic link, which is never followed" in done.stderr
    assert "Traceback" not in done.stderr
