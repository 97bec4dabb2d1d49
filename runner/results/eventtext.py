"""One MLLOG event as a person reads it: the one formatter that `runner logs` and the
dashboard's log pane share, so the two read alike. Pure; here rather than in runner.cli so
that the dashboard depends on runner.results, never on the command line's modules.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from contract import events

MAX_VALUE_CHARS = 80  # a longer dict or list (the manifest, the summary) is shown by name only


def event_text(event: dict[str, Any], start_ms: int | None) -> str:
    """Time since run_start (or the clock, before one), the key, its value and metadata."""
    when = event.get("time_ms", 0)
    if start_ms is not None:
        stamp = f"{(when - start_ms) / 1000:+9.2f} s"
    else:
        stamp = datetime.fromtimestamp(when / 1000, UTC).strftime("%H:%M:%S")
    key, value = event.get("key"), event.get("value")
    if isinstance(value, dict | list) and len(json.dumps(value)) > MAX_VALUE_CHARS:
        shown = "{...}" if isinstance(value, dict) else "[...]"
    elif isinstance(value, float):
        shown = f"{value:.6g}"
    else:
        shown = "" if value is None else str(value)
    meta = events.metadata(event)
    extras = " ".join(f"{k}={v}" for k, v in meta.items() if k not in ("file", "lineno"))
    return " ".join(part for part in (f"[{stamp}]", str(key), shown, extras) if part)
