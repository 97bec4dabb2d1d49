"""What --link reads in the spelling of bits per second with its "/s" (`100 Mbit/s`), beside
tests/runner/test_link.py: the same rate, never the byte-rate refusal."""

from __future__ import annotations

import pytest

from runner.errors import SpecError
from runner.job.link import parse_link


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("100mbit/s", "100mbit"), ("100 Mbit/s", "100mbit"), ("1gbit/s", "1gbit"),
     ("500kbit/s", "500kbit"), ("100500bit/s", "100500bit")],
)  # fmt: skip
def test_bits_per_second_with_its_per_second_is_the_same_rate(text: str, canonical: str) -> None:
    assert parse_link(text).text == canonical


@pytest.mark.parametrize("text", ["100mbps", "100MB/s", "100mb/s", "100Kbps"])
def test_byte_rate_spellings_are_still_refused_as_ambiguous(text: str) -> None:
    with pytest.raises(SpecError, match="ambiguous"):
        parse_link(text)
