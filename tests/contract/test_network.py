"""The network record: what the launcher puts in STACKBENCH_NETWORK and manifest.json keeps,
read back safely whatever the variable holds."""

from __future__ import annotations

import json
import sys

import pytest

from contract.network import ENV, UNSHAPED_LOOPBACK, NetworkRecord, from_environ

MEASURED = NetworkRecord(
    description="100mbit per worker",
    link="100mbit",
    asked_mbit_s=100.0,
    measured_mbit_s=95.6,
    rtt_ms=0.021,
    method="TCP payload rate",
)


def test_a_record_travels_through_the_environment_unchanged() -> None:
    assert from_environ({ENV: MEASURED.to_env()}) == MEASURED.to_dict()
    assert from_environ({ENV: UNSHAPED_LOOPBACK.to_env()}) == {
        "description": "loopback, unshaped",
        "link": None,
        "asked_mbit_s": None,
        "measured_mbit_s": None,
        "rtt_ms": None,
        "latency": "not emulated",
        "method": None,
        "asked_rtt_ms": None,
        "asked_loss_percent": None,
        "base_rtt_ms": None,
    }


def test_no_variable_means_an_unknown_network_not_a_guess() -> None:
    assert from_environ({}) is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{not json", "Expecting property name"),
        ("[1, 2]", "not a JSON object"),
        ('{"link": "1gbit"}', "field 'description' is not text"),
        ('{"description": "x", "rtt_ms": "fast"}', "field 'rtt_ms' has the wrong type"),
        ('{"description": "x", "measured_mbit_s": NaN}', "not a finite, non-negative number"),
        ('{"description": "x", "asked_mbit_s": -1}', "not a finite, non-negative number"),
        ('{"description": "x", "link": true}', "field 'link' has the wrong type"),
        ('{"description": "' + "x" * 5000 + '"}', "longer than 4096 characters"),
        # An integer too large for a float (valid JSON) and nesting past the recursion limit
        # raise OverflowError and RecursionError from the parser, not ValueError.
        ('{"description": "x", "rtt_ms": 1' + "0" * 400 + "}", "not a finite, non-negative"),
        ("[" * 2000 + "]" * 2000, "nested too deeply"),
    ],
)
def test_a_damaged_variable_is_recorded_as_damaged_never_raised(value: str, says: str) -> None:
    # Python's default recursion limit: other code in this process may have raised it (torch's
    # inductor does), and the variable's 4,096-character cap keeps the nesting under 2,048.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        entry = from_environ({ENV: value})
    finally:
        sys.setrecursionlimit(limit)
    assert entry is not None
    assert entry["description"].startswith(f"unknown: {ENV} is damaged (")
    assert says in entry["description"]
    assert entry["measured_mbit_s"] is None
    json.dumps(entry, allow_nan=False)  # manifest.json can always be written


def test_unknown_fields_are_dropped() -> None:
    data = {**MEASURED.to_dict(), "extra": "ignored"}
    assert from_environ({ENV: json.dumps(data)}) == MEASURED.to_dict()
