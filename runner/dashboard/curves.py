"""What the dashboard plots for one run, computed from its events (workloads/telemetry/mllog.py).

`Curves` is fed events in order, in as many pieces as they arrive, and answers each feed with
the points it adds, so a live run's page extends the series it already shows; a fresh
`Curves` fed everything gives the whole picture. Every x is seconds since run_start, as in the
report's curves figure (runner.results.runs.curves). Series:

    train_loss      the epoch's mean training loss over ranks
    eval_accuracy   the quality metric of each evaluation (MLPerf logs every benchmark's metric
                    under this key; the run's target names it)
    eval_loss       the evaluation's mean loss
    throughput      samples/s per epoch: the training set's size over the epoch's wall time
                    (epoch_start to epoch_stop); the summary's figure is the run's exact one
    phases          per epoch, seconds spent in each step phase (the mean over ranks)
    headline        the live headline figures (runner.dashboard.headline), when they changed
    decisions       an adaptive run's decisions and membership changes: {t, step, knob, old,
                    new, reason, policy}, drawn as markers with their reason
    clock           anchors [t, epoch, step] (at each epoch's start and end and each progress
                    event; epochs fractional, steps counted over the run) through which a page
                    draws any series against epochs or steps instead of seconds
    progress        where the run is: the epoch under way and, once a progress event of that
                    epoch came (every few seconds), its step and steps
    global_batch    an adaptive run's global batch: at each monitoring step and when a
                    decision changes it
    b_noise         its smoothed gradient noise scale, at each monitoring step
    workers         its worker count: at each monitoring step and when workers leave or join

Events are read from files that may be damaged: anything of the wrong type or not finite (a
diverged loss is NaN) is left out, never raised. Not here: reading files (runner.dashboard.data).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contract import events as keys
from contract.events import DECISION, MONITORS
from contract.records import finite_number
from runner.dashboard.headline import Headline

POINT_SERIES = (keys.TRAIN_LOSS, keys.EVAL_ACCURACY, keys.EVAL_LOSS)
GLOBAL_BATCH, B_NOISE, WORKERS = "global_batch", "b_noise", "workers"
ADAPTIVE_SERIES = (GLOBAL_BATCH, B_NOISE, WORKERS)
# Where each comes from: a monitor event's field, a decision's knob.
MONITORED = {"global_batch": GLOBAL_BATCH, "b_noise": B_NOISE, "world_size": WORKERS}
DECIDED = {"global_batch": GLOBAL_BATCH, "workers": WORKERS}
THROUGHPUT = "throughput"
PHASES = "phases"
PROGRESS = "progress"
HEADLINE = "headline"
CLOCK = "clock"
DECISIONS = "decisions"


def _number(value: Any) -> float | None:
    return finite_number(value)  # None also for an integer too large for a float


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _epoch(event: Mapping[str, Any]) -> int | None:
    metadata = event.get("metadata")
    epoch = metadata.get("epoch_num") if isinstance(metadata, dict) else None
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def empty() -> dict[str, Any]:
    series = (*POINT_SERIES, *ADAPTIVE_SERIES)
    return {**{k: [] for k in series}, THROUGHPUT: [], PHASES: [], DECISIONS: [], CLOCK: [],
            PROGRESS: None, HEADLINE: None}  # fmt: skip


class Curves:
    """The series of one run, built incrementally (see the module docstring)."""

    def __init__(self) -> None:
        self._start_ms: float | None = None
        self._train_samples: float | None = None
        self._epoch_start_ms: dict[int, float] = {}
        self._headline = Headline()
        self._stepped: dict[str, float] = {}  # global_batch, workers: the last value drawn
        self._steps_done = 0  # optimizer steps of the epochs finished

    def feed(self, events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """The points these events add (empty lists when none)."""
        out = empty()
        for event in events:
            time_ms = _number(event.get("time_ms"))
            key = event.get("key")
            if time_ms is None or not isinstance(key, str):
                continue
            if self._headline.feed(event):
                out[HEADLINE] = self._headline.figures()
            if key == keys.RUN_START and self._start_ms is None:
                self._start_ms = time_ms
            elif key == keys.TRAIN_SAMPLES:
                self._train_samples = _number(event.get("value"))
            elif key == keys.EPOCH_START and _epoch(event) is not None:
                epoch = _epoch(event)
                self._epoch_start_ms[epoch] = time_ms  # type: ignore[index]
                if self._start_ms is not None:  # progress events come every few seconds only
                    t_s = (time_ms - self._start_ms) / 1000
                    out[PROGRESS] = {"epoch": epoch, "step": None, "steps": None, "t": t_s}
                    out[CLOCK].append([t_s, epoch - 1, self._steps_done])  # type: ignore[operator]
            elif self._start_ms is not None:
                self._point(out, key, event, time_ms)
        return out

    def _point(
        self, out: dict[str, Any], key: str, event: Mapping[str, Any], time_ms: float
    ) -> None:
        t_s = (time_ms - self._start_ms) / 1000  # type: ignore[operator]
        value = event.get("value")
        if key in POINT_SERIES:
            number = _number(value)
            if number is not None:
                out[key].append([t_s, number])
        elif key == keys.EPOCH_STOP:
            epoch = _epoch(event)
            started_ms = self._epoch_start_ms.get(epoch) if epoch is not None else None
            wall_s = (time_ms - started_ms) / 1000 if started_ms is not None else 0.0
            if wall_s > 0 and self._train_samples:
                out[THROUGHPUT].append([t_s, self._train_samples / wall_s])
            steps = self._headline.steps_of(epoch) if epoch is not None else None
            if epoch is not None and steps:
                self._steps_done += steps
                out[CLOCK].append([t_s, epoch, self._steps_done])
        elif key == keys.EPOCH_PHASES and isinstance(value, dict):
            phases = {p: _number(value.get(p)) for p in keys.STEP_PHASES}
            if all(v is not None for v in phases.values()):
                out[PHASES].append({"epoch": _epoch(event), "t": t_s, **phases})
        elif key == keys.PROGRESS and isinstance(value, dict):
            self._progress(out, t_s, value)
        elif key == MONITORS and isinstance(value, dict):
            for name, series in MONITORED.items():
                number = _number(value.get(name))
                if number is not None:
                    self._add(out, series, t_s, number, number)
        elif key == DECISION and isinstance(value, dict):
            self._decision(out, t_s, value)
        elif key == keys.RUN_STOP:
            # A knob's series ends at the run's end, at its last value (a step series would
            # end at its last change and read as if the run had stopped there).
            for series, last in self._stepped.items():
                out[series].append([t_s, last])

    def _progress(self, out: dict[str, Any], t_s: float, value: Mapping[str, Any]) -> None:
        epoch, step, steps = (_int(value.get(k)) for k in ("epoch", "step", "steps"))
        if epoch is None or step is None or steps is None:
            return
        out[PROGRESS] = {"epoch": epoch, "step": step, "steps": steps, "t": t_s}
        if steps > 0 and 0 <= step <= steps:
            out[CLOCK].append([t_s, epoch - 1 + step / steps, self._steps_done + step])

    def _add(self, out: dict[str, Any], series: str, t_s: float, value: float, start: float
             ) -> None:  # fmt: skip
        """A point of a stepped series; its first starts at the run's start, at `start` (what
        the knob was before its first change: a series built from changes alone started at
        the first change, and an elastic run that began with 3 workers read as begun with 2)."""
        if series in (GLOBAL_BATCH, WORKERS):
            if series not in self._stepped:
                out[series].append([0.0, start])
            self._stepped[series] = value
        out[series].append([t_s, value])

    def _decision(self, out: dict[str, Any], t_s: float, value: Mapping[str, Any]) -> None:
        knob = value.get("knob")
        new, old = _number(value.get("new")), _number(value.get("old"))
        decided = DECIDED.get(knob) if isinstance(knob, str) else None
        if decided is not None and new is not None:
            self._add(out, decided, t_s, new, old if old is not None else new)
        text = {k: value.get(k) for k in ("knob", "policy", "reason")}
        changed = {k: value.get(k) for k in ("old", "new", "step")}
        out[DECISIONS].append({
            "t": t_s,
            **{k: v if isinstance(v, str) else None for k, v in text.items()},
            **{k: v if isinstance(v, str) or _number(v) is not None else None
               for k, v in changed.items()},
        })  # fmt: skip


def series(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every series of a whole event log."""
    return Curves().feed(events)


def latest(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The newest quality value and the epoch under way, from any stretch of a run's events
    (the runs table's figure for a run that has no summary yet)."""
    out: dict[str, Any] = {}
    for event in events:
        if event.get("key") == keys.EVAL_ACCURACY and _number(event.get("value")) is not None:
            out["value"] = _number(event["value"])
        elif event.get("key") == keys.EPOCH_START and _epoch(event) is not None:
            out["epoch"] = _epoch(event)
        elif event.get("key") == keys.TIME_TO_TARGET and _number(event.get("value")) is not None:
            out["target_met_s"] = _number(event["value"])  # a result only if the run succeeds
    return out
