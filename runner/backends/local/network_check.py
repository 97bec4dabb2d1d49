"""Whether this machine can build a shaped network (network.py), asked before a run starts:
the tools, the capabilities and the kernel's veth, bridge and tbf support, each answered in one
line with the fix.

    reason = network_check.problem(parse_link("100mbit"))   # None: it can
    network_check.require(link)                             # NetworkUnavailable otherwise

Not here: building the network (network.py), choosing netem or the delay line (impair.py,
whose own problem() this asks for a link's delay and loss).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path

from runner.backends.local import impair, namespaces
from runner.errors import BackendUnavailable
from runner.job.link import Link

CAP_NET_ADMIN = 12  # bit numbers in /proc/self/status CapEff (linux/capability.h)
CAP_SYS_ADMIN = 21
TOOLS = {"ip": "iproute2", "tc": "iproute2", "unshare": "util-linux", "nsenter": "util-linux"}
# What a throwaway namespace must accept for a shaped network to work here.
KERNEL_TRIAL = (
    "ip link add name t0 type veth peer name t1 && ip link add name t2 type bridge"
    " && ip link set dev t0 master t2 && tc qdisc add dev t1 root tbf rate 1mbit burst 4kb"
    " limit 64kb"
)


class NetworkUnavailable(BackendUnavailable):
    """A shaped network cannot be built here; the message says what is missing and the fix."""


def problem(link: Link | None = None) -> str | None:
    """Why a shaped network (for `link`, when given: its delay and loss too) cannot be built
    here, in one line with the fix; None if it can.

    Tools and capabilities are looked up in microseconds; then one throwaway namespace tries the
    kernel's veth, bridge and tbf support (tens of milliseconds, and it leaves nothing), and,
    for a delay or loss, netem or else iptables' NFQUEUE target."""
    if sys.platform != "linux":
        return f"shaped links need Linux network namespaces; this is {sys.platform}"
    tools = [tool for tool in TOOLS if shutil.which(tool) is None]
    if tools:
        packages = " ".join(sorted({TOOLS[tool] for tool in tools}))
        return f"shaped links need {', '.join(tools)}: apt-get install -y {packages}"
    caps = _missing_capabilities()
    if caps:
        return (
            f"shaped links need {' and '.join(caps)} (network and PID namespaces, traffic "
            "control): run the runner as root (sudo), or leave out --link"
        )
    return _kernel_problem() or (impair.problem(link) if link is not None else None)


def require(link: Link | None = None) -> None:
    """NetworkUnavailable (one line, with the fix) unless a shaped network (for `link`, when
    given) can be built here."""
    reason = problem(link)
    if reason is not None:
        raise NetworkUnavailable(reason)


def _missing_capabilities() -> list[str]:
    effective = 0
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                effective = int(line.split(":", 1)[1], 16)
    wanted = {"CAP_NET_ADMIN": CAP_NET_ADMIN, "CAP_SYS_ADMIN": CAP_SYS_ADMIN}
    return [name for name, bit in wanted.items() if not effective >> bit & 1]


def _kernel_problem() -> str | None:
    said = namespaces.trial(KERNEL_TRIAL)
    if said is None:
        return None
    if said.startswith("cannot try"):
        return said
    return (
        f"this kernel cannot build a shaped network ({said}): it needs network, PID and mount "
        "namespaces, veth, bridge and the tbf qdisc (modprobe veth bridge sch_tbf)"
    )
