"""Which plugins a run uses, and what each one is: name, version and a hash of its source.

A run uses an entry when its config selects it (model, data set, task, optimizer, schedule,
strategy, each policy) or when it is the run's benchmark. Every entry that is not built in
is code from outside this repository: the run is open division, and its job and manifest
carry a PluginRecord (contract/manifest.py) per plugin package, hashed over the package's
Python files (relative names and contents, in name order), so two runs whose plugin code
differed by a byte are told apart. Torch-free.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from contract.imageplugins import package_files, source_sha256
from contract.manifest import PluginRecord
from workloads.configuration.components import NAME, Composite
from workloads.plugins import points
from workloads.plugins.registry import Entry, PluginError


def used_entries(config: Composite, benchmark: str | None = None) -> list[Entry[Any]]:
    """The registry entries `config` (and `benchmark`) select, built-ins included."""
    found: list[Entry[Any] | None] = []
    for part, choice in type(config).CHOICES.items():
        found.append(choice.point.entry(getattr(getattr(config, part), NAME)))
    task = getattr(config, "task", None)
    if task is not None:
        found.append(points.TASKS.entry(type(task).kind))
    adaptive = getattr(config, "adaptive", None)
    for policy in getattr(adaptive, "policy", ()):
        found.append(points.POLICIES.entry(policy))
    if benchmark is not None:
        found.append(points.BENCHMARKS.entry(benchmark))
    return [e for e in found if e is not None]


def used_plugin_names(config: Composite, benchmark: str | None = None) -> list[str]:
    """The names of the plugins `config` (and `benchmark`) use, without hashing them."""
    names = {_name(e.package, e.origin) for e in used_entries(config, benchmark) if not e.built_in}
    return sorted(names)


def _name(package: str, origin: str) -> str:
    """A plugin's name: its distribution's, or (loaded from a path) its module's."""
    name, sep, _ = origin.partition("==")
    return name if sep and "/" not in origin else package


def plugin_records(
    entries: Iterable[Entry[Any]], loaded: Mapping[str, str] | None = None
) -> tuple[PluginRecord, ...]:
    """One record per plugin package among `entries` (built-ins left out), in name order.
    `loaded`: module -> the --plugin value that loaded it."""
    packages: dict[str, Entry[Any]] = {}
    for entry in entries:
        if not entry.built_in:
            packages.setdefault(entry.package, entry)
    return tuple(
        _record(pkg, e.origin, (loaded or {}).get(pkg)) for pkg, e in sorted(packages.items())
    )


def _record(package: str, origin: str, load: str | None) -> PluginRecord:
    installed = "==" in origin and "/" not in origin  # else loaded from a path
    return PluginRecord(
        name=_name(package, origin),
        version=origin.partition("==")[2] if installed else None,
        source_sha256=source_hash(package),
        origin=origin,
        load=load,
    )


def source_hash(package: str) -> str:
    """SHA-256 of a top-level module's source: each .py file's path relative to the package
    and its bytes (a single-file module: that file); contract/imageplugins.py's function, so
    that an image's build and a run hash a plugin alike."""
    module = sys.modules.get(package) or importlib.import_module(package)
    roots = [Path(p) for p in getattr(module, "__path__", ())]
    if roots:
        return source_sha256([f for root in roots for f in package_files(root)])
    where = getattr(module, "__file__", None)
    if where is None:
        raise PluginError(f"plugin {package}: has no source file to record")
    return source_sha256([(Path(where).name, Path(where))])


def plugin_packages() -> dict[str, str]:
    """Top-level module -> the plugin's name, of every plugin entry registered so far."""
    found: dict[str, str] = {}
    for registry in points.POINTS:
        for entry in registry.loaded_entries():
            if not entry.built_in:
                found[entry.package] = _name(entry.package, entry.origin)
    return found


def plugin_at_fault(tb: TracebackType | None) -> str | None:
    """The plugin whose code raised, by the innermost frame of the traceback that lies in a
    plugin's package; None when no plugin code is on the stack."""
    dirs: list[tuple[Path, str]] = []
    for package, name in plugin_packages().items():
        module = sys.modules.get(package)
        where = [Path(p) for p in getattr(module, "__path__", ())]
        if not where and getattr(module, "__file__", None):
            where = [Path(module.__file__)]  # type: ignore[arg-type, union-attr]
        dirs += [(w.resolve(), name) for w in where]
    fault = None
    while tb is not None:
        filename = Path(tb.tb_frame.f_code.co_filename)
        for root, name in dirs:
            if filename == root or filename.is_relative_to(root):
                fault = name
        tb = tb.tb_next
    return fault
