"""Whether a data folder can be one: `runner data fetch` and `runner submit` look before they
act, so that a data folder set to a file or to a symbolic link whose target is gone is one
line with a fix that works, not "File exists" from a mkdir, nor a missing-file message whose
suggested fetch fails the same way.
Not here: what a prepared data set holds (workloads/data/canonical.py).
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from workloads.data import DATA_DIR_ENV


def problem(root: Path, dataset: str, named_by: str) -> str | None:
    """Why `root` cannot hold data set `dataset` (one line with the fix), or None: a folder,
    a link to one, or nothing yet (fetch makes it). `named_by`: how the user chose it
    ("--dir", "data_dir", DATA_DIR_ENV or "" for the default), for the fix to say."""
    try:
        st = os.lstat(root)
    except OSError:  # absent: fetch makes it; unreadable: the fetch names the error
        return None
    if stat.S_ISLNK(st.st_mode):
        if not root.exists():  # the link, or one it leads to, names nothing
            target = root.resolve()  # as far as the links lead
            return (f"the data folder {root} is a symbolic link to {target}, which does not "
                    f"exist; make it (mkdir -p {shlex.quote(str(target))}), then "
                    f"{_fetch(dataset, root, named_by)}")  # fmt: skip
        st = os.stat(root)
    if stat.S_ISDIR(st.st_mode):
        return None
    where = f" ({named_by})" if named_by else ""
    return (f"the data folder {root}{where} is a file, not a folder; move it away "
            f"(mv {shlex.quote(str(root))} {shlex.quote(str(root) + '.old')}), then "
            f"{_fetch(dataset, root, named_by)}")  # fmt: skip


def _fetch(dataset: str, root: Path, named_by: str) -> str:
    """The fetch command that prepares `dataset` where the run will look for it."""
    directory = "" if named_by in ("", DATA_DIR_ENV) else f" --dir {shlex.quote(str(root))}"
    return f"run `runner data fetch {dataset}{directory}`"
