"""Where a run keeps state that is code: the per-user cache, made private and checked first.

Inductor's kernel cache (torch.compile) holds Python modules it imports and pickles it loads:
whoever can write it runs code in the next compiled run. So it never lives in the data folder
(a folder others may share or write: a group's data, a cluster's data volume) but in the
user's own cache, `$XDG_CACHE_HOME/stackbench/compile`, else `~/.cache/stackbench/compile`,
which `prepare` makes with mode 0700 and checks before every use: `stackbench/` and
`compile/` real directories (no symbolic link), owned by this user, `compile/` closed to
everyone else and `stackbench/` writable by no one else. Anything else is refused in one
line that says how to start afresh; never repaired in place, since what another user could
write may already hold their code. Imports no torch: the runner checks it before a run.
Not here: compiling (workloads/runtime/compiling.py).
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping
from pathlib import Path

from workloads.data import DataError

APP = "stackbench"
COMPILE = "compile"


class CacheRefused(DataError):
    """The cache directory is not safe to run code from (one line, with the fix)."""


def compile_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The kernel cache's place: $XDG_CACHE_HOME/stackbench/compile, else under ~/.cache."""
    base = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / APP / COMPILE


def prepare(path: Path) -> Path:
    """`path` (a compile_cache_dir), made where missing and checked; CacheRefused if unsafe."""
    for directory, private in ((path.parent, False), (path, True)):
        try:
            if directory == path.parent:  # ~/.cache (or XDG's): the user's, as it is
                directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        except OSError as err:
            raise CacheRefused(f"cannot make the kernel cache {directory}: {err.strerror}; "
                               "set XDG_CACHE_HOME to a folder of yours") from None  # fmt: skip
        problem = _problem(os.lstat(directory), private)
        if problem is not None:
            raise CacheRefused(
                f"refusing the kernel cache {directory}: it {problem}, so another user could "
                f"have put code in it; remove it (rm -rf {shlex.quote(str(directory))}) and "
                "the next compiled run makes it again, private to you"
            )
    return path


def _problem(st: os.stat_result, private: bool) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})"
    mode = stat.S_IMODE(st.st_mode)
    if private and mode & 0o077:
        return f"is open to other users (mode {mode:o}, not 700)"
    if mode & 0o022:
        return f"is writable by other users (mode {mode:o})"
    return None
