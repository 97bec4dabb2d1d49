"""Install hints name the pip of the Python the runner runs in: `.venv/bin/pip` in the
project's virtual environment (a bare `pip` installs wherever the shell's first pip does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runner import install

REPO = Path(__file__).resolve().parents[2]


def hint_from(python: str, cwd: Path) -> str:
    code = "from runner.install import extra; print(extra('report'))"
    done = subprocess.run([python, "-c", code], cwd=cwd, env={"PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.strip()


def test_in_a_virtual_environment_the_hint_names_its_pip_relative_to_the_working_directory():
    assert sys.prefix != sys.base_prefix, "the suite runs in the project's .venv"
    venv = Path(sys.prefix)
    hint = hint_from(sys.executable, venv.parent)
    assert hint == f"{venv.name}/bin/pip install -c constraints.txt -e '.[report]'"


def test_from_elsewhere_the_hint_names_the_pip_by_its_whole_path(tmp_path):
    hint = hint_from(sys.executable, tmp_path)
    assert hint.startswith(f"{Path(sys.prefix) / 'bin' / 'pip'} install ")


def test_outside_a_virtual_environment_the_hint_is_plain_pip(tmp_path):
    base = Path(sys.base_prefix) / "bin" / Path(sys.executable).name
    hint = hint_from(str(base if base.exists() else Path(sys.base_prefix) / "bin" / "python3"),
                     tmp_path)  # fmt: skip
    assert hint == install.extra("report").replace(install.pip(), "pip", 1)
    assert hint.startswith("pip install ")
