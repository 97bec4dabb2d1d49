"""Which way each task metric improves: a leaf both the task configs (config.py) and the
tasks' shared code (__init__.py) read, so neither imports the other for it."""

from __future__ import annotations

# Higher is better for every metric except these (a run reaches its target at or below it).
LOWER_IS_BETTER: frozenset[str] = frozenset({"perplexity"})
