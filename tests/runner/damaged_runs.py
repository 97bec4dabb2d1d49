"""A good run and a damaged one side by side, the kinds of damage a JSON record may have, and the
CLI invoked on their results directory, and a socket in place of a file: the damaged run
directory tests' common ground."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from click.testing import CliRunner

from runner.cli import main
from tests.runner.rundirs import make_run

DAMAGE = {
    "truncated": b'{"state": "SUCC',
    "empty": b"",
    "binary": b"\x00\xff\xfe\x80garbage\x00",
    "a list": b"[1, 2, 3]",
    "wrong types": json.dumps({"state": 7, "reason": ["x"]}).encode(),
    "NaN": b'{"state": "FAILED", "exit_code": NaN}',
    # Deeper than the interpreter's recursion limit: json raises RecursionError, no ValueError.
    "nested too deeply": b'{"state": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


def invoke(results: Path, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner(env={"COLUMNS": "250"}).invoke(
        main, ["--results-dir", str(results), *args], catch_exceptions=False
    )


def two_runs(root: Path) -> tuple[Path, Path]:
    good = make_run(root, "cnn-digits-good", 2, 10.0)
    bad = make_run(root, "cnn-digits-bad", 2, 12.0)
    return good, bad


@contextlib.contextmanager
def unix_socket_at(path: Path) -> Iterator[None]:
    """A listening UNIX socket in place of a file (open() fails on it with ENXIO, as on a file
    of another user with EACCES); bound from its directory, as a path may be too long."""
    path.unlink(missing_ok=True)
    here = Path.cwd()
    with socket.socket(socket.AF_UNIX) as sock:
        os.chdir(path.parent)
        try:
            sock.bind(path.name)
        finally:
            os.chdir(here)
        yield
