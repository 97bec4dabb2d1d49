"""Reading a JSON record field by field: the type of every field checked, a wrong one reported
as a DamagedFile naming the file and the field. What contract/summary.py and
contract/manifest.py build their records with; nothing else of the records is here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contract.files import DamagedFile


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite JSON number, else None (text, true/false, NaN,
    infinity, and an integer too large for a float: JSON allows 400 digits, and
    math.isfinite raises OverflowError on them rather than saying no)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


class Fields:
    """The fields of one JSON object (or of one object inside it, `prefix` naming where)."""

    def __init__(self, data: Any, path: Path, prefix: str = "") -> None:
        if not isinstance(data, Mapping):
            where = f"field {prefix.rstrip('.')!r}" if prefix else "the record"
            raise DamagedFile(path, f"{where} is not a JSON object")
        self.data, self.path, self.prefix = data, path, prefix

    def bad(self, key: str, wanted: str) -> DamagedFile:
        """The error for a field that is not what was `wanted`, naming it and its value."""
        value = self.data.get(key)
        shown = repr(value) if len(repr(value)) < 60 else f"{type(value).__name__}"
        return DamagedFile(self.path, f"field {self.prefix + key!r} is not {wanted} ({shown})")

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str):
            raise self.bad(key, "text")
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def integer(self, key: str) -> int:
        value = self.data.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.bad(key, "an integer")
        return value

    def optional_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def number(self, key: str) -> float:
        number = finite_number(self.data.get(key))
        if number is None:
            raise self.bad(key, "a finite number")
        return number

    def optional_number(self, key: str) -> float | None:
        return None if self.data.get(key) is None else self.number(key)

    def amount(self, key: str) -> float:
        """A finite number of at least 0: a time, a rate, a share. A negative one (a damaged
        or hostile file) would pass for the fastest run and pull every mean."""
        number = finite_number(self.data.get(key))
        if number is None or number < 0:
            raise self.bad(key, "a finite number of at least 0")
        return number

    def optional_amount(self, key: str) -> float | None:
        return None if self.data.get(key) is None else self.amount(key)

    def scalar(self, key: str) -> float | str:
        """A finite number or a text."""
        return self.text(key) if isinstance(self.data.get(key), str) else self.number(key)

    def boolean(self, key: str) -> bool:
        value = self.data.get(key)
        if not isinstance(value, bool):
            raise self.bad(key, "true or false")
        return value

    def numbers(self, key: str) -> tuple[float, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self.bad(key, "a list of numbers")
        return tuple(
            Fields({"x": v}, self.path, f"{self.prefix}{key}[]").number("x") for v in value
        )

    def number_map(self, key: str) -> dict[str, float]:
        inner = self.object(key)
        return {k: inner.number(k) for k in inner.data}

    def amount_map(self, key: str) -> dict[str, float]:
        inner = self.object(key)
        return {k: inner.amount(k) for k in inner.data}

    def object(self, key: str) -> Fields:
        return Fields(self.data.get(key), self.path, f"{self.prefix}{key}.")

    def optional_object(self, key: str) -> Fields | None:
        return None if self.data.get(key) is None else self.object(key)

    def objects(self, key: str) -> list[Fields]:
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self.bad(key, "a list of objects")
        return [Fields(v, self.path, f"{self.prefix}{key}[].") for v in value]
