"""What users type for --link, what it means, and what it refuses (and why)."""

from __future__ import annotations

import pytest

from runner.errors import SpecError
from runner.job.link import Link, parse_link


@pytest.mark.parametrize(
    ("text", "rate_bit_s", "canonical"),
    [
        ("100mbit", 100_000_000, "100mbit"),
        ("1gbit", 1_000_000_000, "1gbit"),
        ("500kbit", 500_000, "500kbit"),
        (" 1 Gbit ", 1_000_000_000, "1gbit"),
        ("2.5gbit", 2_500_000_000, "2500mbit"),
        ("1000mbit", 1_000_000_000, "1gbit"),
        ("100500bit", 100_500, "100500bit"),
    ],
)
def test_rates_parse_in_decimal_units_and_print_back_canonically(
    text: str, rate_bit_s: int, canonical: str
) -> None:
    link = parse_link(text)
    assert link.rate_bit_s == rate_bit_s
    assert link.text == canonical
    assert parse_link(link.text) == link


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("fast", "expected a rate such as 100mbit, 1gbit or 500kbit, got 'fast'"),
        ("", "expected a rate"),
        ("100", "expected a rate"),
        ("-5mbit", "expected a rate"),
        (
            "100mbps",
            "'100mbps' is ambiguous (tc reads mbps as megabytes per second); give bits "
            "per second, e.g. 100mbit",
        ),
        ("12MB/s", "ambiguous"),
        ("10mbyte", "unknown unit 'mbyte' in '10mbyte'; use kbit, mbit or gbit"),
        ("100mbit/2ms", "'100mbit/2ms': give a delay as an option: 100mbit,delay=2ms"),
        ("1gbit,delay=-1ms", "delay=-1ms in '1gbit,delay=-1ms' cannot be negative"),
        ("1gbit,delay=2s", "delay=2s is absurd here: at most 1s"),
        ("1gbit,delay=1e9ms", "expected a time such as 5ms or 250us"),
        ("1gbit,delay=5", "expected a time such as 5ms or 250us"),
        ("1gbit,delay=1.0001us", "finer than a microsecond"),
        ("1gbit,jitter=1ms", "jitter (1ms) must be at most the delay (0us)"),
        ("1gbit,delay=1ms,jitter=2ms", "jitter (2ms) must be at most the delay (1ms)"),
        ("1gbit,loss=100%", "loss=100% must be below 100 % (nothing would cross)"),
        ("1gbit,loss=250%", "must be below 100 %"),
        ("1gbit,loss=-1%", "loss=-1% in '1gbit,loss=-1%' cannot be negative"),
        ("1gbit,loss=0.5", "expected a percentage such as 0.5%"),
        ("1gbit,loss=nan%", "expected a percentage"),
        ("1gbit,delay=1ms,delay=2ms", "gives delay twice"),
        ("1gbit,latency=1ms", "'latency=1ms' in '1gbit,latency=1ms' is not an option of RATE["),
        ("1gbit,", "'' in '1gbit,' is not an option"),
        ("1.5bit", "not a whole number of bits per second"),
        ("50kbit", "50kbit is outside the rates a shaped link can have (100kbit to 100gbit)"),
        ("200gbit", "outside the rates"),
        ("9" * 5000 + "mbit", "is outside the rates a shaped link can have (100kbit to 100gbit)"),
        ("9" * 5000 + ".5kbit", "outside the rates"),
        ("0kbit", "0bit is outside the rates"),
    ],
)
def test_bad_links_are_refused_naming_the_option_and_the_fix(text: str, says: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_link(text)
    assert caught.value.param == "--link"
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("text", "canonical", "fields"),
    [
        ("100mbit,delay=5ms", "100mbit,delay=5ms", (5000, 0, 0)),
        ("1gbit, Loss=0.5% ,delay=0.25ms", "1gbit,delay=250us,loss=0.5%", (250, 0, 5000)),
        ("25mbit,delay=1s,jitter=20ms", "25mbit,delay=1s,jitter=20ms", (10**6, 20000, 0)),
        ("1gbit,loss=0.0001%", "1gbit,loss=0.0001%", (0, 0, 1)),
        ("1gbit,delay=0ms,loss=0%", "1gbit", (0, 0, 0)),
    ],
)
def test_delay_jitter_and_loss_parse_in_any_order_and_print_back_canonically(
    text: str, canonical: str, fields: tuple[int, int, int]
) -> None:
    link = parse_link(text)
    assert (link.delay_us, link.jitter_us, link.loss_ppm) == fields
    assert link.text == canonical
    assert parse_link(link.text) == link
    assert link.impaired == any(fields)


def test_a_round_trip_between_two_workers_gains_the_delay_twice() -> None:
    assert parse_link("100mbit,delay=5ms").added_round_trip_ms == 10.0


def test_a_link_with_a_delay_is_refused_where_it_cannot_be_made_naming_why() -> None:
    from runner.job.link import refuse_impaired

    refuse_impaired(parse_link("100mbit"), "this cluster", "no netem")  # a rate alone is fine
    said = r"^100mbit,loss=1%: this cluster cannot add delay, jitter or loss \(no netem\); "
    with pytest.raises(SpecError, match=said + r"give the rate alone \(100mbit\)"):
        refuse_impaired(parse_link("100mbit,loss=1%"), "this cluster", "no netem")


def test_the_bucket_holds_a_millisecond_of_traffic_and_never_less_than_two_frames() -> None:
    assert Link(1_000_000_000).burst_bytes == 125_000
    assert Link(1_000_000).burst_bytes == 2 * 1514


def test_the_queue_holds_20_ms_of_traffic_and_never_less_than_1_mib() -> None:
    assert Link(10_000_000_000).queue_bytes == 25_000_000
    assert Link(10_000_000).queue_bytes == 1 << 20


def test_more_workers_than_a_shaped_network_has_addresses_are_refused_before_the_run(tmp_path):
    from click.testing import CliRunner

    from runner.cli import main

    args = ["--results-dir", str(tmp_path), "submit", "cnn-digits", "--workers", "251"]
    result = CliRunner().invoke(main, [*args, "--link", "100mbit", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "at most 250 workers" in result.output
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_sweep_takes_links_whose_options_follow_their_rate() -> None:
    from runner.results.study import parse_links

    assert parse_links("25mbit,100mbit") == ("25mbit", "100mbit")
    assert parse_links("1gbit,1gbit,delay=5ms,loss=1%,25mbit,delay=20ms") == (
        "1gbit", "1gbit,delay=5ms,loss=1%", "25mbit,delay=20ms"
    )  # fmt: skip
    with pytest.raises(SpecError, match="repeats a link"):
        parse_links("1gbit,delay=1ms,1gbit,delay=1000us")
    with pytest.raises(SpecError, match="expected a rate"):
        parse_links("delay=5ms,1gbit")
