"""network_check.problem(): one line naming what this machine lacks for a shaped network, and
the fix.

The faults are real: a PATH without the tools, a process without the capabilities, a `tc` that
answers as a kernel without tbf (a fake at the process boundary)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.backends.local import network_check

REPO = Path(__file__).resolve().parents[3]


def test_missing_tools_are_named_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to find
    assert network_check.problem() == (
        "shaped links need ip, tc, unshare, nsenter: apt-get install -y iproute2 util-linux"
    )


def test_missing_capabilities_are_named_with_the_fix() -> None:
    code = "from runner.backends.local import network_check; print(network_check.problem())"
    argv = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to drop root's capabilities")
        argv = ["setpriv", "--bounding-set=-net_admin,-sys_admin", "--", *argv]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    said = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    assert said.strip() == (
        "shaped links need CAP_NET_ADMIN and CAP_SYS_ADMIN (network and PID namespaces, "
        "traffic control): run the runner as root (sudo), or leave out --link"
    )


def test_a_kernel_without_tbf_is_reported_with_its_error_and_the_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shaping: None
) -> None:
    fake = tmp_path / "tc"
    fake.write_text("#!/bin/sh\necho 'Error: Specified qdisc kind is unknown.' >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert network_check.problem() == (
        "this kernel cannot build a shaped network (Error: Specified qdisc kind is unknown.): "
        "it needs network, PID and mount namespaces, veth, bridge and the tbf qdisc "
        "(modprobe veth bridge sch_tbf)"
    )


def test_require_raises_the_problem_as_a_runner_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(network_check.NetworkUnavailable, match=r"^shaped links need ip, tc"):
        network_check.require()
