"""MLPerf-style event log: `:::MLLOG {json}` lines on stdout, the same JSON in events.jsonl.

Why not the `mlperf-logging` package: it is a process-global logger and pulls pandas and
scipy into every training image; the format itself is one JSON object per line, written here.
events.jsonl holds the bare JSON (valid JSON Lines for jq and pandas); stdout and therefore
pod logs hold the prefixed lines, so a run can be rebuilt from its logs (`parse_line`).
No torch import: the runner parses logs with this module.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any, Literal

PREFIX = ":::MLLOG "
EventType = Literal["POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"]

# MLPerf keys used here (mlcommons/logging constants), plus stackbench's timing keys.
RUN_START, RUN_STOP = "run_start", "run_stop"
INIT_START, INIT_STOP = "init_start", "init_stop"
EPOCH_START, EPOCH_STOP = "epoch_start", "epoch_stop"
EVAL_START, EVAL_STOP, EVAL_ACCURACY = "eval_start", "eval_stop", "eval_accuracy"
EVAL_LOSS = "eval_loss"  # mean test loss, next to eval_accuracy
EVAL_DETAILS = "stackbench_eval_details"  # what else an evaluation reports (BLEU's signature)
SUBMISSION_BENCHMARK, SEED = "submission_benchmark", "seed"
SUBMISSION_DIVISION = "submission_division"  # "closed" or "open"
GLOBAL_BATCH_SIZE, OPT_BASE_LR = "global_batch_size", "opt_base_learning_rate"
TRAIN_SAMPLES, EVAL_SAMPLES = "train_samples", "eval_samples"
# Hyperparameters (mlperf_logging.mllog.constants; workloads/mlperf_keys.py maps a config).
GRADIENT_ACCUMULATION_STEPS = "gradient_accumulation_steps"
MAX_SEQUENCE_LENGTH = "max_sequence_length"
OPT_NAME, OPT_WEIGHT_DECAY = "opt_name", "opt_weight_decay"
OPT_ADAM_BETA_1, OPT_ADAM_BETA_2 = "opt_adam_beta_1", "opt_adam_beta_2"
OPT_ADAM_EPSILON = "opt_adam_epsilon"
OPT_GRADIENT_CLIP_NORM = "opt_gradient_clip_norm"
OPT_LR_DECAY_SCHEDULE = "opt_learning_rate_decay_schedule"
OPT_LR_WARMUP_STEPS = "opt_learning_rate_warmup_steps"
OPT_LR_WARMUP_EPOCHS = "opt_learning_rate_warmup_epochs"
OPT_LR_DECAY_BOUNDARY_EPOCHS = "opt_learning_rate_decay_boundary_epochs"
OPT_LR_DECAY_FACTOR = "opt_learning_rate_decay_factor"
OPT_LR_DECAY_STEPS = "opt_learning_rate_decay_steps"  # GNMT's meaning: the number of decays
OPT_LR_ALT_DECAY_FUNC = "opt_learning_rate_alt_decay_func"
OPT_LR_ALT_WARMUP_FUNC = "opt_learning_rate_alt_warmup_func"
# stackbench: translation settings that MLPerf's closed division fixes but has no key for.
LABEL_SMOOTHING = "stackbench_label_smoothing"
BEAM_SIZE = "stackbench_beam_size"
LENGTH_PENALTY = "stackbench_length_penalty"  # value: alpha; metadata form: "gnmt" or "power"
BPTT = "stackbench_bptt"  # language modelling: the mean truncated-backprop window
ASGD_NONMONO = "stackbench_asgd_nonmono"  # NT-ASGD's non-monotone interval (0: never)
TRAIN_LOSS = "train_loss"
EPOCH_PHASES = "epoch_phase_times"  # stackbench: seconds per step phase over one epoch
# The phases of a training step, in order; they add up to the step time (workloads/timing.py).
STEP_PHASES = ("data", "forward", "backward", "communication", "optimizer")
# stackbench: the training loop's wall time outside every step's phases (per-step bookkeeping,
# per-epoch shuffling and reductions); the step phases plus this add up to the loop's wall time.
OTHER_PHASE = "other"
# stackbench: the manifest and the summary also travel as events, so that a run directory can
# be rebuilt from rank 0's log alone when a cluster has no results store.
MANIFEST, SUMMARY = "stackbench_manifest", "stackbench_summary"
COMPILE_TIME = "stackbench_compile_time_s"  # torch.compile, before run_start
PROGRESS = "stackbench_progress"  # within an epoch, at most every few seconds


class EventLog:
    """Writes events from rank 0 to a file and stdout; on other ranks it writes nothing."""

    # No default stream: a default of sys.stdout would be bound at import and miss a later
    # redirect; callers pass the stream they mean.
    def __init__(self, path: str | None, echo: IO[str] | None) -> None:
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        self._echo = echo

    def emit(
        self,
        key: str,
        value: Any = None,
        event_type: EventType = "POINT_IN_TIME",
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        event = {
            "namespace": "",
            "time_ms": time.time_ns() // 1_000_000,
            "event_type": event_type,
            "key": key,
            "value": value,
            "metadata": dict(metadata or {}),
        }
        line = json.dumps(event, separators=(", ", ": "))
        # One write and a flush per event: a run killed mid-way keeps every event before it.
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
        if self._echo is not None:
            self._echo.write(PREFIX + line + "\n")
            self._echo.flush()
        return event

    def start(self, key: str, value: Any = None, **metadata: Any) -> dict[str, Any]:
        return self.emit(key, value, "INTERVAL_START", metadata)

    def end(self, key: str, value: Any = None, **metadata: Any) -> dict[str, Any]:
        return self.emit(key, value, "INTERVAL_END", metadata)

    def point(self, key: str, value: Any = None, **metadata: Any) -> dict[str, Any]:
        return self.emit(key, value, "POINT_IN_TIME", metadata)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class NullEventLog(EventLog):
    """What ranks other than 0 get: the same interface, no output."""

    def __init__(self) -> None:
        super().__init__(None, echo=None)


def parse_line(line: str) -> dict[str, Any] | None:
    """The event in one log line (prefixed or bare JSON), or None if it holds no event."""
    text = line.strip()
    at = text.find(PREFIX)
    if at >= 0:
        text = text[at + len(PREFIX) :]
    elif not text.startswith("{"):
        return None
    try:
        event = json.loads(text)
    except json.JSONDecodeError:
        return None  # a line cut short by a killed process
    return event if isinstance(event, dict) and "key" in event else None


def parse_lines(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        event = parse_line(line)
        if event is not None:
            yield event


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every event of an events.jsonl; a missing file is no events."""
    try:
        with open(path, encoding="utf-8") as f:
            return list(parse_lines(f))
    except FileNotFoundError:
        return []
