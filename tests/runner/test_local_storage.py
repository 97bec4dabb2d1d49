"""Commands on a results directory that refuses writes (a disk remounted read-only, a read-only
copy of someone's results, a full disk) and sweeps that cannot run here: one line, the right
exit code, nothing left behind, and every read still answered. Each test mounts its own small
tmpfs (needs root, as in CI); where mounting is not permitted the tests skip."""

from __future__ import annotations

import pytest

from tests.disks import fill, leftovers, read_only, runner, tmpfs
from tests.runner.rundirs import make_run


def test_a_dead_run_on_a_read_only_disk_is_listed_failed_not_a_traceback(tmp_path):
    # A RUNNING record whose supervisor is gone: reading it records FAILED, which the
    # read-only disk refuses; the listing and the status must still answer.
    with tmpfs(tmp_path / "disk", "4m") as disk:
        results = disk / "results"
        make_run(results, "cnn-digits-dead", 2, None, state="RUNNING", finished_at=None)
        make_run(results, "cnn-digits-done", 2, 10.0)
        read_only(disk)
        listed = runner(results, "runs")
        status = runner(results, "status", "cnn-digits-dead")
    for done in (listed, status):
        out = done.stdout + done.stderr
        assert "Traceback" not in out, out
        assert "FAILED" in out and "stopped before the run started" in out
        assert "not recorded in state.json: Read-only file system" in out
    assert listed.returncode == 0 and "target in 10.0 s" in listed.stdout  # the other run


def test_a_report_that_cannot_be_written_is_one_line_naming_the_disk(tmp_path):
    with tmpfs(tmp_path / "disk", "4m") as disk:
        results = disk / "results"
        make_run(results, "cnn-digits-a", 2, 10.0)
        read_only(disk)
        own_out = runner(results, "report", "cnn-digits-a", "--out", str(disk / "report"))
        default_out = runner(results, "report", "cnn-digits-a")
    assert own_out.returncode == 2, own_out.stderr  # the user's --out: bad input
    assert "Traceback" not in own_out.stderr
    assert "--out" in own_out.stderr and "Read-only file system" in own_out.stderr
    assert default_out.returncode == 1, default_out.stderr
    lines = default_out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Read-only file system" in lines[0] and "--out DIR" in lines[0]


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_sweep_on_a_disk_that_refuses_it_is_one_line_and_leaves_nothing(tmp_path, fault):
    with tmpfs(tmp_path / "disk", "256k") as disk:
        results = disk / "results"
        results.mkdir()
        fill(disk) if fault == "full" else read_only(disk)
        done = runner(results, "sweep", "cnn-digits", "--workers", "2", "--runs", "1")
        left = leftovers(results)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    why = "No space left on device" if fault == "full" else "Read-only file system"
    assert len(lines) == 1 and why in lines[0] and "--results-dir" in lines[0], lines
    assert left == []  # no study directory, no lock, no run directory


def test_a_sweep_without_its_data_fails_before_any_study_exists(tmp_path):
    # The data is checked for every cell as submit checks it, before the study is recorded:
    # not an empty study marked partial that `runner report` then has nothing in.
    empty = tmp_path / "data"
    empty.mkdir()
    results = tmp_path / "results"
    done = runner(results, "sweep", "vgg11-cifar10", "--workers", "2,4",
                  "--link", "25mbit,100mbit", STACKBENCH_DATA=str(empty))  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr  # bad input: no data
    assert "Traceback" not in done.stderr
    assert "runner data fetch cifar10" in done.stderr
    assert "study" not in done.stdout  # nothing announced
    assert not results.exists() or leftovers(results) == []
