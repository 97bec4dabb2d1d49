"""The command that installs one of the project's extras into the Python running the runner,
as a hint a user can paste: `.venv/bin/pip install -c constraints.txt -e '.[report]'` when
that Python is a virtual environment (a bare `pip` would install into whatever `pip` the
shell finds first, often the system's), `pip install ...` otherwise. Standard library only:
the hints are given on the paths that start without the workloads.
"""

from __future__ import annotations

import sys
from pathlib import Path


def pip() -> str:
    """The pip of this interpreter's virtual environment, relative to the working directory
    when it lies below it (`.venv/bin/pip`); plain `pip` outside a virtual environment."""
    if sys.prefix == sys.base_prefix:
        return "pip"
    candidate = Path(sys.prefix) / "bin" / "pip"
    if not candidate.is_file():
        return f"{sys.executable} -m pip"
    try:
        relative = candidate.relative_to(Path.cwd())
    except (ValueError, OSError):  # elsewhere, or the working directory is gone
        return str(candidate)
    return str(relative) if relative.parts[0] != ".." else str(candidate)


def extra(name: str) -> str:
    """The command that installs the extra `name` (from the repository's root)."""
    return f"{pip()} install -c constraints.txt -e '.[{name}]'"
