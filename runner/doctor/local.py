"""`runner doctor` without a stack: what running benchmarks on this machine needs.

The Python version, the extras that `runner submit` (workloads), `runner dashboard`,
`runner report` and `runner check` import, and a results directory the runner can write.
The extras are looked up (importlib's find_spec), never imported, so the doctor answers in
a moment and a broken package cannot take it down.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from runner.doctor.checks import Check, missing, passed

MIN_PYTHON = (3, 11)
# extra -> (the modules it provides, what needs it, required for a local run)
EXTRAS: dict[str, tuple[tuple[str, ...], str, bool]] = {
    "workloads": (("torch", "numpy", "sklearn"), "runner submit, here", True),
    "dashboard": (("aiohttp",), "runner dashboard", False),
    "report": (("matplotlib", "yaml"), "runner report and runner cost", False),
    "kubernetes": (("kubernetes", "yaml"), "--stack and --kubeconfig", False),
}


def pip_install(extra: str) -> str:
    """The install command for `extra`, with the pip of the environment the runner runs in
    (`.venv/bin/pip` for the project's), from the project folder."""
    pip = "pip"
    if sys.prefix != sys.base_prefix:  # a virtual environment: its own pip
        here = Path(sys.executable).parent / "pip"
        try:
            pip = str(here.relative_to(Path.cwd()))
        except ValueError:
            pip = str(here)
    return f"{pip} install -c constraints.txt -e '.[{extra}]'"


def python_version() -> Check:
    found = ".".join(str(p) for p in sys.version_info[:3])
    if sys.version_info[:2] >= MIN_PYTHON:
        return passed("Python 3.11 or newer", f"{found} ({sys.executable})")
    return missing("Python 3.11 or newer", f"this is {found}",
                   "make demo (it makes .venv with python3.11)")  # fmt: skip


def extra(name: str) -> Check:
    modules, needed_by, required = EXTRAS[name]
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    step = f"the {name} extra"
    if not absent:
        return passed(step, f"{', '.join(modules)} installed")
    return missing(step, f"{', '.join(absent)} not installed (needed by {needed_by})",
                   pip_install(name), optional=not required)  # fmt: skip


def results_dir(path: Path) -> Check:
    """The folder runs go to: a writable folder, or one that can be made in a writable one."""
    step = "a writable results directory"
    existing = next((p for p in (path, *path.absolute().parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        return missing(step, f"{existing} is not a folder", "runner --results-dir DIR ...")
    if existing is None or not os.access(existing, os.W_OK | os.X_OK):
        return missing(step, f"{existing or path} is not writable by this user",
                       "runner --results-dir DIR ... (or STACKBENCH_RESULTS=DIR)")  # fmt: skip
    return passed(step, str(path) + ("" if path.exists() else " (made at the first run)"))


def checks(results: Path) -> list[Check]:
    return [python_version(), *(extra(name) for name in EXTRAS), results_dir(results)]
