"""A run's configuration keys as the runs table shows, filters and groups by them: every key
`--set` takes, where it ran (workers, the link), its division and, for a run of a plugin's
code, the plugin its manifest names, each as text. Pure; not here: reading the records
(runner.dashboard.data).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.job.spec import Placement

UNSHAPED = "unshaped"  # the link of a run on none (the report's word for it too)


def config_keys(
    config: Mapping[str, Any], placement: Placement, division: str, manifest: Any
) -> dict[str, str]:
    """Every configuration key of a run as text, for the table's columns, filters and groups:
    the keys --set takes, and where it ran (workers, the link), its division and, for a run
    of a plugin's code, the plugin its manifest names (whatever field holds it)."""
    keys = {k: _text(v) for k, v in config.items()}
    keys |= {"workers": placement.workers_text, "link": placement.link or UNSHAPED,
             "division": division}  # fmt: skip
    keys["policy"] = keys.get("policy") or "none"
    recorded = manifest.to_dict() if manifest is not None else {}
    for field in ("plugin", "plugins"):
        if recorded.get(field):
            keys["plugin"] = _text(recorded[field])
    return keys


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(_text(v) for v in value)
    if isinstance(value, dict):  # a plugin's record by its name, or names to records
        return str(value["name"]) if "name" in value else ",".join(map(str, value))
    return "" if value is None else str(value)
