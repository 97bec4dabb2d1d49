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
        ("100mbit/2ms", "only a rate can be shaped here, not a latency (this kernel has no netem"),
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
