import io
import json
import subprocess
import sys

import pytest

from contract.events import parse_line, read_events
from contract.files import LinkedPath
from workloads.telemetry.mllog import EventLog, RankLog


def test_events_go_to_the_file_as_json_and_to_stdout_with_the_mllog_prefix(tmp_path):
    echo = io.StringIO()
    log = EventLog(str(tmp_path / "events.jsonl"), echo=echo)
    log.start("run_start")
    log.point("eval_accuracy", 0.5, epoch_num=2)
    log.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["run_start", "eval_accuracy"]
    echoed = echo.getvalue().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in echoed)
    event = parse_line(echoed[1])
    assert event["value"] == 0.5
    assert event["metadata"] == {"epoch_num": 2}
    assert event["event_type"] == "POINT_IN_TIME"


def test_parse_line_finds_events_behind_log_prefixes_and_skips_other_lines():
    line = '[rank0]: :::MLLOG {"key": "run_stop", "time_ms": 5, "value": null}'
    assert parse_line(line)["key"] == "run_stop"
    assert parse_line(':::MLLOG {"key": "run_stop"}') is None  # an event has a time
    assert parse_line("W1121 some warning") is None
    assert parse_line(':::MLLOG {"key": "cut sh') is None  # killed mid-write


def test_read_events_skips_a_truncated_last_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"key": "run_start", "time_ms": 1}\n{"key": "epo')
    assert [e["key"] for e in read_events(path)] == ["run_start"]


def test_other_ranks_log_their_start_epochs_and_end_as_plain_lines_and_no_events():
    out = io.StringIO()
    log = RankLog(1, out)
    log.start("run_start")
    log.point("seed", 1)  # a run parameter: rank 0's event log has it
    log.end("epoch_stop", epoch_num=2)
    lines = out.getvalue().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "rank 1: run_start",
        "rank 1: epoch_stop epoch_num=2",
    ]
    assert all(parse_line(line) is None for line in lines)


@pytest.mark.parametrize("planted", ["events.jsonl", "logs"])
def test_a_worker_never_writes_through_a_link_planted_in_its_run_directory(tmp_path, planted):
    """The event log and a rank's output (dist.redirect_output, in a process of its own):
    a link at the file or in place of its folder is refused, and nothing lands outside."""
    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    run_dir.mkdir()
    outside.mkdir()
    if planted == "events.jsonl":
        (run_dir / "events.jsonl").symlink_to(outside / "victim")
        with pytest.raises(LinkedPath):
            EventLog(str(run_dir / "events.jsonl"), None)
    else:
        (run_dir / "logs").symlink_to(outside)
        code = (
            "import sys\nfrom pathlib import Path\n"
            "from workloads.runtime.dist import redirect_output\n"
            "redirect_output(Path(sys.argv[1]))\nprint('escaped')\n"
        )
        log = run_dir / "logs" / "rank-0.log"
        proc = subprocess.run(
            [sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode != 0 and "is a symbolic link" in proc.stderr
    assert not any(outside.iterdir())
