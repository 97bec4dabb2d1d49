"""The link every worker of a shaped local run gets: parsed from what users type, validated,
and turned into the token-bucket parameters that shape it.

    parse_link("100mbit")  ->  Link(rate_bit_s=100_000_000)   # also 500kbit, 1gbit, 2.5gbit

Units are tc's decimal bit rates (kbit = 1000 bit/s; `100mbit/s` is read as `100mbit`). The
byte-rate spellings (`mbps`, `MB/s`) are refused rather than guessed: tc reads `mbps` as
megabytes per second, most people mean megabits. Only a rate: this kernel has no netem, and
nothing else here can delay packets honestly, so a latency (`100mbit/2ms`) is refused with
the reason (README, "Shaped networks").

Not here: building the namespaces and qdiscs (runner/backends/local/network.py), measuring
the link (probe.py), the pods' bandwidth annotations (runner/backends/kubernetes/render).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from runner.errors import SpecError

PARAM = "--link"
UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
# Below 100 kbit/s a step's collectives take minutes. Well below 100 Gbit/s the veth pairs,
# not the shaper, set the rate (one core moves a few Gbit/s through them): the probe
# measures what a link carries and the record says when that is far below its rate.
MIN_RATE_BIT_S = 100 * 10**3
MAX_RATE_BIT_S = 100 * 10**9
EXAMPLES = "such as 100mbit, 1gbit or 500kbit"
ETHERNET_FRAME_BYTES = 1514  # a full frame on a 1500-byte MTU veth, as tbf counts it

_RATE = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-z/]+)")


@dataclass(frozen=True)
class Link:
    rate_bit_s: int

    def __post_init__(self) -> None:
        if not MIN_RATE_BIT_S <= self.rate_bit_s <= MAX_RATE_BIT_S:
            raise SpecError(
                PARAM,
                f"{format_rate(self.rate_bit_s)} is outside the rates a shaped link can have "
                f"({format_rate(MIN_RATE_BIT_S)} to {format_rate(MAX_RATE_BIT_S)})",
            )

    @property
    def text(self) -> str:
        """The canonical spelling, which parse_link reads back: "100mbit", "2500mbit"."""
        return format_rate(self.rate_bit_s)

    @property
    def rate_mbit_s(self) -> float:
        return self.rate_bit_s / 1e6

    @property
    def burst_bytes(self) -> int:
        """The token bucket's depth: 1 ms at the link's rate, at least two full frames.

        Deep enough that timer slack does not cost rate (with 4 KiB at 1gbit tbf let 0.3
        Gbit/s through; with 1 ms, 0.95), shallow enough that no message of more than 1 ms's
        worth crosses the link faster than its rate."""
        return max(2 * ETHERNET_FRAME_BYTES, self.rate_bit_s // 8 // 1000)

    @property
    def queue_bytes(self) -> int:
        """What the shaper queues before it drops: 20 ms at the link's rate, at least 1 MiB.

        A short queue made TCP lose packets and sit out retransmission timeouts, so a 1mbit
        link carried 0.74 Mbit/s; with 1 MiB every rate from 500kbit to 2gbit carried within
        5 % of its rate (the TCP/IP headers' share). The price is queueing delay under load,
        as on a real link with deep buffers."""
        return max(1 << 20, self.rate_bit_s // 8 * 20 // 1000)


def parse_link(text: str) -> Link:
    """A Link from what a user typed ("100mbit", "1 Gbit"); SpecError naming --link otherwise."""
    spelled = text.strip().lower()
    if "/" in spelled and not spelled.endswith("/s"):
        rate = spelled.split("/", 1)[0]
        raise SpecError(
            PARAM,
            f"{text!r}: only a rate can be shaped here, not a latency (this kernel has no "
            f"netem; see the README's 'Shaped networks'); give the rate alone, e.g. {rate}",
        )
    match = _RATE.fullmatch(spelled)
    if match is None:
        raise SpecError(PARAM, f"expected a rate {EXAMPLES}, got {text!r}")
    number, unit = match["number"], match["unit"]
    if unit.removesuffix("/s") in UNITS:  # "100mbit/s" says bits as plainly as "100mbit"
        unit = unit.removesuffix("/s")
    if unit not in UNITS:
        if unit.endswith(("bps", "/s")):
            raise SpecError(
                PARAM,
                f"{text!r} is ambiguous (tc reads mbps as megabytes per second); give bits "
                f"per second, e.g. {number}mbit",
            )
        raise SpecError(PARAM, f"unknown unit {unit!r} in {text!r}; use kbit, mbit or gbit")
    try:
        bits = Decimal(number) * UNITS[unit]
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        raise SpecError(PARAM, f"expected a rate {EXAMPLES}, got {text!r}") from None
    if bits > MAX_RATE_BIT_S:  # before int(): a number of thousands of digits cannot be one
        raise SpecError(
            PARAM,
            f"{text.strip()!r} is outside the rates a shaped link can have "
            f"({format_rate(MIN_RATE_BIT_S)} to {format_rate(MAX_RATE_BIT_S)})",
        )
    if bits != bits.to_integral_value():
        raise SpecError(PARAM, f"{text!r} is not a whole number of bits per second")
    return Link(rate_bit_s=int(bits))


def format_rate(rate_bit_s: int) -> str:
    """In the largest unit that divides the rate exactly: 1gbit, 2500mbit, 100500bit; 0bit
    (every unit divides zero, and "0kbit" refused as "0gbit" read as another rate)."""
    if rate_bit_s == 0:
        return "0bit"
    for unit, scale in sorted(UNITS.items(), key=lambda item: -item[1]):
        if rate_bit_s % scale == 0:
            return f"{rate_bit_s // scale}{unit}"
    raise AssertionError("every integer is a whole number of bits")
