"""After `make demo` alone (the workloads extra), every command either works or stops with one
line naming the extra to install. The missing package is made missing for real: a None entry
in sys.modules is what Python's import system reports as "not installed"."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from runner.cli import main

CASES = [
    ("matplotlib", ["report", "some-study"], "report"),
    ("yaml", ["cost", "--stack", "gke-gpu-8"], "report"),
    ("mlperf_logging", ["check", "some-run"], "test"),
    ("kubernetes", ["submit", "cnn-digits", "--stack", "kind", "--dry-run"], "kubernetes"),
    ("kubernetes", ["sweep", "cnn-digits", "--workers", "1", "--stack", "kind"], "kubernetes"),
]


@pytest.mark.parametrize(("module", "args", "extra"), CASES)
def test_a_command_missing_its_extra_says_what_to_install_in_one_line(
    tmp_path, monkeypatch, module, args, extra
):
    monkeypatch.setitem(sys.modules, module, None)
    result = CliRunner().invoke(main, ["--results-dir", str(tmp_path), *args])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert f"pip install -c constraints.txt -e '.[{extra}]'" in lines[0]  # [extra] kept as text
    assert "Traceback" not in result.output
    assert not any(tmp_path.iterdir())
