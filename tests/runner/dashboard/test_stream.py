"""The live stream (server-sent events) against the real server: a page's first messages are
a snapshot, then what is appended to a run directory arrives without asking."""

from __future__ import annotations

import json
import time

from contract.rundir import JobState, JobStatus
from runner.results import rundir
from tests.runner.dashboard.conftest import EventStream, get_json
from tests.runner.rundirs import make_run


def event_line(key: str, value: object, time_ms: int, epoch: int | None = None) -> str:
    metadata = {} if epoch is None else {"epoch_num": epoch}
    return json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME",
                       "key": key, "value": value, "metadata": metadata}) + "\n"  # fmt: skip


def test_a_new_event_appended_to_a_run_arrives_as_new_points(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 30.0, state="RUNNING")
    stream = EventStream(dashboard, "/api/stream?run=cnn-a")
    try:
        assert stream.response.getheader("Content-Type") == "text/event-stream"
        snapshot = stream.until("curves")
        assert len(snapshot["train_loss"]) == 3

        with open(run_dir / "events.jsonl", "a") as f:
            f.write(event_line("train_loss", 0.25, 1_700_000_040_000, epoch=4))

        points = stream.until("points")
        assert points["run_id"] == "cnn-a" and points["train_loss"] == [[40.0, 0.25]]
    finally:
        stream.close()


def test_a_line_still_being_written_waits_for_its_newline(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 30.0, state="RUNNING")
    stream = EventStream(dashboard, "/api/stream?run=cnn-a")
    try:
        stream.until("curves")
        line = event_line("eval_accuracy", 0.97, 1_700_000_041_000, epoch=4)
        with open(run_dir / "events.jsonl", "a") as f:
            f.write(line[:40])
            f.flush()
            time.sleep(0.3)  # several polls see the half line
            f.write(line[40:])
        points = stream.until("points")
        assert points["eval_accuracy"] == [[41.0, 0.97]]  # whole, once
    finally:
        stream.close()


def test_a_state_change_reaches_the_run_page(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 30.0, state="RUNNING")
    stream = EventStream(dashboard, "/api/stream?run=cnn-a")
    try:
        assert stream.until("detail")["state"] == "RUNNING"
        rundir.write_state(run_dir, JobStatus(JobState.FAILED, "rank 1 exited with code 1"))
        detail = stream.until("detail")
        assert (detail["state"], detail["reason"]) == ("FAILED", "rank 1 exited with code 1")
    finally:
        stream.close()


def test_the_table_stream_says_when_runs_come_and_change(results, dashboard):
    # The page asks /api/runs again for its rows on each `table` message; `states` moves
    # only when a run comes, goes or changes state (a study's page refreshes on it).
    make_run(results, "cnn-a", 2, 30.0)
    run_dir = make_run(results, "cnn-b", 2, None, state="RUNNING", write_summary=False)
    stream = EventStream(dashboard, "/api/stream?table=1")
    try:
        first = stream.until("table")
        assert first["total"] == 2
        with open(run_dir / "events.jsonl", "a") as f:  # an epoch more: the row, not its state
            f.write(event_line("eval_accuracy", 0.91, 1_700_000_041_000, epoch=4))
        grown = stream.until("table")
        assert grown["version"] > first["version"] and grown["states"] == first["states"]
        make_run(results, "cnn-c", 2, 12.0)
        added = stream.until("table")
        assert added["total"] == 3 and added["states"] > first["states"]
    finally:
        stream.close()


def test_a_log_streams_its_tail_then_what_is_appended(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 30.0, state="RUNNING")
    log = run_dir / "logs" / "rank-1.log"
    log.write_text("epoch 1\n")
    stream = EventStream(dashboard, "/api/stream?log=cnn-a/rank-1.log")
    try:
        first = stream.until("log")
        assert (first["text"], first["reset"]) == ("epoch 1\n", True)
        with open(log, "a") as f:
            f.write("epoch 2\n")
        assert stream.until("log") == {
            "run_id": "cnn-a", "name": "rank-1.log", "text": "epoch 2\n", "reset": False,
        }  # fmt: skip
    finally:
        stream.close()


def test_a_log_reads_as_runner_logs_shows_it(results, dashboard):
    from runner.results.eventtext import event_text

    run_dir = make_run(results, "cnn-a", 2, 30.0, state="RUNNING")
    start, accuracy = event_line("run_start", None, 1000), event_line("eval_accuracy", 0.9, 2500, 1)
    (run_dir / "logs" / "rank-0.log").write_text(
        f'hello\n:::MLLOG {start}:::MLLOG {accuracy}:::MLLOG {{"key": '  # the last cut
    )
    stream = EventStream(dashboard, "/api/stream?log=cnn-a/rank-0.log")
    try:
        text = stream.until("log")["text"]
        shown = event_text(json.loads(accuracy), 1000)
        assert text.splitlines() == ["hello", event_text(json.loads(start), 1000), shown]
        assert shown == "[    +1.50 s] eval_accuracy 0.9 epoch_num=1"
        # A last line never ended is shown as it is once nothing more comes.
        assert stream.until("log")["text"] == ':::MLLOG {"key": \n'
    finally:
        stream.close()


def test_a_stream_of_an_unknown_run_is_not_found(results, dashboard):
    stream = EventStream(dashboard, "/api/stream?run=nope")
    try:
        assert stream.response.status == 404
    finally:
        stream.close()


def test_events_rewritten_by_a_fetch_start_the_curves_over(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 30.0)
    stream = EventStream(dashboard, "/api/stream?run=cnn-a")
    try:
        assert len(stream.until("curves")["train_loss"]) == 3
        fetched = run_dir / "events.fetched"
        fetched.write_text(
            event_line("run_start", None, 1_700_000_000_000)
            + event_line("train_loss", 2.0, 1_700_000_005_000, epoch=1)
        )
        fetched.replace(run_dir / "events.jsonl")  # atomically, as the runner writes files

        again = stream.until("curves")
        assert again["train_loss"] == [[5.0, 2.0]]  # the new file's series, not appended
    finally:
        stream.close()


def test_a_removed_run_leaves_the_table(results, dashboard):
    import shutil

    make_run(results, "cnn-a", 2, 30.0)
    make_run(results, "cnn-b", 2, 30.0)
    stream = EventStream(dashboard, "/api/stream?table=1")
    try:
        assert stream.until("table")["total"] == 2
        shutil.rmtree(results / "cnn-a")
        assert stream.until("table")["total"] == 1
    finally:
        stream.close()
    assert [r["run_id"] for r in get_json(dashboard + "api/runs")["rows"]] == ["cnn-b"]
