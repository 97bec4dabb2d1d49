import json

import pytest

from contract import files
from contract.rundir import JobState, JobStatus, read_state
from runner.errors import RunnerError, RunNotFound
from runner.job.spec import resolve
from runner.results import rundir


def _make(root, run_id):
    spec = resolve("cnn-digits", run_id=run_id)
    return rundir.create(root, rundir.RunRecord(spec, "local", f"local://{run_id}"))


def test_create_refuses_to_reuse_a_run_directory(tmp_path):
    _make(tmp_path, "cnn-digits-a")
    with pytest.raises(RunnerError, match="already exists"):
        _make(tmp_path, "cnn-digits-a")


def test_find_accepts_an_unambiguous_prefix_and_explains_ambiguity(tmp_path):
    _make(tmp_path, "cnn-digits-20260101-000000-aaaa")
    _make(tmp_path, "cnn-digits-20260101-000000-bbbb")
    assert rundir.find(tmp_path, "cnn-digits-20260101-000000-a").name.endswith("aaaa")
    with pytest.raises(RunNotFound, match="matches several runs"):
        rundir.find(tmp_path, "cnn-digits-2026")
    with pytest.raises(RunNotFound, match="runner runs"):
        rundir.find(tmp_path, "nothing-like-it")


def test_record_and_state_round_trip(tmp_path):
    run_dir = _make(tmp_path, "cnn-digits-x")
    record = rundir.read_record(run_dir)
    assert record.handle == "local://cnn-digits-x"
    status = JobStatus(JobState.FAILED, "rank 1 exited with code -9", failed_rank=1, exit_code=-9)
    rundir.write_state(run_dir, status)
    assert read_state(run_dir) == status


def test_missing_results_lists_every_absent_file_and_event(tmp_path):
    run_dir = _make(tmp_path, "cnn-digits-y")
    (run_dir / rundir.EVENTS).write_text(json.dumps({"key": "run_start"}) + "\n")
    missing = rundir.missing_results(run_dir, world_size=2)
    assert "summary.json" in missing
    assert "manifest.json" in missing
    assert "logs/rank-0.log" in missing and "logs/rank-1.log" in missing
    assert any("run_stop" in item for item in missing)
    assert "job.json" not in missing


def test_missing_results_of_an_absurd_world_size_names_a_few_logs_and_counts_the_rest(tmp_path):
    # job.json may be hostile; a loop over every rank of 10**12 never ended (`runner fetch`).
    run_dir = _make(tmp_path, "cnn-digits-z")
    (run_dir / "logs" / "rank-1.log").write_text("here\n")
    (run_dir / "logs" / "rank-3.log").symlink_to(run_dir / "logs" / "rank-1.log")  # not a log
    missing = rundir.missing_results(run_dir, world_size=10**12)
    logs = [item for item in missing if item.startswith("logs/")]
    assert logs[:3] == ["logs/rank-0.log", "logs/rank-2.log", "logs/rank-3.log"]
    assert len(logs) == rundir.MAX_MISSING_LOGS_NAMED + 1
    assert logs[-1] == f"logs/rank-N.log of {10**12 - 1 - rundir.MAX_MISSING_LOGS_NAMED} more ranks"


def test_write_json_leaves_no_temporary_file_behind(tmp_path):
    files.write_json(tmp_path / "a.json", {"x": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    assert files.read_json(tmp_path / "a.json") == {"x": 1}
