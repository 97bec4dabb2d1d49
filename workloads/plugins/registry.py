"""A registry of one extension point: name -> entry, each with where it came from.

Our built-ins and a user's plugin register the same way, `REGISTRY.register(obj)`: the
object says its own names (a config class by its `name` field's Literal, a benchmark by
its `name`). Installed packages add entries through Python entry points, one group per
point (`stackbench.strategies = topk = "my_pkg.topk:TopKConfig"`), loaded the first time
the point is read, after our built-ins; so a plugin can never come first and take a
built-in's name. A second, different object under a name is a PluginError naming both
origins, never a silent override (pytest refuses two plugins of one name the same way).

An entry's origin is "built in" (our packages), "DIST==VERSION" (an installed
distribution), or the path of a module loaded from a file (`--plugin PATH`). Torch-free.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from importlib import metadata

T = TypeVar("T")

BUILT_IN = "built in"
# Our top-level packages: whatever is defined in them is built in.
BUILTIN_PACKAGES = frozenset({"workloads", "runner", "contract"})


class PluginError(ValueError):
    """A plugin that cannot be used: one line naming it and the cause (no traceback)."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    obj: T
    origin: str  # BUILT_IN, "dist==version" or a file path
    module: str  # where the object is defined (its top package is the plugin's)

    @property
    def built_in(self) -> bool:
        return self.origin == BUILT_IN

    @property
    def package(self) -> str:
        """The top-level module the entry's code lives in (what its source hash covers)."""
        return self.module.split(".")[0]


class Registry(Generic[T]):
    """The entries of one extension point.

    `point`: its plural name ("strategies"); `names_of(obj)`: the names an object registers
    under; `check(obj)`: None, or why the object cannot be one of this point's (a plugin's
    wrong type or signature is refused when registered, not when a run reaches it);
    `builtins`: our modules that register the built-ins when imported."""

    def __init__(
        self,
        point: str,
        names_of: Callable[[Any], Iterable[str]],
        check: Callable[[Any], str | None],
        builtins: tuple[str, ...],
    ) -> None:
        self.point = point
        self.group = f"stackbench.{point}"
        self._names_of = names_of
        self._check = check
        self._builtins = builtins
        self._entries: dict[str, Entry[T]] = {}
        self._loaded = False

    def register(self, obj: T, module: str | None = None, origin: str | None = None) -> T:
        """Add `obj` under each of its names; returns it (so it can decorate a class).
        `module`: where it is defined; by default a class's or function's own module, and
        for any other object (a PolicySpec, a Benchmark) the module that registers it.
        `origin`: where it comes from, when the caller knows (an entry point's distribution);
        else found from the module."""
        if module is None:
            own = isinstance(obj, type) or callable(obj)
            caller = sys._getframe(1).f_globals.get("__name__", "?")
            module = getattr(obj, "__module__", caller) if own else caller
        origin = origin or origin_of(module)
        why = self._check(obj)
        if why is not None:
            raise PluginError(f"{self.point}: {_label(obj)} from {origin} {why}")
        names = tuple(self._names_of(obj))
        if not names:
            raise PluginError(f"{self.point}: {_label(obj)} from {origin} names no entry")
        for name in names:
            held = self._entries.get(name)
            if held is not None and held.obj is obj:  # again: an entry point of a module
                self._entries[name] = Entry(name, obj, origin, held.module)  # that registers it
                continue
            if held is not None:
                raise PluginError(
                    f"{self.point}: {name!r} is registered twice, by {held.origin} "
                    f"({held.module}) and by {origin} ({module}); rename one"
                )
            self._entries[name] = Entry(name, obj, origin, module)
        return obj

    def entries(self) -> dict[str, Entry[T]]:
        """Every entry, built-ins first, then those of installed packages."""
        self._load()
        return dict(self._entries)

    def names(self) -> list[str]:
        return list(self.entries())

    def get(self, name: str) -> T:
        """The object registered under `name`; KeyError if none."""
        return self.entries()[name].obj

    def entry(self, name: str) -> Entry[T] | None:
        return self.entries().get(name)

    def loaded_entries(self) -> list[Entry[T]]:
        """The entries registered so far, without loading anything."""
        return list(self._entries.values())

    def view(self) -> Mapping[str, T]:
        """A read-only mapping name -> object that loads the point when first read."""
        return _View(self)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True  # first: a lookup made while loading sees what is there
        for module in self._builtins:
            importlib.import_module(module)
        from importlib import metadata  # here: `runner --help` need not import it

        for ep in metadata.entry_points(group=self.group):
            self._load_entry_point(ep)

    def _load_entry_point(self, ep: metadata.EntryPoint) -> None:
        dist = f"{ep.dist.name}=={ep.dist.version}" if ep.dist is not None else ep.value
        try:
            obj = ep.load()
        except Exception as err:  # a user's code: whatever it raises is its cause
            raise PluginError(
                f"plugin {dist}: entry point {ep.name} = {ep.value} ({self.group}) failed to "
                f"load: {type(err).__name__}: {err}"
            ) from None
        self.register(obj, ep.module, dist if ep.dist is not None else None)
        if ep.name not in self._names_of(obj):
            raise PluginError(
                f"plugin {dist}: entry point {ep.name} ({self.group}) names {ep.value}, "
                f"which registers as {', '.join(self._names_of(obj))}"
            )


class _View(Mapping[str, T]):
    def __init__(self, registry: Registry[T]) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> T:
        return self._registry.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.names())

    def __len__(self) -> int:
        return len(self._registry.names())


def origin_of(module: str) -> str:
    """Where code in `module` comes from: built in, an installed distribution, or a file."""
    top = module.split(".")[0]
    if top in BUILTIN_PACKAGES:
        return BUILT_IN
    from importlib import metadata

    dists = _distributions().get(top)
    if dists:
        return f"{dists[0]}=={metadata.version(dists[0])}"
    found = sys.modules.get(top)
    path = getattr(found, "__file__", None)
    if not path:
        return top
    return str(Path(path).parent if Path(path).name == "__init__.py" else Path(path))


def _distributions() -> dict[str, list[str]]:
    """Top-level module -> the distributions that install it (read each time: a plugin's
    entries are few, and a package installed while the process runs is seen)."""
    from importlib import metadata

    return dict(metadata.packages_distributions())


def _label(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__
