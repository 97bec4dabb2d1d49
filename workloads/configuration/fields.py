"""Declared config fields: each field's type and valid range, said once, and what follows
from the declaration: the check of a value, the parse of a command-line string and the
description of a key in errors and listings.

A component (workloads/configuration/components.py) declares a number as

    lr: float = setting(gt=0, le=1000)

and from that one declaration a value of the wrong type, a non-finite number or one out of
range is refused with the range ("lr: expected a finite number in (0, 1000], got nan"),
`--set lr=0.2` is parsed, and the key is described as "a finite number in (0, 1000]".
Every int and float field declares a range (a test holds every component to it). Not here:
which fields a config has (the components) or how they combine
(workloads/configuration/components.py). No torch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import MISSING, dataclass
from typing import Any, Literal, get_args, get_origin

BOUNDS = "bounds"  # the dataclass field metadata key of a declared range


class ConfigError(ValueError):
    """A config value is invalid; `key` names it so the caller can say what to change."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class Bounds:
    """A closed, open or half-open interval, written as mathematicians do: (0, 1000]."""

    low: float
    high: float
    low_open: bool
    high_open: bool

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        return (
            f"{'(' if self.low_open else '['}{_number(self.low)}, "
            f"{_number(self.high)}{')' if self.high_open else ']'}"
        )


def setting(
    default: Any = MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field with a valid range: one lower bound (ge or gt) and one upper bound
    (le or lt). For a tuple the range applies to each item; None is allowed by the type."""
    if (ge is None) == (gt is None) or (le is None) == (lt is None):
        raise TypeError("a range needs one of ge/gt and one of le/lt")
    low = ge if ge is not None else gt
    high = le if le is not None else lt
    assert low is not None and high is not None
    bounds = Bounds(float(low), float(high), low_open=gt is not None, high_open=lt is not None)
    return dataclasses.field(default=default, metadata={BOUNDS: bounds})


def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each field of dataclass `cls`."""
    # Through a plain function: mypy does not see a class object such as type[C] as Hashable,
    # which functools.cache asks of its arguments (python/mypy#11470); a bare `type` it does.
    return _field_types(cls)


@functools.cache  # resolving annotations is slow, and every config checks every field
def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def bounds_of(cls: type, name: str) -> Bounds | None:
    return _bounds(cls).get(name)


def check_fields(obj: Any) -> None:
    """Refuse any field of dataclass instance `obj` whose value breaks its declaration."""
    cls: type = type(obj)  # a bare `type` for the cache (see field_types)
    bounds = _bounds(cls)
    for name, tp in field_types(cls).items():
        check_value(name, getattr(obj, name), tp, bounds.get(name))


def coerce_fields(obj: Any) -> None:
    """Give each field of frozen dataclass instance `obj` its one representation (coerce)."""
    for name, tp in field_types(type(obj)).items():
        value = getattr(obj, name)
        coerced = coerce(value, tp)
        if coerced is not value:
            object.__setattr__(obj, name, coerced)  # frozen: set once, while being made


def check_value(key: str, value: Any, tp: Any, bounds: Bounds | None = None) -> None:
    if not _valid(value, tp, bounds):
        raise ConfigError(key, f"expected {describe(tp, bounds)}, got {value!r}")


def parse_value(key: str, text: str, tp: Any, bounds: Bounds | None = None) -> Any:
    """One command-line string as type `tp`, checked; ConfigError says what was expected."""
    try:
        value = _parse(text, tp)
    except ValueError:
        raise ConfigError(key, f"expected {describe(tp, bounds)}, got {text!r}") from None
    check_value(key, value, tp, bounds)
    return value


def describe(tp: Any, bounds: Bounds | None = None) -> str:
    """What a field of type `tp` accepts, in words: "an integer in [1, 16777216]"."""
    return _noun(tp, bounds, plural=False)


def coerce(value: Any, tp: Any) -> Any:
    """`value` as a field of type `tp` holds it: lists (JSON's) as tuples, integers as floats
    where a float is declared, so that one setting has one representation. Anything else is
    returned as it is, for the check to judge."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType) and value is not None:
        return coerce(value, next(a for a in args if a is not type(None)))
    if origin is tuple and isinstance(value, list | tuple):
        return tuple(coerce(v, args[0]) for v in value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def to_json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# ---- internals -------------------------------------------------------------------------


@functools.cache
def _bounds(cls: type) -> dict[str, Bounds]:
    return {f.name: f.metadata[BOUNDS] for f in dataclasses.fields(cls) if BOUNDS in f.metadata}


def _valid(value: Any, tp: Any, bounds: Bounds | None) -> bool:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return type(None) in args
        return _valid(value, next(a for a in args if a is not type(None)), bounds)
    if origin is Literal:
        return isinstance(value, str) and value in args
    if origin is tuple:
        return isinstance(value, tuple) and all(_valid(v, args[0], bounds) for v in value)
    if tp is bool:
        return isinstance(value, bool)
    if tp in (int, float):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (tp is int and not isinstance(value, int)):
            return False
        return math.isfinite(value) and (bounds is None or value in bounds)
    return isinstance(value, tp)


def _parse(text: str, tp: Any) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if text.strip().lower() in ("none", "null", "") and type(None) in args:
            return None
        return _parse(text, next(a for a in args if a is not type(None)))
    if origin is tuple:  # "82,109", or bracketed as a sweep needs it: "[82,109]"
        inner = text.replace(" ", "")
        if inner.startswith("[") and inner.endswith("]"):
            inner = inner[1:-1]
        return tuple(_parse(p, args[0]) for p in inner.split(",") if p)
    if tp is bool:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError(text)
    if tp in (int, float):
        return tp(text.strip())
    return text.strip()


def _noun(tp: Any, bounds: Bounds | None, plural: bool) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        return f"{_noun(inner, bounds, plural)} or none"
    if origin is Literal:
        return ("any of " if plural else "one of ") + ", ".join(map(str, args))
    if origin is tuple:
        return f"a comma-separated list of {_noun(args[0], bounds, plural=True)}"
    where = f" in {bounds}" if bounds is not None else ""
    names = {
        int: ("an integer", "integers"),
        float: ("a finite number", "finite numbers"),
        bool: ("true or false", "true or false"),
        str: ("a string", "strings"),
    }
    singular, many = names.get(tp, (str(tp), str(tp)))
    return (many if plural else singular) + where


def _number(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else f"{x:g}"
