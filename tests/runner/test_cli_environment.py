"""A careless environment meets the runner: a working folder deleted under the shell, an
ASCII-only stdout, a data folder that is a file or a link to nothing. Each is one line (no
traceback) and, where a fix is named, the fix works: the tests run it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest
from click.testing import CliRunner

from runner.cli import main
from tests.runner.test_data_fetch import _serve_cifar


@pytest.mark.parametrize("args", [["runs"], ["submit", "cnn-digits"], ["dashboard"]])
def test_a_deleted_working_folder_is_one_line(tmp_path, monkeypatch, args):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    assert "the current folder no longer exists (deleted)" in line
    assert "give --results-dir an absolute path" in line


def test_an_ascii_only_stdout_gets_a_non_ascii_run_folder_escaped(tmp_path):
    run = tmp_path / "run-\u00e9\u2603"  # a run folder named in UTF-8 (listed as damaged)
    run.mkdir()
    (run / "job.json").write_text("{}")
    env = {**os.environ, "LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "--results-dir", str(tmp_path), "runs"],
        env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"run-\\xe9\\u2603" in done.stdout and not done.stderr


def _run_fix(line: str, url: str) -> None:
    """Run the shell command and the `runner data fetch` the error line names, in order."""
    shell = re.search(r"\((mkdir -p [^)]*|mv [^)]*)\)", line)
    fetch = re.search(r"`runner (data fetch [^`]*)`", line)
    assert shell is not None and fetch is not None, line
    subprocess.run(shlex.split(shell.group(1)), check=True)
    result = CliRunner().invoke(main, [*shlex.split(fetch.group(1)), "--mirror", url])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_a_data_folder_that_cannot_be_one_is_one_line_whose_fix_works(
    kind, server, tmp_path, monkeypatch
):
    _, url = _serve_cifar(server, monkeypatch)
    data = tmp_path / "data"
    if kind == "file":
        data.write_text("not a folder")
    else:
        data.symlink_to(tmp_path / "gone" / "data")
    monkeypatch.setenv("STACKBENCH_DATA", str(data))
    results = tmp_path / "results"
    # A compiled run (ResNet-20 compiles by default) is refused before anything starts.
    submitted = CliRunner().invoke(main, ["--results-dir", str(results), "submit",
                                          "resnet20-cifar10"])  # fmt: skip
    [submit_line] = submitted.output.strip().splitlines()
    assert submitted.exit_code == 1 and "the data folder" in submit_line
    assert not results.exists() or not any(results.iterdir())
    fetched = CliRunner().invoke(main, ["data", "fetch", "cifar10", "--mirror", url])
    [line] = fetched.output.strip().splitlines()
    assert fetched.exit_code == 1 and "Traceback" not in fetched.output
    assert line.removeprefix("error: ") == submit_line.removeprefix("error: resnet20-cifar10: ")
    _run_fix(line, url)
    assert (data / "cifar-10-batches-py" / "test_batch").is_file()
