"""Step timing that splits compute from communication honestly (docs/design.md, "Timing").

A step is a sequence of laps: data, forward, backward, communication, optimizer. Each lap ends
at a clock stamp and lasts from the previous stamp, so the phases add up to the step time by
construction. On CUDA, stamps are events on the current stream and are read only after a
synchronize at the end of the step; on CPU they are perf_counter readings. Strategies that
overlap communication with backward (DDP) end the backward lap at a stamp taken inside their
communication hook (see workloads/strategies/ddp.py), and the rest of backward() is exposed
communication; what their hooks do on the thread running backward (compressing a bucket,
issuing its collective) is moved out of the backward lap into communication (`move`), so the
phases still add up to the step time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from contract.events import OTHER_PHASE
from contract.events import STEP_PHASES as PHASES

# What the training loop's wall time splits into: the step phases, then the rest (OTHER_PHASE).
LOOP_PHASES = (*PHASES, OTHER_PHASE)


class Clock(Protocol):
    def stamp(self) -> Any: ...
    def elapsed_s(self, start: Any, end: Any) -> float: ...
    def sync(self) -> None: ...


class CpuClock:
    def stamp(self) -> float:
        return time.perf_counter()

    def elapsed_s(self, start: float, end: float) -> float:
        return end - start

    def sync(self) -> None:
        return None


class CudaClock:
    def stamp(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_s(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end) / 1000.0

    def sync(self) -> None:
        torch.cuda.synchronize()


def clock_for(device: torch.device) -> Clock:
    return CudaClock() if device.type == "cuda" else CpuClock()


@dataclass(slots=True)
class _Lap:
    """One lap of a step, its seconds shortened when a move takes part of them elsewhere."""

    phase: str
    start_s: float  # offset from the step's start
    seconds: float


class StepTimer:
    """Laps of one step at a time; `finish` returns {phase: seconds} for the step."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._start: Any = None
        self._laps: list[tuple[str, Any]] = []
        self._moves: list[tuple[str, Any, Any]] = []

    def start(self) -> None:
        self._start = self.clock.stamp()
        self._laps = []
        self._moves = []

    def lap(self, phase: str) -> None:
        self._laps.append((phase, self.clock.stamp()))

    def lap_at(self, phase: str, stamp: Any) -> None:
        """End `phase` at a stamp taken earlier (for example inside a communication hook)."""
        self._laps.append((phase, stamp))

    def move(self, phase: str, start: Any, end: Any) -> None:
        """Book the interval between two stamps of this step as `phase`, taking it out of the
        lap it started in: work a communication hook did on the thread running backward."""
        self._moves.append((phase, start, end))

    def finish(self) -> dict[str, float]:
        self.clock.sync()
        times = dict.fromkeys(PHASES, 0.0)
        if not self._moves:  # the common case, kept cheap: this runs once a step
            previous = self._start
            for phase, stamp in self._laps:
                times[phase] += max(0.0, self.clock.elapsed_s(previous, stamp))
                previous = stamp
            return times
        laps: list[_Lap] = []
        previous, offset_s = self._start, 0.0
        for phase, stamp in self._laps:
            seconds = max(0.0, self.clock.elapsed_s(previous, stamp))
            laps.append(_Lap(phase, offset_s, seconds))
            offset_s += seconds
            previous = stamp
        for phase, start, end in self._moves:
            at_s = self.clock.elapsed_s(self._start, start)
            lap = next((x for x in reversed(laps) if x.start_s <= at_s), None)
            if lap is None or lap.phase == phase:
                continue
            moved_s = min(lap.seconds, max(0.0, self.clock.elapsed_s(start, end)))
            lap.seconds -= moved_s
            times[phase] += moved_s
        for lap in laps:
            times[lap.phase] += lap.seconds
        return times


def add_phases(total: dict[str, float], step: dict[str, float]) -> None:
    for phase, seconds in step.items():
        total[phase] = total.get(phase, 0.0) + seconds


def zero_phases() -> dict[str, float]:
    return dict.fromkeys(PHASES, 0.0)


def shares(phases: dict[str, float]) -> dict[str, float]:
    """Each phase's fraction of their sum (0 when nothing was timed)."""
    total = sum(phases.values())
    return {k: (v / total if total > 0 else 0.0) for k, v in phases.items()}


def sum_phases(steps: Iterable[dict[str, float]]) -> dict[str, float]:
    total = zero_phases()
    for step in steps:
        add_phases(total, step)
    return total
