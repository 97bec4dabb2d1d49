"""state.json's reason is one printable line whoever wrote it: it reaches terminals, where a
rank's error line or a hostile state.json must not clear the screen or forge lines."""

from __future__ import annotations

import json

from click.testing import CliRunner

from contract import files
from contract.rundir import MAX_REASON_CHARS, STATE, JobState, JobStatus, read_state
from runner.cli import main
from tests.runner.rundirs import make_run

HOSTILE = "rank 1 failed:\x1b[2J\x1b[H\nSUCCEEDED   all good\r\x07" + "x" * 2000


def test_a_reason_is_one_printable_line_of_bounded_length_however_it_is_made():
    status = JobStatus(JobState.FAILED, HOSTILE)
    assert status.reason.startswith("rank 1 failed: [2J [H SUCCEEDED all good xxx")
    assert status.reason.isprintable() and len(status.reason) == MAX_REASON_CHARS


def test_a_hostile_state_file_reaches_the_terminal_as_one_printable_line(tmp_path):
    run_dir = make_run(tmp_path, "cnn-digits-hostile", 2, None, state="FAILED")
    state = files.read_json(run_dir / STATE)
    (run_dir / STATE).write_text(json.dumps({**state, "reason": HOSTILE}))
    assert read_state(run_dir).reason.isprintable()
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(
        main, ["--results-dir", str(tmp_path), "status", "cnn-digits-hostile"]
    )
    assert "\x1b" not in result.output and "\x07" not in result.output and "\r" not in result.output
    assert "rank 1 failed: [2J [H SUCCEEDED all good" in result.output
