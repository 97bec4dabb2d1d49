"""The network a run ran on: the `network` entry of manifest.json, and how it reaches the run.

Whatever launches the workers knows the network (the local backend shapes and measures its
own links; a cluster backend knows the pod bandwidth it asked for), the workers do not; so the
launcher puts this record, as JSON, in every worker's environment under `STACKBENCH_NETWORK`,
and rank 0 copies it into manifest.json. A run launched by anything else records `network:
null` (unknown), never a guess.

Not here: shaping or measuring a link (runner/backends/local/network.py and probe.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from contract.files import loads
from contract.records import finite_number

ENV = "STACKBENCH_NETWORK"
LATENCY_NOT_EMULATED = "not emulated"
# Long enough for any description we write; a longer value is not one of ours.
MAX_ENV_CHARS = 4096
QUANTITIES = (
    "asked_mbit_s", "measured_mbit_s", "rtt_ms", "asked_rtt_ms", "asked_loss_percent",
    "base_rtt_ms",
)  # fmt: skip


@dataclass(frozen=True)
class NetworkRecord:
    """What the workers' network was: asked for, and measured where someone measured it."""

    description: str  # "loopback, unshaped"; "100mbit per worker, each direction (tbf) ..."
    link: str | None = None  # the link as asked ("100mbit"); None: not shaped
    asked_mbit_s: float | None = None
    measured_mbit_s: float | None = None  # achieved payload rate; None: not measured
    rtt_ms: float | None = None  # round trip on the idle link; None: not measured
    latency: str = LATENCY_NOT_EMULATED  # added propagation delay
    method: str | None = None  # how measured_mbit_s and rtt_ms were measured
    asked_rtt_ms: float | None = None  # what the link adds to a round trip (its delay twice)
    asked_loss_percent: float | None = None  # of the packets between workers
    base_rtt_ms: float | None = None  # rtt_ms with the delay off; rtt_ms - this: what it adds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_env(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NetworkRecord:
        """ValueError naming the field when `data` is not a record of this shape."""
        if not isinstance(data.get("description"), str):
            raise ValueError("field 'description' is not text")
        values: dict[str, Any] = {"description": data["description"]}
        for key in ("link", "latency", "method"):
            if data.get(key) is not None:
                values[key] = _typed(data, key, str)
        for key in QUANTITIES:
            if data.get(key) is not None:
                values[key] = _quantity(data, key)
        return cls(**values)


UNSHAPED_LOOPBACK = NetworkRecord(description="loopback, unshaped")

# Written by the launcher into the run directory when a shaped network closes: what each
# worker's link did with its packets over the run ({"links": [{"worker": 0, "sent_bytes":
# ..., "dropped_packets": ..., "delay_line": {"lost": ..., "dropped_full": ...}}, ...]}).
# Missing when the run had no shaped link, or when its supervisor was killed.
TALLY_FILE = "network.json"


def from_environ(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The record the launcher left in `environ`, as manifest.json stores it: None when there
    is none, and a record saying so when the variable is damaged (never an exception: the
    run must not fail over its manifest)."""
    text = environ.get(ENV)
    if text is None:
        return None
    try:
        if len(text) > MAX_ENV_CHARS:
            raise ValueError(f"longer than {MAX_ENV_CHARS} characters")
        data = loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return NetworkRecord.from_dict(data).to_dict()
    except ValueError as err:  # json.JSONDecodeError is a ValueError
        return NetworkRecord(description=f"unknown: {ENV} is damaged ({err})").to_dict()


def _quantity(data: Mapping[str, Any], key: str) -> float:
    # json.loads reads NaN, Infinity and integers too large for a float
    value = finite_number(_typed(data, key, (int, float)))
    if value is None or value < 0:
        raise ValueError(f"field {key!r} is not a finite, non-negative number")
    return value


def _typed(data: Mapping[str, Any], key: str, tp: type | tuple[type, ...]) -> Any:
    value = data[key]
    if not isinstance(value, tp) or isinstance(value, bool):
        raise ValueError(f"field {key!r} has the wrong type ({value!r})")
    return value
