"""Run directories read back as flat result records, for reports, studies, cost and teardown.

What a report needs from one run (job.json, state.json, summary.json, manifest.json and the
loss/accuracy curves in events.jsonl, with an adaptive run's batch, noise scale and workers),
and which runs may stand side by side: two runs are comparable when their closed-division
configurations agree (the config minus the tunables and run controls; the strategy too when
both use an exact one). Not here: statistics (runner.results.aggregate), cells and output
(runner.results.report, runner.results.export), anything that talks to a backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

from contract.events import (
    DECISION,
    EVAL_ACCURACY,
    MONITORS,
    RUN_START,
    TRAIN_LOSS,
    stream_events,
)
from contract.files import DamagedFile
from contract.manifest import Manifest, parse_manifest
from contract.records import finite_number
from contract.rundir import MANIFEST, STATE, SUMMARY, JobState, JobStatus
from contract.summary import Summary, TrainSummary, parse_summary
from runner.job.benchmarks import RUN_CONTROLS
from runner.job.spec import ADAPTIVE_KEYS, ELASTIC_KEY, get_benchmark
from runner.results import rundir
from runner.results.keys import config_keys
from workloads.strategies.config import EXACT_STRATEGIES

_T = TypeVar("_T")


@dataclass(frozen=True)
class RunResult:
    run_id: str
    run_dir: Path
    benchmark: str
    backend: str
    stack: str | None  # the Pulumi stack of a cluster run
    world_size: int
    num_nodes: int
    device: str
    link: str | None  # the link each worker had (--link); None: the machine's own
    division: str
    open_keys: tuple[str, ...]
    overrides: Mapping[str, str]
    config: Mapping[str, Any]  # the flat view: the keys `--set` takes
    state: str  # the last recorded JobState value ("UNKNOWN" without state.json)
    state_since: str | None
    created_at: str
    summary: Summary | None
    manifest: Manifest | None
    curves: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    min_workers: int | None = None  # an elastic run's MIN (--workers MIN:MAX)
    # Intra-op threads each worker trained with (the manifest's, else what job.json gave):
    # speedups compare runs with equal threads per worker only (runner/job/threads.py).
    threads_per_worker: int | None = None

    @property
    def strategy(self) -> str:
        return str(self.config.get("strategy", "-"))

    @property
    def train_summary(self) -> TrainSummary | None:
        return self.summary if isinstance(self.summary, TrainSummary) else None

    @property
    def converged(self) -> bool:
        """Reached its target in a run that succeeded: a run that failed after rank 0 wrote its
        summary (another rank crashed, the supervisor was killed) is no valid result, whatever
        its summary says, and counts as a miss."""
        return bool(
            self.state == JobState.SUCCEEDED.value
            and self.train_summary
            and self.train_summary.target_reached
        )

    @property
    def time_to_target_s(self) -> float | None:
        summary = self.train_summary
        return summary.time_to_target_s if summary and self.converged else None

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def keys(self) -> dict[str, str]:
        """Its configuration keys as text, as the dashboard's table reads them (keys.py)."""
        workers = str(self.world_size)
        if self.min_workers is not None:
            workers = f"{self.min_workers}:{workers}"
        return config_keys(self.config, workers, self.link, self.division, self.manifest)


def load_run(run_dir: Path) -> RunResult:
    """The run as a report reads it; DamagedFile (naming the file) when a record is unusable
    or the run directory is a symbolic link. Every file is read through the run directory
    opened once without following a link (rundir.open_run): one swapped for a link to a
    folder outside the results directory after a caller found it is refused, never read."""
    with rundir.open_run(run_dir) as folder:
        record = rundir.record_in(folder)
        state_data = rundir.json_in(folder, STATE)
        summary_data = rundir.json_in(folder, SUMMARY)
        manifest_data = rundir.json_in(folder, MANIFEST)
        # Streamed from the folder opened once (never a link): memory stays flat however long
        # the run's events.jsonl (contract.events.stream_events).
        curves = curves_of(stream_events(folder.path / rundir.EVENTS, folder.fd))
    spec = record.spec
    state = None if state_data is None else _state(state_data, run_dir / STATE)
    parsed_manifest = _parsed(manifest_data, parse_manifest, run_dir / MANIFEST)
    return RunResult(
        run_id=spec.run_id,
        run_dir=run_dir,
        benchmark=spec.benchmark,
        backend=record.backend,
        stack=(record.cluster or {}).get("stack"),
        world_size=spec.placement.world_size,
        num_nodes=spec.placement.num_nodes,
        device=spec.placement.device,
        link=spec.placement.link,
        division=spec.division,
        open_keys=spec.open_keys,
        overrides=dict(spec.overrides),
        # The flat view (the keys --set takes), tuples as lists as the JSON has them.
        config={k: list(v) if isinstance(v, tuple) else v for k, v in spec.config.flat().items()},
        state=state.state.value if state else "UNKNOWN",
        state_since=state.since if state else None,
        created_at=spec.created_at,
        summary=_parsed(summary_data, parse_summary, run_dir / SUMMARY),
        manifest=parsed_manifest,
        curves=curves,
        min_workers=spec.placement.min_workers,
        threads_per_worker=_threads(parsed_manifest, spec.placement.threads_per_worker),
    )


def _threads(manifest: Manifest | None, given: int | None) -> int | None:
    return manifest.torch_threads if manifest is not None else given


def _parsed(data: Any, parse: Callable[[Any, Path], _T], path: Path) -> _T | None:
    """A record parsed field by field (DamagedFile naming `path`); None when there is none."""
    return None if data is None else parse(data, path)


def _state(data: Any, path: Path) -> JobStatus:
    """state.json's record (contract.rundir.read_state's rule), DamagedFile when unusable."""
    if not isinstance(data, dict):
        raise DamagedFile(path, f"holds a JSON {type(data).__name__}, not an object")
    return JobStatus.from_dict(data, path)


# What an adaptive run adds to its curves (from its stackbench_monitors and _decision events).
B_NOISE, GLOBAL_BATCH, WORKERS, LR = "b_noise", "global_batch", "workers", "lr"
ADAPTIVE_CURVES = (GLOBAL_BATCH, B_NOISE, WORKERS, LR)
# A decision's knob -> the curve it moves at the moment it is taken.
DECIDED = {"global_batch": GLOBAL_BATCH, "workers": WORKERS}
MONITORED = {"b_noise": B_NOISE, "global_batch": GLOBAL_BATCH, "world_size": WORKERS, "lr": LR}


def curves(events_path: Path) -> dict[str, tuple[tuple[float, float], ...]]:
    """The curves (curves_of) of the events file at `events_path`, streamed."""
    return curves_of(stream_events(events_path))


def curves_of(events: Iterable[Mapping[str, Any]]) -> dict[str, tuple[tuple[float, float], ...]]:
    """train_loss and eval_accuracy as (seconds since run_start, value) points, and for an
    adaptive run the global batch, B_noise, worker count and LR over time (none of those
    for a run without them). Values that are not finite numbers are left out. One pass over
    `events` (a stream of any length), each curve thinned to MAX_CURVE_POINTS (_Thinned)."""
    start = None
    out = {TRAIN_LOSS: _Thinned(), EVAL_ACCURACY: _Thinned()}
    adaptive = {k: _Thinned() for k in ADAPTIVE_CURVES}
    for e in events:
        t_ms, value = e["time_ms"], e.get("value")
        if e["key"] == RUN_START and start is None:
            start = t_ms
        elif e["key"] in out and _finite(value):
            out[e["key"]].add(t_ms, float(value))
        elif e["key"] == MONITORS and isinstance(value, dict):
            for field_name, curve in MONITORED.items():
                if _finite(value.get(field_name)):
                    adaptive[curve].add(t_ms, float(value[field_name]))
        elif e["key"] == DECISION and _decided(value):
            adaptive[DECIDED[value["knob"]]].add(t_ms, float(value["new"]))
    if start is None:
        return {}
    out |= {k: v for k, v in adaptive.items() if v.seen}
    return {k: v.points_since(start) for k, v in out.items()}


# A figure is a few hundred points wide: a curve of more points draws the same line. Runs log
# a loss every few steps, so only runs of a million steps (or a hostile file) reach this.
MAX_CURVE_POINTS = 10_000


class _Thinned:
    """A curve's points as they stream in, at most MAX_CURVE_POINTS of them evenly spaced by
    count: every `stride`th point is kept, and when the kept ones reach the cap every other is
    dropped and the stride doubles. The last point is always kept (where the curve ends)."""

    def __init__(self) -> None:
        self._points: list[tuple[float, float]] = []
        self._stride = 1
        self.seen = 0
        self._last: tuple[float, float] | None = None

    def add(self, t_ms: float, value: float) -> None:
        if self.seen % self._stride == 0:
            self._points.append((t_ms, value))
            if len(self._points) >= MAX_CURVE_POINTS:
                del self._points[1::2]
                self._stride *= 2
        self.seen += 1
        self._last = (t_ms, value)

    def points_since(self, start_ms: float) -> tuple[tuple[float, float], ...]:
        """(seconds since start_ms, value) of the kept points."""
        kept = self._points
        if self._last is not None and (self.seen - 1) % self._stride:
            kept = [*kept, self._last]
        return tuple(((t_ms - start_ms) / 1000, value) for t_ms, value in kept)


def _decided(value: Any) -> TypeGuard[dict[str, Any]]:
    """A decision record that moves a curve to a number."""
    return isinstance(value, dict) and value.get("knob") in DECIDED and _finite(value.get("new"))


def _finite(value: Any) -> TypeGuard[int | float]:
    return finite_number(value) is not None  # an integer too large for a float is not


# A strategy that a policy switches, and the fixed strategy it is when nothing switches it:
# adaptive-sync's exact mode is the allreduce strategy (workloads/adaptive/sync.py), and
# adaptive-sync needs policy=sync, so its fixed arm can only be allreduce.
SWITCHED_STRATEGIES = {"adaptive-sync": "allreduce"}


def adaptation_keys(run: RunResult) -> frozenset[str]:
    """The open keys (runner.job.spec's open_keys) that say only how a run adapts: the
    policies and their settings, an elastic range, and a strategy a policy switches. An
    adaptive arm and its fixed one differ in these alone, and stand side by side."""
    switched = {"strategy"} if run.config.get("strategy") in SWITCHED_STRATEGIES else set()
    return ADAPTIVE_KEYS | {ELASTIC_KEY} | switched


def comparison_key(run: RunResult) -> str:
    """What must agree for runs to stand side by side: benchmark, division, and the config
    without tunables and run controls (and without the strategy when it is an exact one, as
    runner.job.spec does for the division). How a run adapts (adaptation_keys) is left out,
    and so is the open division it alone implies: an adaptive arm is compared with its fixed
    one without --allow-mixed, and any other difference still needs it."""
    bench = get_benchmark(run.benchmark)
    ignored = set(bench.tunables) | set(RUN_CONTROLS) | ADAPTIVE_KEYS
    config = dict(run.config)
    strategy = config.get("strategy")
    config["strategy"] = SWITCHED_STRATEGIES.get(str(strategy), strategy)
    if config["strategy"] in EXACT_STRATEGIES:
        ignored.add("strategy")
    fixed = {k: v for k, v in config.items() if k not in ignored}
    adapting_only = set(run.open_keys) <= adaptation_keys(run)
    division = "closed" if run.division == "open" and adapting_only else run.division
    return json.dumps(
        {"benchmark": run.benchmark, "division": division, "config": fixed}, sort_keys=True
    )


def config_conflicts(runs: Sequence[RunResult]) -> list[str]:
    """Human-readable differences between the closed-division configurations of the runs;
    empty when they may stand side by side."""
    groups: dict[str, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(comparison_key(run), []).append(run)
    if len(groups) <= 1:
        return []
    decoded = [(json.loads(key), members) for key, members in groups.items()]
    base, base_runs = decoded[0]
    lines = []
    for other, members in decoded[1:]:
        diffs = _differences(base, other)
        lines.append(f"{_and_more(members)} differs from {base_runs[0].run_id}: {'; '.join(diffs)}")
    return lines


def _and_more(runs: Sequence[RunResult]) -> str:
    """The first run of a group, and how many more it stands for (none said when alone)."""
    more = len(runs) - 1
    return runs[0].run_id + (f" (and {more} more)" if more else "")


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    diffs = [f"{k} {a[k]} vs {b[k]}" for k in ("benchmark", "division") if a[k] != b[k]]
    ca, cb = a["config"], b["config"]
    for key in sorted(set(ca) | set(cb)):
        if ca.get(key) != cb.get(key):
            diffs.append(f"{key}={ca.get(key)!r} vs {cb.get(key)!r}")
    return diffs


THREADS_PER_WORKER = "threads per worker"


NETWORK = "network"


def network_text(manifest: Manifest | None) -> str | None:
    """The link a run asked for ("100mbit"), or what its network was ("loopback, unshaped");
    the measured rate varies run to run and is in each manifest."""
    if manifest is None or manifest.network is None:
        return None
    return manifest.network.get("link") or manifest.network.get("description")


def environment_values(m: Manifest | None) -> dict[str, Any]:
    """What of a run's environment must match across runs that stand side by side."""
    if m is None:
        return {"manifest": None}
    return {
        "code_version": m.code_version,
        "image": m.image,
        "python": m.python,
        "dist_backend": m.dist_backend,
        # What each worker computes with must match across a scaling study, or its speedups
        # measure the thread pool (issue 33); the total grows with the workers, as it should.
        THREADS_PER_WORKER: m.torch_threads,
        NETWORK: network_text(m),
        **{f"package {k}": v for k, v in m.packages.items()},
        **{f"hardware {k}": v for k, v in m.hardware.items()},
    }


def environment_differences(runs: Sequence[RunResult]) -> dict[str, list[str]]:
    """Manifest fields that take more than one value across the runs (code version, image,
    package versions, hardware): not a refusal, but a reader must see it."""
    fields: dict[str, set[str]] = {}
    for run in runs:
        for key, value in environment_values(run.manifest).items():
            fields.setdefault(key, set()).add(str(value))
    return {k: sorted(v) for k, v in fields.items() if len(v) > 1}
