import io
import json

from workloads.mllog import EventLog, NullEventLog, parse_line, read_events


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
    line = '[rank0]: :::MLLOG {"key": "run_stop", "value": null}'
    assert parse_line(line)["key"] == "run_stop"
    assert parse_line("W1121 some warning") is None
    assert parse_line(':::MLLOG {"key": "cut sh') is None  # killed mid-write


def test_read_events_skips_a_truncated_last_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"key": "run_start"}\n{"key": "epo')
    assert [e["key"] for e in read_events(path)] == ["run_start"]


def test_null_event_log_writes_nothing(capsys):
    NullEventLog().point("seed", 1)
    assert capsys.readouterr().out == ""
