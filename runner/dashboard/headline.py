"""A run's headline figures while it runs, from its events as they arrive.

The figures a run page's tiles show before summary.json exists (and for a run that never
writes one: cancelled, or killed): time to target the moment the target is met, throughput and
step time over the last finished epoch, and communication's share of the epochs so far.

- time to target: the value of the `stackbench_time_to_target_s` event, which the workload
  logs with the very float its summary holds, so the live figure and the summary's are equal;
- throughput: the training set over the last epoch's wall time (epoch_start to epoch_stop);
- step time: that wall time over the epoch's steps (its last progress event's count, else the
  training set over the global batch);
- communication share: the epochs' exposed communication over their wall time.

The last three describe the latest epoch, where the summary's describe the whole run (its
first, warm-up step left out); the page says which it shows. Events may be damaged: anything
of the wrong type or not finite is left out. Not here: reading files, the summary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from contract import events as keys
from contract.records import finite_number


def _epoch(event: Mapping[str, Any]) -> int | None:
    metadata = event.get("metadata")
    epoch = metadata.get("epoch_num") if isinstance(metadata, dict) else None
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class Headline:
    """Fed events in order, in pieces; `figures()` is the latest headline (JSON-ready)."""

    def __init__(self) -> None:
        self.time_to_target_s: float | None = None
        self._train_samples: float | None = None
        self._global_batch: float | None = None
        self._epoch_start_ms: dict[int, float] = {}
        self._epoch_steps: dict[int, int] = {}
        self._last: dict[str, Any] = {}  # the last finished epoch's figures
        self._epoch_comm_s: float | None = None  # the epoch under way's, once logged
        self._comm_s = 0.0
        self._wall_s = 0.0

    def feed(self, event: Mapping[str, Any]) -> bool:
        """Takes one event; True when the headline changed."""
        key, value = event.get("key"), event.get("value")
        time_ms = finite_number(event.get("time_ms"))
        epoch = _epoch(event)
        if key == keys.TIME_TO_TARGET and self.time_to_target_s is None:
            self.time_to_target_s = finite_number(value)
            return self.time_to_target_s is not None
        if key == keys.TRAIN_SAMPLES:
            self._train_samples = finite_number(value)
        elif key == keys.GLOBAL_BATCH_SIZE:
            self._global_batch = finite_number(value)
        elif (
            key == keys.DECISION and isinstance(value, dict) and value.get("knob") == "global_batch"
        ):
            self._global_batch = finite_number(value.get("new")) or self._global_batch
        elif key == keys.PROGRESS and isinstance(value, dict) and _count(value.get("steps")):
            if isinstance(value.get("epoch"), int):
                self._epoch_steps[value["epoch"]] = value["steps"]
        elif key == keys.EPOCH_START and epoch is not None and time_ms is not None:
            self._epoch_start_ms[epoch] = time_ms
        elif key == keys.EPOCH_PHASES and isinstance(value, dict):
            self._epoch_comm_s = finite_number(value.get("communication"))
        elif key == keys.EPOCH_STOP and epoch is not None and time_ms is not None:
            return self._epoch_done(epoch, time_ms)
        return False

    def _epoch_done(self, epoch: int, time_ms: float) -> bool:
        started = self._epoch_start_ms.get(epoch)
        wall_s = (time_ms - started) / 1000 if started is not None else 0.0
        if wall_s <= 0:
            return False
        comm_s, self._epoch_comm_s = self._epoch_comm_s, None
        if comm_s is not None and comm_s >= 0:
            self._comm_s += comm_s
            self._wall_s += wall_s
        steps = self.steps_of(epoch)
        samples = self._train_samples
        self._last = {
            "epoch": epoch,
            "throughput_samples_per_s": samples / wall_s if samples else None,
            "step_time_ms": 1000 * wall_s / steps if steps else None,
        }
        return True

    def steps_of(self, epoch: int) -> int | None:
        """An epoch's steps: its progress events' count, else the training set over the
        global batch; None when neither is known."""
        return self._epoch_steps.get(epoch) or self._steps_from_batch()

    def _steps_from_batch(self) -> int | None:
        if not self._train_samples or not self._global_batch:
            return None
        return max(1, math.ceil(self._train_samples / self._global_batch))

    def figures(self) -> dict[str, Any]:
        share = min(1.0, self._comm_s / self._wall_s) if self._wall_s > 0 else None
        return {
            "time_to_target_s": self.time_to_target_s,
            "epoch": self._last.get("epoch"),
            "throughput_samples_per_s": self._last.get("throughput_samples_per_s"),
            "step_time_ms": self._last.get("step_time_ms"),
            "communication_share": share,
        }
