"""The link every worker of a shaped local run gets: parsed from what users type, validated,
and turned into the parameters that shape it.

    parse_link("100mbit")                       ->  Link(rate_bit_s=100_000_000)
    parse_link("100mbit,delay=5ms,jitter=1ms,loss=0.5%")
        -> Link(100_000_000, delay_us=5000, jitter_us=1000, loss_ppm=5000)

Grammar: `RATE[,delay=D][,jitter=J][,loss=P%]`, options in any order, each at most once.
Rates are tc's decimal bit rates (kbit = 1000 bit/s; `100mbit/s` is read as `100mbit`); the
byte-rate spellings (`mbps`, `MB/s`) are refused rather than guessed: tc reads `mbps` as
megabytes per second, most people mean megabits. Times take us, ms or s.

What the options mean, between any two workers: `delay` is added one way (every packet from
one worker to another waits it once, so a round trip gains twice the delay, as on a path
whose one-way propagation delay it is); `jitter` spreads each packet's delay uniformly over
delay +- jitter without reordering (a packet never arrives before one sent earlier); `loss`
drops that share of the packets between workers at random.

Not here: building the namespaces and qdiscs (runner/backends/local/network.py), the delay
line (delayline.py), measuring the link (probe.py), the pods' bandwidth annotations
(runner/backends/kubernetes/render).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from runner.errors import SpecError

PARAM = "--link"
UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
TIME_UNITS_US = {"us": 1, "ms": 10**3, "s": 10**6}
# Below 100 kbit/s a step's collectives take minutes. Well below 100 Gbit/s the veth pairs,
# not the shaper, set the rate (one core moves a few Gbit/s through them): the probe
# measures what a link carries and the record says when that is far below its rate.
MIN_RATE_BIT_S = 100 * 10**3
MAX_RATE_BIT_S = 100 * 10**9
# A geostationary satellite hop is about 270 ms one way; beyond a second one way a run's
# collectives would wait out gloo's timeouts rather than measure anything.
MAX_DELAY_US = 1_000_000
PPM = 1_000_000  # loss in parts per million: 0.001 % steps, exact in an int
EXAMPLES = "such as 100mbit, 1gbit or 500kbit"
SYNTAX = "RATE[,delay=D][,jitter=J][,loss=P%], e.g. 100mbit,delay=5ms,loss=0.1%"
ETHERNET_FRAME_BYTES = 1514  # a full frame on a 1500-byte MTU veth, as tbf counts it

_RATE = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-z/]+)")
_TIME = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>us|ms|s)")
_SHARE = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*%")


@dataclass(frozen=True)
class Link:
    rate_bit_s: int
    delay_us: int = 0  # added one way, worker to worker (a round trip gains it twice)
    jitter_us: int = 0  # delay varies uniformly over delay +- jitter, order kept
    loss_ppm: int = 0  # share of the packets between workers dropped, in parts per million

    def __post_init__(self) -> None:
        if not MIN_RATE_BIT_S <= self.rate_bit_s <= MAX_RATE_BIT_S:
            raise SpecError(
                PARAM,
                f"{format_rate(self.rate_bit_s)} is outside the rates a shaped link can have "
                f"({format_rate(MIN_RATE_BIT_S)} to {format_rate(MAX_RATE_BIT_S)})",
            )
        if not 0 <= self.delay_us <= MAX_DELAY_US:
            raise SpecError(PARAM, f"delay must be 0 to {format_time(MAX_DELAY_US)} one way")
        if not 0 <= self.jitter_us <= self.delay_us:
            raise SpecError(
                PARAM,
                f"jitter ({format_time(self.jitter_us)}) must be at most the delay "
                f"({format_time(self.delay_us)}): a packet cannot arrive before it was sent",
            )
        if not 0 <= self.loss_ppm < PPM:
            raise SpecError(
                PARAM, "loss must be at least 0 % and below 100 % (at 100 % nothing crosses)"
            )

    @property
    def impaired(self) -> bool:
        """Whether the link asks for more than a rate: a delay, jitter or loss."""
        return bool(self.delay_us or self.jitter_us or self.loss_ppm)

    @property
    def text(self) -> str:
        """The canonical spelling, which parse_link reads back: "100mbit",
        "2500mbit,delay=5ms,jitter=500us,loss=0.1%"."""
        parts = [format_rate(self.rate_bit_s)]
        parts += [f"delay={format_time(self.delay_us)}"] if self.delay_us else []
        parts += [f"jitter={format_time(self.jitter_us)}"] if self.jitter_us else []
        parts += [f"loss={format_share(self.loss_ppm)}"] if self.loss_ppm else []
        return ",".join(parts)

    @property
    def rate_mbit_s(self) -> float:
        return self.rate_bit_s / 1e6

    @property
    def delay_ms(self) -> float:
        return self.delay_us / 1e3

    @property
    def jitter_ms(self) -> float:
        return self.jitter_us / 1e3

    @property
    def loss_percent(self) -> float:
        return self.loss_ppm * 100 / PPM

    @property
    def added_round_trip_ms(self) -> float:
        """What the link adds to a round trip between two workers: the delay each way."""
        return 2 * self.delay_ms

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
    """A Link from what a user typed ("100mbit", "1 Gbit,delay=2ms"); SpecError naming
    --link otherwise."""
    rate_text, *options = text.split(",")
    spelled = rate_text.strip().lower()
    if "/" in spelled and not spelled.endswith("/s"):
        rate, latency = spelled.split("/", 1)
        raise SpecError(PARAM, f"{text!r}: give a delay as an option: {rate},delay={latency}")
    seen: dict[str, str] = {}
    for option in options:
        key, sep, value = option.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("delay", "jitter", "loss"):
            raise SpecError(PARAM, f"{option.strip()!r} in {text!r} is not an option of {SYNTAX}")
        if key in seen:
            raise SpecError(PARAM, f"{text!r} gives {key} twice")
        if value.strip().startswith("-"):
            raise SpecError(PARAM, f"{key}={value.strip()} in {text!r} cannot be negative")
        seen[key] = value
    return Link(
        rate_bit_s=_parse_rate(spelled, text),
        delay_us=_parse_time("delay", seen["delay"], text) if "delay" in seen else 0,
        jitter_us=_parse_time("jitter", seen["jitter"], text) if "jitter" in seen else 0,
        loss_ppm=_parse_share(seen["loss"], text) if "loss" in seen else 0,
    )


def _parse_rate(spelled: str, text: str) -> int:
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
            f"{spelled!r} is outside the rates a shaped link can have "
            f"({format_rate(MIN_RATE_BIT_S)} to {format_rate(MAX_RATE_BIT_S)})",
        )
    if bits != bits.to_integral_value():
        raise SpecError(PARAM, f"{text!r} is not a whole number of bits per second")
    return int(bits)


def _parse_time(key: str, value: str, text: str) -> int:
    """Microseconds from "5ms", "250us", "0.5s"; SpecError for anything else."""
    match = _TIME.fullmatch(value.strip().lower())
    if match is None:
        raise SpecError(
            PARAM, f"{key}={value.strip()!r} in {text!r}: expected a time such as 5ms or 250us"
        )
    micros = Decimal(match["number"]) * TIME_UNITS_US[match["unit"]]
    if micros > MAX_DELAY_US:
        raise SpecError(
            PARAM, f"{key}={value.strip()} is absurd here: at most {format_time(MAX_DELAY_US)}"
        )
    if micros != micros.to_integral_value():
        raise SpecError(PARAM, f"{key}={value.strip()} is finer than a microsecond")
    return int(micros)


def _parse_share(value: str, text: str) -> int:
    """Parts per million from "0.5%"; SpecError for anything else, 100 % and more included."""
    match = _SHARE.fullmatch(value.strip())
    if match is None:
        raise SpecError(
            PARAM, f"loss={value.strip()!r} in {text!r}: expected a percentage such as 0.5%"
        )
    ppm = Decimal(match["number"]) * PPM / 100
    if ppm >= PPM:
        raise SpecError(PARAM, f"loss={value.strip()} must be below 100 % (nothing would cross)")
    if ppm != ppm.to_integral_value():
        raise SpecError(PARAM, f"loss={value.strip()} is finer than 0.0001 %")
    return int(ppm)


def format_rate(rate_bit_s: int) -> str:
    """In the largest unit that divides the rate exactly: 1gbit, 2500mbit, 100500bit; 0bit
    (every unit divides zero, and "0kbit" refused as "0gbit" read as another rate)."""
    if rate_bit_s == 0:
        return "0bit"
    for unit, scale in sorted(UNITS.items(), key=lambda item: -item[1]):
        if rate_bit_s % scale == 0:
            return f"{rate_bit_s // scale}{unit}"
    raise AssertionError("every integer is a whole number of bits")


def format_time(time_us: int) -> str:
    """In the largest unit that divides it exactly: 1s, 5ms, 250us."""
    for unit, scale in sorted(TIME_UNITS_US.items(), key=lambda item: -item[1]):
        if time_us and time_us % scale == 0:
            return f"{time_us // scale}{unit}"
    return f"{time_us}us"


def format_share(ppm: int) -> str:
    """A loss in parts per million as a percentage without trailing zeros: 0.5%, 1%."""
    return f"{Decimal(ppm) * 100 / PPM:f}".rstrip("0").rstrip(".") + "%"


def refuse_impaired(link: Link, where: str, why: str) -> None:
    """SpecError naming --link when `link` asks for a delay, jitter or loss where `why` says
    they cannot be made: a run recorded with a delay its network did not have would lie."""
    if link.impaired:
        raise SpecError(
            PARAM,
            f"{link.text}: {where} cannot add delay, jitter or loss ({why}); give the rate "
            f"alone ({format_rate(link.rate_bit_s)}) or run locally",
        )
