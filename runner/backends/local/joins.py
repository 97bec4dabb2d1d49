"""Join requests: how `runner join RUN_ID` asks a local elastic run for one more worker, and
how its supervisor serves them.

The supervisor owns every process of a run (its lifetime, cancel, the outcome), so it alone
starts a joiner; the command only asks (`ask`). It creates `requests/join-<token>` in the run
directory (a new empty file, never through a link) and waits for `join-<token>.answer`; the
supervisor looks for requests while it polls its workers (`Server.serve`), starts the worker or
refuses (`join_refusal` says when), and answers with JSON `{"started": bool, "message": str}`.
No pid and no command travels in a request: what the joiner runs is the run's own request,
as the supervisor read it at its start, so a file someone else drops in the directory can at
most ask for a worker the run may have anyway.
Not here: what a joiner runs (elastic.py), the supervisor's loop and the run's outcome.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from contract import files
from contract.files import DamagedFile
from contract.rundir import LOGS
from runner.backends.base import LocalRequest
from runner.backends.local import processes
from runner.backends.local.elastic import joiner_process
from runner.backends.local.launch import Started, start, start_failure
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


# ---- the supervisor's side ---------------------------------------------------------------


# A pass answers at most this many requests: a folder flooded with request files (anyone who
# may write the run directory can make thousands) must not stall the supervisor's loop, which
# also watches the workers, the leash and cancels. The rest wait for the next passes.
ANSWERS_PER_PASS = 64
# The folder is listed again when it changed (a request made, an answer taken), and at least
# this often anyway: a request made in the same clock tick as the last listing leaves the
# folder's mtime as it was, and must not wait for ever. Unchanged, a flooded folder is not
# listed and sorted 20 times a second (a third of a core for 40,000 names, taken from the
# benchmark the run measures).
RESCAN_S = 1.0


class Server:
    """The supervisor's side of the requests folder: which requests to answer at each poll,
    and the answers the disk has not taken yet."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        # An answer the disk refuses (full) must not end the run: it waits here and is
        # written at a later pass, once the disk takes it (never a second worker for one).
        self.unsent: dict[str, tuple[bool, str]] = {}
        self._queue: list[str] = []  # listed, not served yet: drained before listing again
        self._mark: tuple[int, int, int] | None = None  # the folder as last listed
        self._listed = -float("inf")  # when (monotonic)

    def due(self) -> list[str]:
        """The requests to answer in this pass (ANSWERS_PER_PASS at most, the unsent first):
        none new when the folder has not changed since the last listing."""
        if not self._queue:
            self._queue = self._listing()
        unsent = list(self.unsent)[:ANSWERS_PER_PASS]
        room = ANSWERS_PER_PASS - len(unsent)  # the rest of the queue waits its turn
        fresh = [t for t in self._queue[:room] if t not in self.unsent]
        del self._queue[:room]
        return [*unsent, *fresh]

    def _listing(self) -> list[str]:
        """The requests waiting, if the folder changed since the last listing (or RESCAN_S
        passed): listed once, then served a pass at a time."""
        try:
            st = os.stat(self.run_dir / REQUESTS, follow_symlinks=False)
        except OSError:
            return []
        mark = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        now = time.monotonic()
        if mark == self._mark and now - self._listed < RESCAN_S:
            return []
        self._mark, self._listed = mark, now  # before the listing: a later change is seen
        return pending(self.run_dir)

    def serve(self, request: LocalRequest, started: Started, exits: processes.Exits) -> None:
        """Answer the `runner join`s waiting: start worker n (the next process), or say why
        not. A request gone since it was listed (its asker gave up) is not answered."""
        for token in self.due():
            if token not in self.unsent:
                if not _waiting(self.run_dir / REQUESTS / token):
                    continue
                self.unsent[token] = _join(self.run_dir, request, started, exits)
            was_started, message = self.unsent[token]
            with contextlib.suppress(OSError):
                answer(self.run_dir, token, was_started, message)
                del self.unsent[token]


def _waiting(path: Path) -> bool:
    """Whether the request at `path` is still there (a regular file, never a link)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _join(
    run_dir: Path, request: LocalRequest, started: Started, exits: processes.Exits
) -> tuple[bool, str]:
    """Start worker n for a join request if the run can take it: (started, the answer)."""
    refusal = join_refusal(exits.codes(), request)
    if refusal is not None:
        return False, refusal
    index = len(exits.processes)
    process = joiner_process(request.processes[0], index)
    try:
        exits.add(start(process, started, run_dir / LOGS / f"launcher-{index}.log"))
    except OSError as err:  # its log a link, the disk full: the run goes on without it
        return False, f"cannot start a worker: {start_failure(err)}"
    return True, (f"worker w{index} started; it joins at the run's next decision point "
                  f"(its log: {LOGS}/rank-{index}.log)")  # fmt: skip


def join_refusal(returncodes: Sequence[int | None], request: LocalRequest) -> str | None:
    """Why an elastic run cannot take one more worker now (None: it can). MAX is how many
    it started; a worker counts while its process runs (one still waiting to be admitted
    included, so two joins at once never pass MAX)."""
    max_workers = len(request.processes)
    if returncodes[0] is not None:
        return "the run is ending (worker 0, which writes its record, has exited)"
    alive = sum(code is None for code in returncodes)
    if alive >= max_workers:
        return (f"the run already has {alive} workers, its maximum (--workers "
                f"{request.min_workers}:{max_workers})")  # fmt: skip
    return None
