"""The local supervisor's own command line: only `runner submit` writes it (supervisor.command),
but a bad one, typed by hand, is one line and exit 2, never a traceback, and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = "runner.backends.local.supervisor"


def _run(
    args: list[str], cwd: Path, pass_fds: tuple[int, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args], cwd=cwd, capture_output=True, text=True,
        timeout=60, check=False, pass_fds=pass_fds,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--leash", "notanint"],
        ["RUN", "--digest"],
        ["RUN", "--digest", "abc", "--leash", "notanint"],
        ["RUN", "--digest", "abc", "--leash", "99999"],  # no such descriptor
        ["RUN", "--digest", "abc", "--leash", "1" + "0" * 30],
        ["RUN", "--digest", "abc", "--leash", "0"],  # open, but no leash (not a pipe)
        ["RUN", "--digest", "a", "--digest", "b"],
        ["RUN", "--digest", "abc", "--what", "x"],
        ["RUN", "--leash"],
        ["RUN"],  # no digest
        ["missing-dir", "--digest", "abc"],
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2_and_writes_nothing(tmp_path, args):
    run_dir = tmp_path / "RUN"
    run_dir.mkdir()
    result = _run(args, tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("supervisor: ")
    # Nothing recorded or made for a run it was never asked to supervise.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RUN"]
    assert list(run_dir.iterdir()) == []


def test_the_command_line_submit_writes_is_taken(tmp_path):
    """`command`'s own line, with a real leash: the run fails on its missing launch.json, the
    supervisor's usual one-line record, not a refused command line."""
    from runner.backends.local import leash, supervisor

    run_dir = tmp_path / "RUN"
    run_dir.mkdir()
    read_end = leash.tie(run_dir)
    try:
        argv = supervisor.command(run_dir, "0" * 64, read_end)[3:]
        result = _run(argv, tmp_path, pass_fds=(read_end,))
    finally:
        os.close(read_end)
        leash.release(run_dir)
    assert result.returncode == 1, result.stderr
    assert "launch.json is missing" in (run_dir / "state.json").read_text()
