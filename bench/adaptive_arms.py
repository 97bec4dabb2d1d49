"""The adaptive study's bookkeeping: which arm a finished run is, whether its adaptive run
really adapted (from its decision events), the runs paired by seed, and adaptive / fixed.

Pure: it reads run directories (runner.results.runs.RunResult and the run's events.jsonl)
and starts nothing, so a test feeds it hand-written run directories. An adaptive run that
took no decision of its kind trained as its fixed twin did: its pair measures nothing
adaptive. So each comparison gives two ratios, both with the report's seeded bootstrap
interval (runner.results.aggregate.ratio_interval): over the pairs whose adaptive run
adapted (the headline), and over every pair (what averaging them all in would have said);
and each run says what it decided, or that it decided nothing.

What adapting means, per kind (the knobs of workloads/adaptive/policies.py and elastic/):
- batch: at least one change of the global batch (knob global_batch);
- sync: at least one switch of the synchronisation (knob sync_mode); a change of the
  averaging period alone cannot happen before a switch to averaging;
- elastic: a worker left (knob workers falls) and one joined (it rises) in the run.
Decisions are read as recorded: a run stops at its target, so every decision it recorded
came before it. A malformed decision event (the file may be damaged) is not a decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from contract.events import DECISION, read_events
from contract.files import DamagedFile
from contract.rundir import EVENTS
from runner.results import rundir
from runner.results.aggregate import Ratio, ratio_interval
from runner.results.runs import RunResult, load_run

Kind = Literal["batch", "sync", "elastic"]
KINDS: tuple[Kind, ...] = ("batch", "sync", "elastic")
FIXED, ADAPTIVE = "fixed", "adaptive"


@dataclass(frozen=True)
class Decision:
    step: int
    time_s: float  # since the run's start
    knob: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Adaptation:
    adapted: bool
    what: str  # one line: the decisions that count, or why none did


@dataclass(frozen=True)
class Row:
    """One run of the study, as the table shows it."""

    run_id: str
    seed: int
    arm: str  # FIXED or ADAPTIVE
    state: str
    time_to_target_s: float | None
    adaptation: Adaptation | None  # None for a fixed run


@dataclass(frozen=True)
class Comparison:
    kind: Kind
    pairs: tuple[tuple[Row, Row], ...]  # (fixed, adaptive) of one seed, by seed
    unpaired: tuple[Row, ...]  # a run whose seed has no twin in the other arm (or a second)
    adapted: Ratio  # over the pairs whose adaptive run adapted
    every: Ratio  # over every pair

    @property
    def adapted_runs(self) -> int:
        return sum(bool(a.adaptation and a.adaptation.adapted) for _, a in self.pairs)


def arm_of(run: RunResult) -> str:
    """ADAPTIVE for a run with a policy or an elastic range of workers, else FIXED."""
    policy = run.config.get("policy")
    has_policy = bool(policy) and policy not in ("none", ["none"], ("none",))
    return ADAPTIVE if has_policy or run.min_workers is not None else FIXED


def seed_of(run: RunResult) -> int | None:
    seed = run.config.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def decisions(run: RunResult) -> list[Decision]:
    """The run's recorded decisions, in order; malformed ones left out."""
    out = []
    for event in read_events(run.run_dir / EVENTS):
        value = event.get("value")
        if event.get("key") == DECISION and isinstance(value, Mapping):
            decision = _decision(value)
            if decision is not None:
                out.append(decision)
    return out


def _decision(value: Mapping[str, Any]) -> Decision | None:
    step, time_s, knob = value.get("step"), value.get("time_s"), value.get("knob")
    if not (isinstance(step, int) and isinstance(time_s, int | float) and isinstance(knob, str)):
        return None
    return Decision(step, float(time_s), knob, value.get("old"), value.get("new"))


def adaptation(kind: Kind, made: Sequence[Decision]) -> Adaptation:
    """Whether decisions `made` are the adaptation of `kind` (module docstring), in a line."""
    if kind == "batch":
        changes = [d for d in made if d.knob == "global_batch"]
        said = [f"batch {d.old} -> {d.new} at step {d.step}" for d in changes]
        never = "did not adapt: the batch never changed"
        return Adaptation(bool(changes), "; ".join(said) or never)
    if kind == "sync":
        shown = [d for d in made if d.knob in ("sync_mode", "averaging_period")]
        switched = any(d.knob == "sync_mode" for d in shown)
        said = [f"{_knob(d.knob)} {d.old} -> {d.new} at step {d.step}" for d in shown]
        never = "did not adapt: never switched (exact all-reduce throughout, as the fixed arm)"
        return Adaptation(switched, "; ".join(said) if switched else never)
    changes = [d for d in made if d.knob == "workers" and _numbers(d.old, d.new)]
    left = any(d.new < d.old for d in changes)
    joined = any(d.new > d.old for d in changes)
    moves = "; ".join(f"workers {d.old} -> {d.new} at {d.time_s:.1f} s" for d in changes)
    if left and joined:
        return Adaptation(True, moves)
    missing = "no worker left" if not left else "no worker joined before the run ended"
    return Adaptation(False, f"did not adapt: {missing}" + (f" ({moves})" if moves else ""))


def _knob(name: str) -> str:
    return "period" if name == "averaging_period" else "mode"


def _numbers(*values: Any) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def row(kind: Kind, run: RunResult) -> Row:
    arm = arm_of(run)
    seed = seed_of(run)
    done = adaptation(kind, decisions(run)) if arm == ADAPTIVE else None
    return Row(run.run_id, -1 if seed is None else seed, arm, run.state, run.time_to_target_s,
               done)  # fmt: skip


def load_folder(folder: Path) -> tuple[list[RunResult], list[str]]:
    """The runs under `folder`, and a line for each run directory that could not be read."""
    runs, skipped = [], []
    for run_dir in rundir.list_dirs(folder) if folder.is_dir() else []:
        try:
            runs.append(load_run(run_dir))
        except DamagedFile as err:
            skipped.append(f"{run_dir.name}: {err}")
    return runs, skipped


def compare(kind: Kind, runs: Iterable[RunResult]) -> Comparison:
    """The runs of one pair of arms, paired by seed, and adaptive / fixed both ways. Of two
    runs of one arm and seed, the first created is paired (a rerun is listed unpaired)."""
    by_seed: dict[int, dict[str, Row]] = {}
    unpaired: list[Row] = []
    ordered = sorted(runs, key=lambda run: (run.created_at, run.run_id))
    for r in (row(kind, run) for run in ordered):
        arms = by_seed.setdefault(r.seed, {})
        if r.seed < 0 or r.arm in arms:  # no seed, or a second run of one arm and seed
            unpaired.append(r)
        else:
            arms[r.arm] = r
    pairs = []
    for seed in sorted(by_seed):
        arms = by_seed[seed]
        if FIXED in arms and ADAPTIVE in arms:
            pairs.append((arms[FIXED], arms[ADAPTIVE]))
        else:
            unpaired += arms.values()
    kept = [(f, a) for f, a in pairs if a.adaptation is not None and a.adaptation.adapted]
    return Comparison(kind, tuple(pairs), tuple(unpaired), _ratio(kept), _ratio(pairs))


def _ratio(pairs: Sequence[tuple[Row, Row]]) -> Ratio:
    return ratio_interval([a.time_to_target_s for _, a in pairs],
                          [f.time_to_target_s for f, _ in pairs])  # fmt: skip


def ratio_text(ratio: Ratio) -> str:
    """'0.62 (0.55-0.70): faster', or why there is no ratio."""
    if ratio.ratio is None or ratio.low is None or ratio.high is None:
        return f"too few runs reached the target ({ratio.runs_a} adaptive, {ratio.runs_b} fixed)"
    return f"{ratio.ratio:.2f} ({ratio.low:.2f}-{ratio.high:.2f}): {ratio.verdict}"
