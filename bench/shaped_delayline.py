"""What the NFQUEUE delay line itself costs: the rate one TCP stream gets through a 1gbit link
with the delay line at delay 0 against tbf alone, and the CPU its readers use per Gbit/s.

Both networks are built the same way (runner/backends/local/network.py), the second with
`delay_line=True`, which puts every packet a worker receives through its line's reader (a
thread of this process, as in a run's supervisor) with nothing to hold it for. The rate is the
probe's (one TCP stream, payload only), the median of --repeats; the CPU is the readers'
threads' own (utime + stime from /proc/self/task/<id>/stat) over those streams, divided by the
gigabits they carried. This is a speed benchmark, not a test: it asserts nothing.

Usage (root, iptables):
    python bench/shaped_delayline.py [--link 1gbit] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runner.backends.local import probe  # noqa: E402
from runner.backends.local.network import ShapedNetwork, address  # noqa: E402
from runner.backends.local.network_check import require  # noqa: E402
from runner.job.link import parse_link  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu_s(thread_id: int | None) -> float:
    if thread_id is None:
        return 0.0
    fields = Path(f"/proc/self/task/{thread_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14, 15)


def streams(net: ShapedNetwork, repeats: int) -> tuple[list[float], float]:
    """Each stream's payload Mbit/s, and the readers' CPU seconds per Gbit carried."""
    ends = (net.worker(0).ns_file("net"), net.worker(1).ns_file("net"), address(1))
    cpu_before = sum(thread_cpu_s(line.thread_id) for line in net.lines)
    rates = [probe.measure(*ends).payload_mbit_s for _ in range(repeats)]
    cpu_s = sum(thread_cpu_s(line.thread_id) for line in net.lines) - cpu_before
    # Each stream carries WINDOW_S of measured traffic after a warm-up of about WARMUP_S.
    gbit = sum(r * (probe.WINDOW_S + probe.WARMUP_S) for r in rates) / 1e3
    return rates, cpu_s / gbit if gbit else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--link", default="1gbit")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    link = parse_link(args.link)
    require(parse_link(f"{link.text},delay=1ms,jitter=1ms"))  # a delay line can be built
    with ShapedNetwork.open(link, 2) as net:
        tbf, _ = streams(net, args.repeats)
    with ShapedNetwork.open(link, 2, delay_line=True) as net:
        line, cpu_per_gbit = streams(net, args.repeats)
    tbf_mbit, line_mbit = statistics.median(tbf), statistics.median(line)
    print(f"link {link.text}, one TCP stream, median of {args.repeats} (payload Mbit/s)")
    print(f"  tbf alone:                 {tbf_mbit:8.1f}   ({', '.join(f'{r:.0f}' for r in tbf)})")
    print(
        f"  tbf + delay line, delay 0: {line_mbit:8.1f}   ({', '.join(f'{r:.0f}' for r in line)})"
    )
    print(f"  ratio: {line_mbit / tbf_mbit:.2f}x (the bar: at least 0.8x)")
    print(f"  delay line CPU: {cpu_per_gbit:.3f} core-seconds per Gbit carried "
          f"({100 * cpu_per_gbit:.1f} % of a core per Gbit/s)")  # fmt: skip


if __name__ == "__main__":
    main()
