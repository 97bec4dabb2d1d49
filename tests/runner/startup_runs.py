"""`runner` started as a user starts it, in a process of its own, and what it printed, exited
with and imported (tests/runner/test_cli_startup.py, test_cli_replies.py).

What a run imported is read from its sys.modules as it exits (a sitecustomize on its path
registers the atexit hook that writes them to a file: `-X importtime` would miss a module
imported by importlib.import_module), without touching the runner's code. Runs share a bytecode
tree (PYTHONPYCACHEPREFIX, where the caches of runner/stamped.py live, beside it), emptied of
caches by `fresh`, and start in a folder of the test's, with no ./results in it.
"""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import tempfile
import termios
from dataclasses import dataclass
from pathlib import Path

RUNNER = Path(sys.executable).with_name("runner")  # the console script pip wrote
# The click group alone, as the console script ran it before runner/cli/start.py: the
# reference every served reply is compared with (named `runner`, so click names it so).
CLICK_ONLY = "import sys\nfrom runner.cli import main\nsys.exit(main())\n"
# Run by Python at the end of its own start-up, from PYTHONPATH: writes the names of the
# modules imported to $STACKBENCH_TEST_MODULES at exit, then steps aside for any
# sitecustomize it stands in front of (and off sys.path, which a run's cache key includes).
SITECUSTOMIZE = """
import atexit, os, sys
from importlib import machinery, util

_out = os.environ.pop("STACKBENCH_TEST_MODULES", None)
if _out:
    def _write_modules():
        with open(_out, "w") as f:
            f.write("\\n".join(sorted(sys.modules)))
    atexit.register(_write_modules)
sys.path.remove(os.path.dirname(__file__))
_spec = machinery.PathFinder.find_spec("sitecustomize", sys.path)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(util.module_from_spec(_spec))
"""


@dataclass(frozen=True)
class Ran:
    stdout: str
    stderr: str
    code: int
    modules: frozenset[str]

    @property
    def reply(self) -> tuple[str, str, int]:
        return self.stdout, self.stderr, self.code


def fresh(pyc: Path) -> None:
    """The bytecode tree `pyc` without any runner cache in it."""
    for old in pyc.rglob("*.cache"):
        old.unlink()


def environment(pyc: Path, **extra: str) -> dict[str, str]:
    """A user's environment whose bytecode (and caches) go to `pyc`, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "COLUMNS")}
    return env | {"PYTHONPYCACHEPREFIX": str(pyc)} | extra


def run(
    argv: list[str], cwd: Path, env: dict[str, str], script: Path | None = None,
    module: bool = False, terminal_columns: int | None = None,
) -> Ran:  # fmt: skip
    """`runner ARGV` through the console script (or `script`, or `python -m runner.cli`),
    run in `cwd`; with `terminal_columns`, its stdout a terminal (a pseudo-terminal that
    wide, whose bytes come back as the terminal got them: each newline as CR LF)."""
    program = ["-m", "runner.cli"] if module else [str(script or RUNNER)]
    # The hook in the test's folder, the same file for each of its runs: it is one of the
    # modules a cache is stamped with, and one that disappeared would make every cache stale.
    hook = cwd / "startup-runs-hook"
    if not (hook / "sitecustomize.py").exists():
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    with tempfile.TemporaryDirectory(prefix="startup-run-") as scratch:
        listed = Path(scratch, "modules")
        path = os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")]))
        command = [sys.executable, *program, *argv]
        env = env | {"PYTHONPATH": path, "STACKBENCH_TEST_MODULES": str(listed)}
        if terminal_columns is None:
            proc = subprocess.run(
                command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
            )
            out, err, code = proc.stdout, proc.stderr, proc.returncode
        else:
            out, err, code = _in_terminal(command, cwd, env, terminal_columns)
        modules = frozenset(listed.read_text().split("\n"))
    return Ran(out, err, code, modules)


def _in_terminal(
    command: list[str], cwd: Path, env: dict[str, str], columns: int
) -> tuple[str, str, int]:
    """(stdout, stderr, exit code) of `command` with its stdout a pseudo-terminal."""
    main_fd, tty = os.openpty()
    try:
        fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=tty,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        os.close(tty)
        tty = -1
        chunks = []
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: the terminal's last writer has gone
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    finally:
        os.close(main_fd)
        if tty != -1:
            os.close(tty)
    return b"".join(chunks).decode(), err, code


def click_only(folder: Path) -> Path:
    """A script named `runner` that runs the click group alone."""
    script = folder / "click-only" / "runner"
    script.parent.mkdir(exist_ok=True)
    script.write_text(CLICK_ONLY)
    return script


def offending(modules: frozenset[str] | set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(b + ".") for b in banned))
