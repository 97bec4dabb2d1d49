"""The dashboard's HTTP API over damaged run directories: a damaged run (a bad record, a job
record of the wrong types, a state that cannot be opened) shows as damaged and breaks nothing
else, and a failed run shows no time to target whatever its summary says."""

from __future__ import annotations

import json
from pathlib import Path

from runner.results import rundir
from tests.runner.damaged_runs import unix_socket_at
from tests.runner.dashboard.conftest import get, get_json
from tests.runner.rundirs import make_run


def test_a_damaged_run_shows_as_damaged_and_breaks_nothing_else(results, dashboard):
    make_run(results, "good", 2, 12.5)
    garbled = make_run(results, "garbled", 2, 12.5)
    (garbled / "summary.json").write_bytes(b'{"final": {"value": 0.9')  # cut short by a crash
    no_job = make_run(results, "no-job", 2, 12.5)
    (no_job / "job.json").unlink()
    (make_run(results, "list-job", 2, 12.5) / "job.json").write_text("[1, 2]")
    (results / "linked").symlink_to(results / "good")

    rows = {r["run_id"]: r for r in get_json(dashboard + "api/runs")["rows"]}

    assert rows["good"]["state"] == "SUCCEEDED" and not rows["good"]["damaged"]
    for run_id, file, words in [
        ("garbled", "summary.json", "not valid JSON"),
        ("no-job", "job.json", "missing"),
        ("list-job", "job.json", "not an object"),
        ("linked", "linked", "symbolic link"),
    ]:
        assert rows[run_id]["state"] == "DAMAGED", run_id
        [problem] = rows[run_id]["damaged"]
        assert problem["file"] == file and words in problem["problem"], problem
    page = get_json(dashboard + "api/runs/garbled")  # its page opens and says why
    assert page["state"] == "DAMAGED" and page["summary"] is None
    assert page["config"]["lr"] == 0.05  # what is readable still shows
    assert get(dashboard + "api/runs/linked")[0] == 404  # never followed


def _edit_job(run_dir: Path, **changes: object) -> None:
    job = json.loads((run_dir / "job.json").read_text())
    (run_dir / "job.json").write_text(json.dumps(job | changes))


def test_a_job_record_of_the_wrong_types_is_damaged_and_every_page_still_served(results, dashboard):
    # JobSpec.from_dict takes these on trust: a created_at that was a number sorted against
    # the others' text was a 500 for the whole table, and 1.5 nodes a 500 for the run's page.
    make_run(results, "good", 2, 12.5)
    _edit_job(make_run(results, "numbered", 2, 12.5), created_at=5)
    placement = {"num_nodes": 1.5, "procs_per_node": 2, "device": "cpu"}
    _edit_job(make_run(results, "fractional", 2, 12.5), placement=placement)

    rows = {r["run_id"]: r for r in get_json(dashboard + "api/runs")["rows"]}

    assert rows["good"]["state"] == "SUCCEEDED"
    for run_id, words in [("numbered", "created_at"), ("fractional", "whole number")]:
        assert rows[run_id]["state"] == "DAMAGED", run_id
        [problem] = rows[run_id]["damaged"]
        assert problem["file"] == "job.json" and words in problem["problem"], problem
        assert get_json(dashboard + f"api/runs/{run_id}")["state"] == "DAMAGED"
    compared = get_json(dashboard + "api/compare?run=good&run=numbered&run=fractional")
    assert {p["run_id"] for p in compared["problems"]} == {"numbered", "fractional"}


def test_a_failed_run_shows_no_time_to_target_whatever_its_summary_says(results, dashboard):
    # Rank 0 wrote a summary that reached the target, then another rank was killed: the
    # report counts the run as a miss (RunResult.converged), and so must every page.
    from contract.rundir import JobState, JobStatus

    run_dir = make_run(results, "cnn-a", 2, 12.5)
    reason = "rank 1 exited with code -9: killed"
    rundir.write_state(run_dir, JobStatus(JobState.FAILED, reason, failed_rank=1, exit_code=-9))

    [row] = get_json(dashboard + "api/runs")["rows"]
    page = get_json(dashboard + "api/runs/cnn-a")
    compared = get_json(dashboard + "api/compare?run=cnn-a")["runs"][0]

    for shown in (row, page, compared):
        assert (shown["state"], shown["reached"], shown["time_to_target_s"]) == (
            "FAILED", False, None,
        )  # fmt: skip


def test_a_run_whose_state_cannot_be_opened_is_damaged_and_the_table_still_served(
    results, dashboard
):
    make_run(results, "good", 2, 12.5)
    bad = make_run(results, "bad", 2, 12.5)
    with unix_socket_at(bad / "state.json"):
        rows = {r["run_id"]: r for r in get_json(dashboard + "api/runs")["rows"]}
        assert rows["good"]["state"] == "SUCCEEDED"
        assert rows["bad"]["state"] == "DAMAGED"
        assert rows["bad"]["damaged"] == [
            {"file": "state.json", "problem": "cannot be read (No such device or address)"}
        ]
        assert get_json(dashboard + "api/runs/bad")["state"] == "DAMAGED"
