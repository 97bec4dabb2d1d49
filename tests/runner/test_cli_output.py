"""What the runner CLI writes to a terminal or a pipe: a log line's control characters written
out on a terminal and passed down a pipe, an error naming a path written out, an error of
several lines, a run id, results folder or damaged run directory shown as written (never as
markup or terminal control), a link loop as bad input in one line, and a state with its reason
as one line in a pipe."""

import json
import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from runner.cli import main
from tests.runner.cli_runner import invoke
from tests.runner.rundirs import make_run


def test_logs_write_a_lines_control_characters_out_on_a_terminal_and_pass_them_down_a_pipe(
    tmp_path,
):
    """A log line is whatever a rank (or a cluster's pod) printed: on a terminal its escape
    sequences (here one that retitles the window) are shown as text, never acted on; a pipe
    gets the line as it was."""
    import os

    from tests.runner.rundirs import make_run

    run_dir = make_run(tmp_path, "hostile-log", 1, 10.0)
    (run_dir / "logs" / "rank-0.log").write_text("before \x1b]0;pwned\x07 after\ttab\n")
    runner = [sys.executable, "-m", "runner.cli", "--results-dir", str(tmp_path), "logs",
              "hostile-log"]  # fmt: skip
    main_fd, tty = os.openpty()
    try:
        done = subprocess.run(runner, stdout=tty, stderr=subprocess.PIPE, timeout=60)
        os.close(tty)
        shown = b""
        while True:
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # EIO: the terminal's other end is closed, all was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main_fd)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in shown and b"\x07" not in shown
    assert b"before \\x1b]0;pwned\\x07 after\ttab" in shown
    piped = subprocess.run(runner, capture_output=True, timeout=60)
    assert piped.stdout == b"before \x1b]0;pwned\x07 after\ttab\n"


def test_an_errors_line_writes_out_the_control_characters_of_a_path_it_names(tmp_path):
    """A results folder named with an escape sequence and a newline (or a server's text, a
    file's content): the error stays one line, and the terminal never gets the ESC."""
    results = tmp_path / "a\x1b[2J\nforged line"
    results.mkdir()
    result = invoke("status", "nosuch", results=results)
    assert result.exit_code == 2
    assert "\x1b" not in result.output
    assert "a\\x1b[2J\\nforged line" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_results_folder_that_is_a_link_loop_is_bad_input_in_one_line(tmp_path):
    """The user's own links are resolved once (own_folder); one that loops cannot be, and
    says so as bad input rather than with the traceback of pathlib's RuntimeError."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    result = CliRunner().invoke(main, ["--results-dir", str(loop), "runs"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "--results-dir" in result.output and "loop" in result.output
    assert "Traceback" not in result.output


def test_an_error_of_several_lines_shows_them_and_writes_out_a_newline_within_one():
    """An error the runner composes of lines (a teardown refused for unfetched runs) shows
    them as lines; a newline inside one (a run id is any directory name) stays written out."""
    from runner.cli.common import handle_errors
    from runner.stack.teardown import TeardownRefused

    @click.command()
    @handle_errors
    def refuse() -> None:
        raise TeardownRefused("s", [("run-1", "not fetched"), ("run\nforged", "not fetched")])

    result = CliRunner().invoke(refuse, [])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[1:3] == ["  run-1: not fetched", "  run\\nforged: not fetched"], lines
    assert len(lines) == 4


@pytest.mark.parametrize("command", [["runs"], ["status", "run-"], ["cancel", "run-", "--yes"]])
def test_a_run_id_is_shown_as_written_never_as_markup_or_terminal_control(tmp_path, command):
    # A run id is a directory's name, any text: `run-[red]x` showed as `run-x` (an id no
    # command finds), and an escape sequence in a copied results folder reached the terminal.
    make_run(tmp_path, "run-[red]x\x1b[2J", 2, 5.0)
    out = CliRunner(env={"COLUMNS": "300"}).invoke(main, ["--results-dir", str(tmp_path), *command])
    assert out.exit_code == 0, out.output
    assert "run-[red]x\\x1b[2J" in out.output and "\x1b" not in out.output


def test_a_damaged_run_directory_is_named_as_written_in_the_list(tmp_path):
    damaged = make_run(tmp_path, "run-a", 2, 5.0)
    damaged.rename(tmp_path / "run-[bold]b\x1b]0;title\x07")
    out = CliRunner(env={"COLUMNS": "300"}).invoke(main, ["--results-dir", str(tmp_path), "runs"])
    assert out.exit_code == 0, out.output
    assert "DAMAGED" in out.output and "run-[bold]b\\x1b]0;title\\x07" in out.output
    assert "\x1b" not in out.output and "\x07" not in out.output


@pytest.mark.timeout(120)
def test_a_results_folder_whose_path_reads_as_markup_is_shown_as_written(tmp_path):
    # `r[/]x` is a folder `]x` in a folder `r[`: rich read `[/]` as a closing tag, and the
    # traceback came after the run had started, so the run it was to follow was CANCELLED.
    results = tmp_path / "r[" / "]x"
    command = [sys.executable, "-m", "runner.cli", "--results-dir", str(results)]
    wide = {**os.environ, "COLUMNS": "400"}  # one line each, whatever the path's length
    empty = subprocess.run([*command, "runs"], capture_output=True, text=True, timeout=60, env=wide)
    assert empty.returncode == 0, empty.stderr
    assert f"no runs under {results}/" in empty.stdout
    done = subprocess.run(
        [*command, "submit", "cnn-digits", "--workers", "1", "--set", "max_epochs=1"],
        capture_output=True, text=True, timeout=100, env=wide,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    (run_dir,) = results.iterdir()
    assert f"in {run_dir}" in done.stdout and f"results: {run_dir}" in done.stdout
    state = json.loads((run_dir / "state.json").read_text())["state"]
    assert state != "CANCELLED" and f"{state}  results" in done.stdout


def test_a_state_and_its_reason_are_one_line_in_a_pipe(tmp_path):
    """`runner status RUN | grep FAILED` must find the whole cause: rich takes 80 columns
    when stdout is no terminal, and wrapped the reason over three lines."""
    from contract.rundir import JobState, JobStatus
    from runner.results import rundir

    run_dir = make_run(tmp_path, "run-a", 2, None, state="FAILED")
    reason = "rank 0 exited with code 1: rank 0: collective timed out after 300 s in " + (
        "the gradient exchange of DDP's communication hook, at epoch 6, step 128"
    )
    rundir.write_state(run_dir, JobStatus(JobState.FAILED, reason, "2026-01-01T00:30:00+00:00"))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    command = [sys.executable, "-m", "runner.cli", "--results-dir", str(tmp_path)]
    done = subprocess.run([*command, "status", "run-a"], capture_output=True, text=True,
                          timeout=60, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"run-a: FAILED ({reason})"


def test_a_console_made_under_one_columns_wraps_at_the_columns_of_each_print(monkeypatch):
    """rich keeps the COLUMNS a console was made under; the runner's consoles read it at each
    print, so a command run after another in one process (click's test runner) is not wrapped
    at the first one's width."""
    import io

    from runner.cli.consoles import Console

    monkeypatch.setenv("COLUMNS", "80")
    console = Console(file=io.StringIO())
    monkeypatch.setenv("COLUMNS", "200")
    console.print("word " * 30)  # 150 columns
    assert len(console.file.getvalue().splitlines()) == 1
