"""Names the commands use that are imported on first use, not when the CLI starts.

`runner --help` builds every command (their options and help) and runs none, so what a
command's body needs (runner.api, the views, rich's tables, the job registry) stays out of
the start-up path: tests/runner/test_cli_startup.py lists what `--help` must not import.
A module-level name bound to `deferred_module("runner.api")` imports runner.api at its first
attribute access and is that module from then on; `deferred(factory)` does the same for an
object (the consoles), `deferred_name(module, name)` for a class or function of a module (a
constant compared with == must be imported where it is used: a stand-in equals nothing).
Type checkers see the real imports (each caller's TYPE_CHECKING block), so nothing here
weakens a type.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


class Deferred:
    """Stands for the object `factory()` returns, made at the first attribute access."""

    __slots__ = ("_factory", "_target")

    def __init__(self, factory: Callable[[], Any]) -> None:
        object.__setattr__(self, "_factory", factory)
        object.__setattr__(self, "_target", None)

    def _resolve(self) -> Any:
        target = object.__getattribute__(self, "_target")
        if target is None:
            target = object.__getattribute__(self, "_factory")()
            object.__setattr__(self, "_target", target)
        return target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resolve(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._resolve(), name, value)

    # Special methods bypass __getattr__; these are the ones the stand-ins are used through
    # (a function called, a rich console as a context manager, as rich's Live uses it).
    def __enter__(self) -> Any:
        return self._resolve().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._resolve().__exit__(*exc)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self._resolve())


def deferred(factory: Callable[[], Any]) -> Any:
    """An object made by `factory` when first used."""
    return Deferred(factory)


def deferred_module(name: str) -> Any:
    """The module `name`, imported when first used."""
    return Deferred(lambda: importlib.import_module(name))


def deferred_name(module: str, name: str) -> Any:
    """`from module import name`, done when the name is first used (called or read)."""
    return Deferred(lambda: getattr(importlib.import_module(module), name))
