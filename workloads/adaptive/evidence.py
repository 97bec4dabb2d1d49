"""The evidence a policy acts on: the median of a statistic's recent readings, never one.

A monitor's reading is noisy: two workers' gradient variance read 0.00073 between neighbours
of 0.011 and 8.8, and a policy that acted on that one reading switched to model averaging and
back 40 steps later. So a policy reads a statistic through `Evidence`:

- the statistic is the median of the last `window` readings (default 5): one outlier, however
  far out, cannot move a median of five past its neighbours; a change must hold for at least
  three readings of five to move it;
- nothing is decided before `min_readings` readings (default 5) were taken since the knob
  that the statistic governs last changed: after a change the statistic describes another
  regime (a new batch, another synchronisation mode), and the readings of the old one are
  dropped;
- hysteresis is the policy's own band: the sync policy's `low` < `high` (averaging starts
  below `low`, stops above `high`), the batch policy's `growth` factor (B_noise must reach
  growth x B, and the batch never shrinks).

Every rank feeds the same agreed snapshots, so every rank's evidence is the same. `record()`
is what a decision event carries as its evidence: the statistic, its median, the readings it
was taken from and the rule's settings. Not here: the thresholds (each policy's module).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

DEFAULT_WINDOW = 5
DEFAULT_MIN_READINGS = 5


@dataclass(frozen=True)
class EvidenceConfig:
    window: int = DEFAULT_WINDOW  # readings whose median is the statistic
    min_readings: int = DEFAULT_MIN_READINGS  # readings since the last change before acting

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if self.min_readings < 1:
            raise ValueError(f"min_readings must be at least 1, got {self.min_readings}")


class Evidence:
    """One statistic's readings since its knob last changed (see the module docstring)."""

    def __init__(self, statistic: str, config: EvidenceConfig = EvidenceConfig()) -> None:
        self.statistic = statistic
        self.config = config
        self._readings: deque[float] = deque(maxlen=config.window)
        self._count = 0  # readings since the last reset (the window keeps the latest only)
        self._since_change: int | None = None  # the knob's last change these readings follow

    def observe(self, value: float | None, last_change: int | None) -> None:
        """Adds a reading (None or not finite: none this time). `last_change`: the step at
        which the governed knob last changed; a newer one than seen drops the readings."""
        if last_change != self._since_change:
            self._since_change = last_change
            self._readings.clear()
            self._count = 0
        if value is not None and math.isfinite(value):
            self._readings.append(float(value))
            self._count += 1

    @property
    def ready(self) -> bool:
        return self._count >= self.config.min_readings and bool(self._readings)

    @property
    def value(self) -> float | None:
        """The median of the window once ready, else None: no decision without evidence."""
        return statistics.median(self._readings) if self.ready else None

    def record(self, **extra: Any) -> dict[str, Any]:
        """What a decision records of the evidence it used (JSON-ready)."""
        return {
            "statistic": self.statistic,
            "median": statistics.median(self._readings) if self._readings else None,
            "readings": list(self._readings),
            "readings_since_change": self._count,
            "window": self.config.window,
            "min_readings": self.config.min_readings,
            **extra,
        }
