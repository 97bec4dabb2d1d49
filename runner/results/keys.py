"""A run's configuration keys as text, the one reading of them that the dashboard's runs table
(columns, filters, groups) and `runner report --group-by` share: every key `--set` takes,
where it ran (workers, the link), its division and, for a run of a plugin's code, the plugins
its manifest names (`name@version`). Pure; not here: reading the records (runner.dashboard.data,
runner.results.runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contract.manifest import Manifest, PluginRecord

UNSHAPED = "unshaped"  # the link of a run on none (the report's word for it too)
PLUGIN = "plugin"
NO_POLICY = "none"


def config_keys(
    config: Mapping[str, Any],
    workers: str,
    link: str | None,
    division: str,
    manifest: Manifest | None,
) -> dict[str, str]:
    """Every configuration key of a run as text: the keys --set takes, `workers` as --workers
    reads ("4", "2:4"), the link, its division and, for a run of a plugin's code, `plugin`."""
    keys = {k: _text(v) for k, v in config.items()}
    keys |= {"workers": workers, "link": link or UNSHAPED, "division": division}
    keys["policy"] = keys.get("policy") or NO_POLICY
    plugins = plugin_text(manifest.plugins if manifest is not None else ())
    if plugins:
        keys[PLUGIN] = plugins
    return keys


def plugin_text(plugins: Iterable[PluginRecord]) -> str:
    """ "topk-example@0.1.0" (a plugin loaded from a path has no version: its name alone),
    several joined by commas; empty for a run of stackbench's own code only."""
    return ",".join(p.name + (f"@{p.version}" if p.version else "") for p in plugins)


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(_text(v) for v in value)
    return "" if value is None else str(value)
