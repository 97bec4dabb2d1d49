"""How a shaped link gets its delay, jitter and loss: netem where the kernel has it (tried,
never assumed), else the NFQUEUE delay line (delayline.py), and what each needs here.
network.py says where they act and why (a worker's incoming packets, for the delay line).

Not here: the namespaces and the rate (network.py), the reader (delayline.py).
"""

from __future__ import annotations

import functools
import shutil
import subprocess

from runner.backends.local import namespaces
from runner.backends.local.delayline import QUEUE_NUM
from runner.backends.local.namespaces import Holder, NamespaceError
from runner.job.link import Link, format_time

DELAY_LINE_TOOLS = {"iptables": "iptables"}
NETEM = "netem"
DELAY_LINE = "delay line"
NETEM_TRIAL = "ip link set dev lo up && tc qdisc add dev lo root netem delay 1ms"
DELAY_LINE_TRIAL = "iptables -w -A OUTPUT -o lo -j NFQUEUE --queue-num 0"


def impairment(link: Link) -> str | None:
    """How `link`'s delay, jitter and loss are made here: NETEM, DELAY_LINE, or None (it asks
    for none). Jitter takes the delay line: netem's reorders packets, the link's must not."""
    if not link.impaired:
        return None
    return NETEM if not link.jitter_us and netem_available() else DELAY_LINE


@functools.cache
def netem_available() -> bool:
    """Whether this kernel has the netem qdisc: tried in a throwaway namespace (it leaves
    nothing); asked once per process."""
    return namespaces.trial(NETEM_TRIAL) is None


def problem(link: Link) -> str | None:
    """Why `link`'s delay and loss cannot be made here, in one line with the fix; None if
    they can (or it asks for none)."""
    if impairment(link) != DELAY_LINE:
        return None
    tools = [tool for tool in DELAY_LINE_TOOLS if shutil.which(tool) is None]
    if tools:
        return (
            f"{link.text} needs netem (this kernel has none) or iptables for the NFQUEUE delay "
            "line: apt-get install -y iptables"
        )
    said = namespaces.trial(DELAY_LINE_TRIAL)
    if said is None:
        return None
    return (
        f"{link.text} needs netem (this kernel has none) or iptables' NFQUEUE target ({said}): "
        "a kernel with CONFIG_NETFILTER_XT_TARGET_NFQUEUE and CONFIG_NETFILTER_NETLINK_QUEUE"
    )


def describe(how: str | None) -> str:
    """How the record says delay and loss are made (`how`: NETEM, DELAY_LINE or None)."""
    if how == NETEM:
        return "delay and loss by netem on each worker's outgoing packets (tbf below it)"
    if how == DELAY_LINE:
        return (
            "delay and loss by an NFQUEUE delay line on each worker's incoming packets "
            "(iptables in its namespace, one reader thread per link in the run's supervisor)"
        )
    return ""


def delay_line_rule(interface: str) -> list[str]:
    """The iptables rule (its arguments after the binary) that queues a worker's incoming
    packets for its delay line; no --queue-bypass: without a reader, packets are dropped."""
    return ["-A", "INPUT", "-i", interface, "-j", "NFQUEUE", "--queue-num", str(QUEUE_NUM)]


def netem(link: Link, interface: str, verb: str, delay: bool, loss: bool) -> str:
    """The netem qdisc of a worker's end (`verb`: add or change), the tbf as its child; its
    delay and loss switched on or off."""
    text = f"qdisc {verb} dev {interface} root handle 1: netem"
    text += f" delay {format_time(link.delay_us)}" if delay and link.delay_us else " delay 0us"
    return text + (f" loss {link.loss_percent:g}%" if loss and link.loss_ppm else "")


def run_in(holder: Holder, argv: list[str], timeout_s: float = 10.0) -> None:
    """`argv` in the holder's network namespace; NamespaceError with what it said."""
    try:
        done = subprocess.run(
            namespaces.enter_net_argv(holder, argv), capture_output=True, text=True,
            timeout=timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise NamespaceError(f"{argv[0]} did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise NamespaceError(f"{argv[0]} failed: {said[0] if said else done.returncode}")
