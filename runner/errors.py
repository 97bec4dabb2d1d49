"""The runner's error family. Bad input is a SpecError (the CLI turns it into a usage error,
exit 2) or a BadInput (a run id, rank or run that does not fit the command, a data set that
is missing: its one line, exit 2); an operational failure is a RunnerError whose message
names the next command. A damaged file is contract.files.DamagedFile, which the CLI reports
like a RunnerError."""

from __future__ import annotations


class RunnerError(Exception):
    """Something went wrong while running; the message says what to do next. One the runner
    composes of several lines (a list of runs) names them in `lines`, and the CLI shows each
    on its own, while a newline within one (a run's id, a path) is written out as `\\n`."""

    lines: tuple[str, ...] = ()


class SpecError(ValueError):
    """Invalid user input; `param` names the option or argument to change."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class BadInput(RunnerError):
    """Input the command cannot use that no option's syntax could catch (a run id, a data
    set that is not there): bad input, exit 2, reported in its one line like a RunnerError,
    since the fix is in what the user named, not the usage."""


class RunInputError(BadInput):
    """The run the user named cannot be what the command takes: no run has that id, it names
    several, a rank it does not have, a join to a run that is not elastic. Bad input (exit 2),
    reported in its one line like a RunnerError, since the fix is in the line, not the usage."""


class RunNotFound(RunInputError):
    """No run directory matches the given id (or the prefix matches several)."""


class BackendUnavailable(RunnerError):
    """The backend cannot run here (a missing dependency or tool); the message says which."""


class DataUnavailable(BadInput, BackendUnavailable):
    """The data set a run reads is not where the run looks, or not the canonical one its
    division needs: bad input (exit 2); the message names the `runner data fetch` that fixes
    it. A BackendUnavailable too: the run cannot start here."""


class StorageError(RunnerError):
    """A disk refused a write (full, read-only, not ours); the message names the path."""


class Interrupted(BaseException):
    """SIGTERM or SIGHUP reached a command that follows a run: it cancels the run, keeps what
    was recorded and exits 128 + the signal's number, as Ctrl-C does with 130."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def interruption(err: BaseException) -> KeyboardInterrupt | Interrupted | None:
    """The Ctrl-C or signal that `err` is, or that caused it: Python 3.11 wraps a Ctrl-C that
    lands while a class is created (a dataclass's field, in an import) in `RuntimeError: Error
    calling __set_name__`, which must still cancel and exit 130 rather than print a traceback.
    Follows __cause__ only: an error raised while cleaning up after a Ctrl-C is its own."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt | Interrupted):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__
    return None
