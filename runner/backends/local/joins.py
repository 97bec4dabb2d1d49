"""Join requests: how `runner join RUN_ID` asks a local elastic run for one more worker.

The supervisor owns every process of a run (its lifetime, cancel, the outcome), so it alone
starts a joiner; the command only asks. It creates `requests/join-<token>` in the run
directory (a new empty file, never through a link) and waits for `join-<token>.answer`; the
supervisor looks for requests while it polls its workers, starts the worker or refuses, and
answers with JSON `{"started": bool, "message": str}`. No pid and no command travels in a
request: what the joiner runs is the run's own launch.json, so a file someone else drops in
the directory can at most ask for a worker the run may have anyway.
Not here: whether a worker may join (supervisor.py decides), what it runs (elastic.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from pathlib import Path

from contract import files
from contract.files import DamagedFile
from runner.errors import RunnerError, StorageError

REQUESTS = "requests"
ANSWER_SUFFIX = ".answer"
POLL_S = 0.05
_REQUEST = re.compile(r"^join-[0-9a-f]{16}$")


def ask(run_dir: Path, timeout_s: float) -> str:
    """Ask the run's supervisor for one more worker; its answer when it started one.
    RunnerError (one line) when it refused, or did not answer within `timeout_s`."""
    folder = _folder(run_dir)
    token = f"join-{secrets.token_hex(8)}"
    request = folder / token
    try:
        os.close(os.open(request, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except OSError as err:
        raise _refused(err, request) from None
    answer_path = folder / (token + ANSWER_SUFFIX)
    deadline = time.monotonic() + timeout_s
    try:
        while not answer_path.exists():
            if time.monotonic() > deadline:
                raise RunnerError(
                    f"the run's supervisor did not answer within {timeout_s:g} s; "
                    f"see `runner status {run_dir.name}`"
                )
            time.sleep(POLL_S)
        answer = files.read_json_object(answer_path)
    finally:
        for path in (request, answer_path):
            with contextlib.suppress(OSError):
                path.unlink()
    started, message = answer.get("started"), answer.get("message")
    if not isinstance(started, bool) or not isinstance(message, str):
        raise DamagedFile(answer_path, "not a join answer")
    if not started:
        raise RunnerError(message)
    return message


def _folder(run_dir: Path) -> Path:
    """The run's requests folder, made if missing; one line when something else (a file, a
    link, a dangling one included) holds its name or the disk refuses it."""
    folder = run_dir / REQUESTS
    try:
        folder.mkdir()
    except FileExistsError:
        pass  # made by an earlier request, or something that is not a folder: checked below
    except OSError as err:
        raise _refused(err, folder) from None
    if folder.is_symlink() or not folder.is_dir():
        raise RunnerError(f"{folder} is not a directory; remove it and ask again")
    return folder


def _refused(err: OSError, path: Path) -> StorageError:
    # Not runner.results.rundir.storage_error: the supervisor imports this module, and that
    # one would bring the job spec's imports into it.
    return StorageError(f"cannot write {path}: {err.strerror or err}; check the run directory")


def pending(run_dir: Path) -> list[str]:
    """The tokens of requests not answered yet (regular files with a request's name only)."""
    folder = run_dir / REQUESTS
    if folder.is_symlink() or not folder.is_dir():
        return []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    answered = {n.removesuffix(ANSWER_SUFFIX) for n in names if n.endswith(ANSWER_SUFFIX)}
    return [
        n
        for n in names
        if _REQUEST.match(n) and n not in answered and (folder / n).is_file()
        and not (folder / n).is_symlink()
    ]  # fmt: skip


def answer(run_dir: Path, token: str, started: bool, message: str) -> None:
    """The supervisor's answer to request `token` (written whole: the asker reads it once)."""
    files.write_json(run_dir / REQUESTS / (token + ANSWER_SUFFIX),
                     {"started": started, "message": message})  # fmt: skip
