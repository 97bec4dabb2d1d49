"""The `runner` command's entry point (the console script, and `python -m runner.cli`): the
replies that need no click, replayed from a cache before anything else is imported.

Why it exists: `runner`, `runner --help`, `runner -h` and `runner benchmarks` are what a user
types first and most, and they should start about as fast as Python itself (issue 33: within
2x). Importing click alone takes 2.1x Python's start (bench/startup.py --cli), so no path
through click can. Their replies depend on nothing but code, the installed packages and a few
facts of the process, so the first time (a miss) the click group runs as it always does, its
reply is recorded as it is written and cached (runner/stamped.py: stamped with the
interpreter, every module file the process imported, the cards' own sources, the installed
distributions), and replayed after: the same bytes on the same stream, the same exit code,
never a text written by hand. Anything else, and any invocation whose reply could differ from
the recorded one, goes to click.

What a reply depends on beyond the stamp is its key (one cache file per key): the arguments;
how click names the program (sys.argv[0], and __main__'s package under `python -m`); the
width click wraps help to (shutil.get_terminal_size's: COLUMNS, else the terminal on stdout);
whether stdout and stderr are terminals (click drops styles where not) and their encodings;
the locale variables gettext reads (click's words are translatable); Python's warning options.
A reply is recorded only where both streams are UTF-8, and kept only when it is ASCII, on one
stream, with exit 0 or 2 (a failure is never replayed: its cause may be gone next time).

Only os, sys and stat here (loaded with Python itself), and runner/stamped.py (marshal, zlib)
when a cache may answer: this module runs before anything else the runner imports
(bench/startup.py --cli measures it; tests/runner/test_cli_startup.py holds its replies to
click's own and to importing none of click, tests/runner/test_cli_replies.py its cache).
"""

from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False  # typing is not imported on the start-up path: a few ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeGuard

# The argument lists served from the cache; `benchmarks` with any option or argument is not.
SERVED = ((), ("--help",), ("-h",), ("benchmarks",))
CACHE = "cli-reply"  # the cache's name (runner/stamped.py)
_LOCALE = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")  # what gettext reads, in its order


def main() -> None:
    """`runner`: the cached reply where there is one, else the click group (recording its
    reply where it is one to cache)."""
    started_ns = _now_ns()
    try:
        key = reply_key(sys.argv[1:])
        if key is not None:
            _replay(key)
        from runner.cli.app import main as group  # which first takes Ctrl-C over, quietly
    except KeyboardInterrupt:  # Ctrl-C before the group's own handler is in: no traceback
        os._exit(130)
    if key is None:
        group()
    else:
        _record(key, group, started_ns)


def reply_key(args: list[str]) -> tuple[Any, ...] | None:
    """What the reply to `runner ARGS` depends on beside the stamp, or None where it is not
    one to cache (click answers)."""
    if tuple(args) not in SERVED or os.name != "posix":
        return None
    environ = os.environ
    if any(k.startswith("_") and k.endswith("_COMPLETE") for k in environ):
        return None  # click's shell completion (_RUNNER_COMPLETE) answers instead
    if args == ["benchmarks"] and not _results_dir_plain(
        environ.get("STACKBENCH_RESULTS") or "results"
    ):
        return None
    out, err = sys.stdout, sys.stderr
    try:
        ttys, encodings = (out.isatty(), err.isatty()), (out.encoding, err.encoding)
    except (AttributeError, ValueError, OSError):  # no stream, or a closed one
        return None
    columns = _terminal_columns()
    main_package = getattr(sys.modules.get("__main__"), "__package__", None)
    return (
        tuple(args), sys.argv[0], main_package, environ.get("COLUMNS"), columns, ttys,
        encodings, tuple(environ.get(name) for name in _LOCALE), tuple(sys.warnoptions),
    )  # fmt: skip


def _terminal_columns() -> int | None:
    """The terminal's width, as shutil.get_terminal_size asks it where COLUMNS is not a
    width; None where stdout is no terminal (or none, or closed)."""
    if sys.__stdout__ is None:
        return None
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (ValueError, OSError):
        return None


def _results_dir_plain(path: str) -> bool:
    """Whether the group's --results-dir (STACKBENCH_RESULTS, else ./results) passes click's
    check and own_folder without a word: a readable folder or nothing yet, on a path with no
    symbolic link in it (own_folder resolves one, which can fail), under a working folder that
    exists. Not a copy of those checks, a condition under which both pass: anything else goes
    to click, which says what is wrong."""
    try:
        absolute = os.path.join(os.getcwd(), path)
    except OSError:  # the working folder was deleted
        return False
    parts = [p for p in absolute.split("/") if p not in ("", ".")]
    for i in range(1, len(parts) + 1):
        try:
            if stat.S_ISLNK(os.lstat("/" + "/".join(parts[:i])).st_mode):
                return False
        except (FileNotFoundError, NotADirectoryError):
            break  # nothing below it exists either
        except OSError:
            return False
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.S_ISDIR(mode) and os.access(path, os.R_OK)


def _replay(key: tuple[Any, ...]) -> None:
    """The cached reply to this invocation, written and exited with, where there is one."""
    from runner import stamped

    path = stamped.cache_path(CACHE, key)
    reply = stamped.read(path, key) if path is not None else None
    if not _is_reply(reply):
        return
    out, err, code = reply
    stream = sys.stdout if out else sys.stderr
    stream.write(out or err)  # as click.echo writes: its text, then a flush
    stream.flush()
    sys.exit(code)


def _is_reply(reply: Any) -> TypeGuard[tuple[str, str, int]]:
    """(stdout, stderr, exit code) as _keep records it."""
    if not isinstance(reply, tuple) or len(reply) != 3:
        return False
    out, err, code = reply
    return (
        type(out) is str and type(err) is str and bool(out) != bool(err) and code in (0, 2)
        and type(code) is int and (out + err).isascii()
    )  # fmt: skip


def _record(key: tuple[Any, ...], group: Callable[[], Any], started_ns: int) -> None:
    """The click group, its reply recorded as it writes it and cached for the next time."""
    from runner.cli.common import escape_unencodable

    streams = sys.stdout, sys.stderr
    if not all(_utf8(stream) for stream in streams):  # click would write another way
        group()
        return
    escape_unencodable()  # what the group does first, done to the streams themselves
    out, err = _Recorder(streams[0]), _Recorder(streams[1])
    sys.stdout, sys.stderr = out, err
    try:
        group()
    except SystemExit as done:
        sys.stdout, sys.stderr = streams
        _keep(key, (out.text(), err.text(), done.code), started_ns)
        raise
    finally:
        sys.stdout, sys.stderr = streams


def _keep(key: tuple[Any, ...], reply: tuple[str, str, Any], started_ns: int) -> None:
    if _is_reply(reply):
        from runner import stamped

        path = stamped.cache_path(CACHE, key)
        if path is not None:
            stamped.write(path, reply, started_ns, key)


def _utf8(stream: Any) -> bool:
    encoding = getattr(stream, "encoding", None)
    return isinstance(encoding, str) and encoding.lower().replace("_", "-") in ("utf-8", "utf8")


def _now_ns() -> int:
    import time  # built in: no file to read

    return time.time_ns()


class _Recorder:
    """A text stream that writes through to `stream` and keeps what was written: click
    takes it for the stream itself (its encoding, errors, isatty and fileno are the
    stream's), so what it writes, and how, is what it would write without it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._written: list[str] = []

    def write(self, text: Any) -> int:
        written = self._stream.write(text)  # bytes raise here, as the stream's own write does
        self._written.append(text)
        return int(written)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def text(self) -> str:
        return "".join(self._written)
