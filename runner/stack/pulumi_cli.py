"""Talking to the `pulumi` CLI: finding it and the project, and running a command for a stack.

The runner never provisions (docs/design.md); it reads stack outputs, and teardown asks
pulumi to destroy. Every failure is a RunnerError that names the command and the next step.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.errors import RunnerError

TIMEOUT_S = 120.0
_PR_SET_PDEATHSIG = 1
INSTALL = "install it (https://www.pulumi.com/docs/install/)"
# How pulumi's output is read: it writes UTF-8, but passes on what providers and the cluster
# say byte for byte, and one invalid byte must not end the command in a UnicodeDecodeError
# (halfway through a destroy, its outcome unread); it shows as U+FFFD instead.
ENCODING, DECODE_ERRORS = "utf-8", "replace"


def executable(why: str) -> str:
    """The pulumi executable; `why` completes "pulumi is not on PATH, so ..." if missing."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise RunnerError(f"pulumi is not installed or not on PATH, so {why}")
    return pulumi


def project_dir() -> Path | None:
    """The nearest directory holding Pulumi.yaml, so a stack name resolves from anywhere."""
    here = Path.cwd()
    for candidate in (here, *here.parents):
        if (candidate / "Pulumi.yaml").is_file():
            return candidate
    return None


def interrupted_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel send pulumi SIGINT (its own "cancel": it finishes the
    operations under way and records its state) when this process dies, a SIGKILL included,
    so no pulumi outlives the command that started it. None off Linux.

    prctl is looked up here, before the fork: the child only calls it (no loader lock taken
    between fork and exec), and exits if its parent died before the signal was armed."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def run_json(args: list[str], stack: str, why: str, next_step: str) -> Any:
    """`pulumi ARGS --stack STACK`, its stdout parsed as JSON.

    `why` says what the missing executable prevents; `next_step` is appended to a failure.
    """
    argv = [executable(why), *args, "--stack", stack]
    shown = f"`pulumi {' '.join(args)} --stack {stack}`"
    try:
        done = subprocess.run(argv, capture_output=True, encoding=ENCODING, errors=DECODE_ERRORS,
                              timeout=TIMEOUT_S, cwd=project_dir(),
                              preexec_fn=interrupted_with_parent())  # fmt: skip
    except subprocess.TimeoutExpired:
        raise RunnerError(
            f"{shown} did not answer in {TIMEOUT_S:.0f} s; check `pulumi whoami` and the state "
            "backend"
        ) from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise RunnerError(f"{shown} failed: {detail[-1] if detail else 'no output'}; {next_step}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RunnerError(f"{shown} printed no JSON") from None
