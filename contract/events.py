"""The event log's vocabulary: MLPerf-style event keys and how a log line is read back.

Rank 0 of a run writes events (workloads/telemetry/mllog.py) as one JSON object per line to
events.jsonl and, prefixed with `:::MLLOG `, to its stdout, so that a run directory can be rebuilt
from a pod log; the runner reads them to follow, report and check runs. Both sides take the keys
from here. Keys are mlcommons/logging's constants where MLPerf has one, `stackbench_*` otherwise.

Reading is lenient by design: a log holds other lines, a killed writer leaves a partial last
line, a damaged file holds bytes that are not UTF-8; none of them is an event, and none of them
stops a reader.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from contract.files import DamagedFile, loads, read_lines
from contract.records import finite_number

# An events.jsonl is a few MiB for the longest reference runs; far more is not ours. The cap
# of read_events, which holds the whole file; stream_events holds one line at a time and reads
# any size, skipping a line over MAX_EVENT_LINE_BYTES (an event is a few hundred bytes).
MAX_EVENTS_BYTES = 256 << 20
MAX_EVENT_LINE_BYTES = 1 << 20
_READ_CHUNK_BYTES = 1 << 20

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
# Hyperparameters (mlperf_logging.mllog.constants; workloads/telemetry/mlperf_keys.py maps a
# config).
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
# The phases of a training step, in order; they add up to the step time
# (workloads/telemetry/timing.py).
STEP_PHASES = ("data", "forward", "backward", "communication", "optimizer")
# stackbench: the training loop's wall time outside every step's phases (per-step bookkeeping,
# per-epoch shuffling and reductions); the step phases plus this add up to the loop's wall time.
OTHER_PHASE = "other"
# stackbench: the manifest and the summary also travel as events, so that a run directory can
# be rebuilt from rank 0's log alone when a cluster has no results store.
MANIFEST, SUMMARY = "stackbench_manifest", "stackbench_summary"
COMPILE_TIME = "stackbench_compile_time_s"  # torch.compile, before run_start
ALLREDUCE_RESULT = "allreduce_result"  # allreduce-micro: one measurement (size x dtype)
PROGRESS = "stackbench_progress"  # within an epoch, at most every few seconds
# stackbench: the moment the target is first met, valued with the time to target the summary
# will hold (the same float), so that a live page or a cancelled run shows the same figure.
TIME_TO_TARGET = "stackbench_time_to_target_s"
# stackbench: adaptive training (workloads/adaptive/run.py). MONITORS: one per monitoring
# step, the monitors every rank agreed on (step, world_size, b_noise, grad_variance,
# step_time_s per worker, divergence, ...) and the global batch, LR and knobs of that step.
# DECISION: one per agreed change of a knob (step, time_s, policy, knob, old, new, reason).
MONITORS = "stackbench_monitors"
DECISION = "stackbench_decision"


def parse_object(line: str) -> dict[str, Any] | None:
    """The JSON object with a string `key` in one log line (prefixed or bare), or None: what a
    line claims to be an event, before it is checked to be one (compliance reports those that
    are not)."""
    text = line.strip()
    at = text.find(PREFIX)
    if at >= 0:
        text = text[at + len(PREFIX) :]
    elif not text.startswith("{"):
        return None
    try:
        event = loads(text)
    except ValueError:
        return None  # a line cut short by a killed process, or garbage
    if not isinstance(event, dict) or not isinstance(event.get("key"), str):
        return None
    return event


def parse_line(line: str) -> dict[str, Any] | None:
    """The event in one log line (prefixed or bare JSON), or None if it holds no event: an
    event has a string key and a finite numeric time."""
    event = parse_object(line)
    if event is None:
        return None
    # A finite time a float can hold: readers subtract and divide it, and an integer of
    # hundreds of digits (valid JSON) would raise OverflowError there.
    if finite_number(event.get("time_ms")) is None:
        return None
    return event


def metadata(event: dict[str, Any]) -> dict[str, Any]:
    """An event's metadata, {} when it has none or something else in its place."""
    value = event.get("metadata")
    return value if isinstance(value, dict) else {}


def parse_lines(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        event = parse_line(line)
        if event is not None:
            yield event


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete event of an events.jsonl; a missing or unreadable file is no events."""
    try:
        return list(parse_lines(read_lines(Path(path), MAX_EVENTS_BYTES)))
    except DamagedFile:
        return []


def stream_events(
    path: str | os.PathLike[str],
    dir_fd: int | None = None,
    max_line_bytes: int = MAX_EVENT_LINE_BYTES,
) -> Iterator[dict[str, Any]]:
    """Every complete event of an events.jsonl (read_events' rule), read a line at a time, so
    that memory stays at one line whatever the file's size: for reports and checks of any
    run (stream_lines says what is read and what is passed over)."""
    return parse_lines(stream_lines(path, dir_fd, max_line_bytes))


def stream_lines(
    path: str | os.PathLike[str],
    dir_fd: int | None = None,
    max_line_bytes: int = MAX_EVENT_LINE_BYTES,
) -> Iterator[str]:
    """The complete lines of a text file, decoded leniently, one at a time. A line over
    `max_line_bytes` is skipped, never held (no event of ours is that long); a last line
    without its newline (a writer killed mid-line) is left out. A missing file, a link,
    anything but a regular file, or a read that fails is no more lines, never an error.
    `dir_fd`: the folder `path` is in, held open (the name is opened in it)."""
    try:
        fd = os.open(
            Path(path).name if dir_fd is not None else path,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
            dir_fd=dir_fd,
        )
    except OSError:  # missing, a link (ELOOP), unreadable
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO (opened without waiting), a folder
        os.close(fd)
        return
    with open(fd, "rb", buffering=_READ_CHUNK_BYTES) as f:
        try:
            yield from _lines(f, max_line_bytes)
        except OSError:  # a failing disk: what was read stands, like a line cut short
            return


def _lines(f: Any, max_line_bytes: int) -> Iterator[str]:
    while line := f.readline(max_line_bytes + 1):
        if not line.endswith(b"\n"):
            if len(line) <= max_line_bytes:
                return  # the last line, without its newline
            while (rest := f.readline(_READ_CHUNK_BYTES)) and not rest.endswith(b"\n"):
                pass  # an overlong line, passed over a chunk at a time
            continue
        yield line.decode("utf-8", errors="replace")
