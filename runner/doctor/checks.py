"""What a doctor check is, and how one asks a command-line tool on this machine.

A check is one step of docs/clusters.md: what it is, whether this machine has done it, what
was found (a version, a user, a limit) and, when it has not, the one command or step that
does it. Running a tool never raises: a tool that is missing, fails, hangs or prints garbage
is a check that did not pass, with what it said. Nothing here prints (runner/cli/doctor.py
does).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOL_TIMEOUT_S = 30.0  # a cloud CLI asking its API (services list, quotas) takes seconds


@dataclass(frozen=True)
class Check:
    name: str  # the step, as docs/clusters.md names it ("pulumi logged in")
    ok: bool
    detail: str  # what was found, or what is wrong
    fix: str = ""  # the command or step that does it ("" when ok)
    optional: bool = False  # recommended (kubectl, to look at the cluster), not required

    def line(self) -> str:
        """The check in one line: `ok name: detail` or `MISSING name: detail; fix: ...`."""
        if self.ok:
            return f"ok {self.name}: {self.detail}"
        mark = "optional" if self.optional else "MISSING"
        return f"{mark} {self.name}: {self.detail}; fix: {self.fix}"


def passed(name: str, detail: str) -> Check:
    return Check(name, True, detail)


def missing(name: str, detail: str, fix: str, optional: bool = False) -> Check:
    return Check(name, False, detail, fix, optional)


@dataclass(frozen=True)
class Answer:
    """What one run of a tool said: None for `code` when it could not be run at all."""

    code: int | None
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def first_line(self) -> str:
        text = (self.out.strip() or self.err.strip()).splitlines()
        return text[0][:200] if text else "no output"

    def last_error(self) -> str:
        text = (self.err.strip() or self.out.strip()).splitlines()
        return text[-1][:200] if text else f"exit code {self.code}"

    def json(self) -> Any:
        """stdout as JSON; None when it is not JSON."""
        try:
            return json.loads(self.out)
        except ValueError:
            return None


def ask(argv: list[str], cwd: Path | None = None, timeout_s: float = TOOL_TIMEOUT_S) -> Answer:
    """Run a tool found on PATH with no input; its answer, whatever happens."""
    path = shutil.which(argv[0])
    if path is None:
        return Answer(None, "", f"{argv[0]} is not on PATH")
    try:
        done = subprocess.run(
            [path, *argv[1:]], capture_output=True, stdin=subprocess.DEVNULL, cwd=cwd,
            timeout=timeout_s, encoding="utf-8", errors="replace",
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return Answer(None, "", f"`{' '.join(argv)}` did not answer in {timeout_s:.0f} s")
    except OSError as err:
        return Answer(None, "", f"{argv[0]} could not be run: {err.strerror or err}")
    return Answer(done.returncode, done.stdout, done.stderr)


def tool(
    name: str, version_args: list[str], install: str, optional: bool = False, failing: str = ""
) -> Check:
    """`NAME installed`: on PATH and answering its version command (the version shown).
    `failing` is the fix when it is there but fails (Docker's daemon not running)."""
    step = f"{name} installed"
    answer = ask([name, *version_args])
    if answer.code is None and shutil.which(name) is None:
        return missing(step, "not on PATH", install, optional)
    if not answer.ok:
        return missing(step, f"`{name} {' '.join(version_args)}` failed: {answer.last_error()}",
                       failing or install, optional)  # fmt: skip
    return passed(step, answer.first_line())
