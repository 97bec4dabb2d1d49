"""The dashboard's HTTP API against the real server on 127.0.0.1, over run directories in the
real formats (tests/runner/rundirs.py): the runs table, a run's detail, curves and log, compare
and studies. Damaged runs are in test_server_damaged.py; what the server refuses to serve, and
to whom, in test_server_security.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.job.spec import MAX_WORLD_SIZE
from runner.results import rundir, study
from tests.runner.dashboard.conftest import get, get_json
from tests.runner.rundirs import make_run


def test_runs_lists_every_run_with_state_and_headline(results, dashboard):
    make_run(results, "cnn-a", 2, 12.5)
    make_run(results, "cnn-b", 4, None, state="FAILED", created_at="2026-01-02T00:00:00+00:00")
    (results / study.STUDIES_DIR).mkdir()  # not a run

    rows = {r["run_id"]: r for r in get_json(dashboard + "api/runs")["rows"]}

    assert set(rows) == {"cnn-a", "cnn-b"}
    a, b = rows["cnn-a"], rows["cnn-b"]
    assert (a["state"], a["benchmark"], a["division"], a["workers"]) == (
        "SUCCEEDED", "cnn-digits", "closed", 2,
    )  # fmt: skip
    assert a["reached"] and a["time_to_target_s"] == 12.5 and a["value"] == 0.96
    assert (b["state"], b["reached"], b["time_to_target_s"], b["value"]) == (
        "FAILED",
        False,
        None,
        0.9,
    )
    assert [r["run_id"] for r in get_json(dashboard + "api/runs")["rows"]] == [
        "cnn-b",
        "cnn-a",
    ]  # newest first


def test_run_detail_has_config_summary_manifest_files_and_logs(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 12.5, overrides=("lr=0.1",))
    (run_dir / "logs" / "rank-0.log").write_text("hello from rank 0\n")

    run = get_json(dashboard + "api/runs/cnn-a")

    assert run["config"]["lr"] == 0.1 and run["overrides"] == [["lr", "0.1"]]
    assert run["summary"]["time_to_target_s"] == 12.5
    assert run["manifest"]["code_version"] == "abc123"
    assert run["logs"] == ["rank-0.log", "rank-1.log"]  # every rank's, present or not
    paths = {f["path"]: f for f in run["files"]}
    assert {"job.json", "state.json", "summary.json", "events.jsonl", "logs/rank-0.log"} <= set(
        paths
    )
    assert paths["logs/rank-0.log"]["size"] == len("hello from rank 0\n")


def test_failed_run_carries_its_reason_and_failed_rank(results, dashboard):
    from contract.rundir import JobState, JobStatus

    run_dir = make_run(results, "cnn-a", 2, None, state="FAILED")
    reason = "rank 1 exited with code -9: killed"
    rundir.write_state(run_dir, JobStatus(JobState.FAILED, reason, failed_rank=1, exit_code=-9))

    run = get_json(dashboard + "api/runs/cnn-a")

    assert (run["state"], run["reason"], run["failed_rank"], run["exit_code"]) == (
        "FAILED", reason, 1, -9,
    )  # fmt: skip


def test_curves_are_seconds_since_run_start(results, dashboard):
    make_run(results, "cnn-a", 2, 30.0)  # epochs end at 10, 20 and 30 s

    curves = get_json(dashboard + "api/runs/cnn-a/curves")

    assert curves["train_loss"] == [[10.0, 1.0], [20.0, 0.5], [30.0, 1 / 3]]
    assert [t for t, _ in curves["eval_accuracy"]] == [10.0, 20.0, 30.0]


def test_log_reads_from_an_offset(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    (run_dir / "logs" / "rank-1.log").write_text("first line\nsecond line\n")

    whole = get_json(dashboard + "api/runs/cnn-a/logs/rank-1.log")
    rest = get_json(dashboard + "api/runs/cnn-a/logs/rank-1.log?offset=11")

    assert whole["text"] == "first line\nsecond line\n" and whole["offset"] == whole["size"] == 23
    assert rest["text"] == "second line\n"


@pytest.mark.parametrize("offset", ["-1", "x", "%C2%B2", "9" * 5000])
def test_an_offset_that_is_no_byte_count_is_a_400_not_a_server_error(results, dashboard, offset):
    # '²' passes str.isdigit() and 5000 digits pass it too; int() refuses both.
    make_run(results, "cnn-a", 2, 12.5)
    status, _, body = get(dashboard + f"api/runs/cnn-a/logs/rank-0.log?offset={offset}")
    assert status == 400 and b"byte count" in body


def test_a_run_of_an_absurd_world_size_offers_a_bounded_list_of_logs(results, dashboard):
    # job.json may be hostile: a tab per rank of the largest run a job.json may describe was
    # 100,000 names (and 10**12 ranks, before Placement refused them, the machine's memory).
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    job = json.loads((run_dir / "job.json").read_text())
    job["placement"] |= {"num_nodes": 100, "procs_per_node": 1000}
    (run_dir / "job.json").write_text(json.dumps(job))

    run = get_json(dashboard + "api/runs/cnn-a")

    assert run["workers"] == MAX_WORLD_SIZE
    assert run["logs"][:2] == ["rank-0.log", "rank-1.log"] and len(run["logs"]) <= 1024


def test_compare_marks_the_config_keys_that_differ(results, dashboard):
    make_run(results, "a", 2, 12.5, overrides=("lr=0.1",))
    make_run(results, "b", 2, 14.0, overrides=("lr=0.2",))

    page = get_json(dashboard + "api/compare?run=a&run=b")

    config = {c["key"]: c for c in page["config"]}
    assert config["lr"] == {"key": "lr", "values": [0.1, 0.2], "differs": True}
    assert not config["batch_size"]["differs"] and not config["run: workers"]["differs"]
    assert [r["run_id"] for r in page["runs"]] == ["a", "b"]
    run_times = next(s for s in page["summary"] if s["label"] == "run time")
    assert run_times["values"] == [12.5, 14.0]
    # tests/runner/rundirs.py: 100 steps of 2 ms forward, 1 ms communication...
    assert page["phase_ms"][0]["forward"] == pytest.approx(2.0)
    assert page["phase_ms"][1]["communication"] == pytest.approx(1.0)


def test_compare_of_an_unknown_run_is_not_found(results, dashboard):
    make_run(results, "a", 2, 12.5)

    assert get(dashboard + "api/compare?run=a&run=nope")[0] == 404


def make_study(results: Path, times_s: list[float | None]) -> str:
    """A study of cnn-digits on 2 workers whose runs took `times_s` to the target."""
    planned = []
    for i, t in enumerate(times_s):
        run_id = f"run-{i}"
        make_run(results, run_id, 2, t, created_at=f"2026-01-01T00:0{i}:00+00:00")
        planned.append(study.PlannedRun(2, (), i, i, run_id, "SUCCEEDED"))
    record = study.Study("study-x", "cnn-digits", (2,), {}, (), len(times_s), "local",
                         tuple(planned), state="complete")  # fmt: skip
    study.save(results, record)
    return record.study_id


def test_a_study_page_has_the_reports_tables_and_flags_the_outlier(results, dashboard):
    make_study(results, [10.0, 10.4, 9.8, 10.1, 25.0])

    [listed] = get_json(dashboard + "api/studies")
    page = get_json(dashboard + "api/studies/study-x")

    assert (listed["study_id"], listed["state"], listed["submitted"]) == ("study-x", "complete", 5)
    report = page["report"]
    titles = [t["title"] for t in report["tables"]]
    assert titles == ["Time to accuracy per cell", "Runs", "Reproducibility"]
    [cell] = report["cells"]
    by_run = {r["run_id"]: r for r in cell["runs"]}
    assert by_run["run-4"]["flag"] == "slow outlier"
    assert [r for r in by_run if by_run[r]["flag"]] == ["run-4"]
    # The MLPerf mean (5 runs) drops the fastest and the slowest; the flag is separate.
    assert {r for r in by_run if by_run[r]["dropped"]} == {"run-2", "run-4"}
    assert cell["mean_s"] == (10.0 + 10.4 + 10.1) / 3


def test_a_study_with_a_damaged_run_still_reports_the_others(results, dashboard):
    make_study(results, [10.0, 10.4, 9.8])
    (results / "run-1" / "summary.json").write_text("not json")

    page = get_json(dashboard + "api/studies/study-x")

    assert [p["run_id"] for p in page["problems"]] == ["run-1"]
    assert page["problems"][0]["file"] == "summary.json"
    [cell] = page["report"]["cells"]
    assert [r["run_id"] for r in cell["runs"]] == ["run-0", "run-2"]


def test_a_damaged_study_record_is_listed_with_its_problem(results, dashboard):
    (results / "studies" / "study-bad").mkdir(parents=True)
    (results / "studies" / "study-bad" / "study.json").write_text('{"runs": 3}')

    [listed] = get_json(dashboard + "api/studies")

    assert (
        listed["study_id"] == "study-bad"
        and "not a study record" in listed["damaged"][0]["problem"]
    )
    assert get(dashboard + "api/studies/study-bad")[0] == 403
