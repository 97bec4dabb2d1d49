"""How counts read in what the runner prints: `1 worker`, `4 workers` (never `1 workers`)."""

from __future__ import annotations


def count(n: int, noun: str) -> str:
    """`n` and `noun`, plural unless n is 1 (`noun` is a regular English noun)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
