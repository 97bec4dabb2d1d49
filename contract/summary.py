"""summary.json: a run's outcome, written once by rank 0 at the end, read by everything else.

Two kinds, told apart by `kind`: a training run's TrainSummary (target, time to target,
throughput, the split of the loop's time into phases), and the all-reduce micro-benchmark's
MicroSummary (one measurement per size and dtype). The workload builds the record and writes
`to_dict()`; readers get it back with `parse_summary`, every field's type checked, so a report
never meets a summary without its target or a string where a time should be: such a file is
a DamagedFile naming the field. Fields a newer writer adds are ignored; a newer schema version
is refused (contract/rundir.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.files import DamagedFile
from contract.records import Fields
from contract.rundir import SCHEMA_VERSION, SUMMARY, check_version

TRAIN, MICRO = "train", "allreduce-micro"
EVAL_FIELDS = ("epoch", "value", "loss", "time_s")
# An evaluation's detail: the metric a guess scores (top-1 accuracy 1 / classes), where a task
# has one; a run that ends nearer it than its target did not learn (did_not_learn).
CHANCE = "chance"


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: the quality metric, its loss, when (seconds since run_start), and what
    else the task reports (BLEU's signature), kept as it came."""

    epoch: int
    value: float
    time_s: float
    loss: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"epoch": self.epoch, "value": self.value, "loss": self.loss, "time_s": self.time_s}
        return {**dict(self.details), **out}

    @classmethod
    def parse(cls, f: Fields) -> Evaluation:
        details = {k: v for k, v in f.data.items() if k not in EVAL_FIELDS}
        return cls(
            f.integer("epoch"), f.number("value"), f.number("time_s"),
            f.optional_number("loss"), details,
        )  # fmt: skip

    @property
    def chance(self) -> float | None:
        """The chance level the task reported (None: none, or not a number in [0, 1))."""
        value = self.details.get(CHANCE)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if 0 <= value < 1 else None


@dataclass(frozen=True)
class TrainLoss:
    """The last epoch's mean training loss and, given a target, when it was first reached."""

    final: float | None = None
    target: float | None = None
    time_to_target_s: float | None = None
    target_epoch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "final": self.final,
            "target": self.target,
            "time_to_target_s": self.time_to_target_s,
            "target_epoch": self.target_epoch,
        }

    @classmethod
    def parse(cls, f: Fields) -> TrainLoss:
        return cls(
            f.optional_number("final"), f.optional_number("target"),
            f.optional_amount("time_to_target_s"), f.optional_integer("target_epoch"),
        )  # fmt: skip


@dataclass(frozen=True)
class AdaptiveSummary:
    """What a run's adaptive policies did (workloads/adaptive/run.py): the policies in their
    order, the monitors' interval, how many decisions (in all and by knob), each knob's last
    value, and the last smoothed noise scale (None before the first reading)."""

    policies: tuple[str, ...]
    monitor_interval_steps: int
    decisions: int
    decisions_by_knob: Mapping[str, int]
    final: Mapping[str, float | str]  # a knob's value: a batch, a period, a mode's name
    b_noise: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "policies": list(self.policies),
            "monitor_interval_steps": self.monitor_interval_steps,
            "decisions": self.decisions,
            "decisions_by_knob": dict(self.decisions_by_knob),
            "final": dict(self.final),
            "b_noise": self.b_noise,
        }

    @classmethod
    def parse(cls, f: Fields) -> AdaptiveSummary:
        policies = f.data.get("policies")
        if not isinstance(policies, list) or not all(isinstance(p, str) for p in policies):
            raise f.bad("policies", "a list of names")
        by_knob, final = f.object("decisions_by_knob"), f.object("final")
        return cls(
            policies=tuple(policies),
            monitor_interval_steps=f.integer("monitor_interval_steps"),
            decisions=f.integer("decisions"),
            decisions_by_knob={k: by_knob.integer(k) for k in by_knob.data},
            final={k: final.scalar(k) for k in final.data},
            b_noise=f.optional_number("b_noise"),
        )


@dataclass(frozen=True, kw_only=True)
class TrainSummary:
    run_id: str
    benchmark: str
    division: str
    strategy: str  # as run: `local` in a single process
    world_size: int
    device: str
    precision: str
    status: str  # "success", "aborted" (target missed) or "diverged"
    diverged: str | None  # where and why, when it diverged
    target_metric: str
    target_value: float
    target_reached: bool
    time_to_target_s: float | None
    stopped_by_time_budget: bool
    final: Evaluation | None
    best: Evaluation | None
    epochs: int
    steps: int
    train_samples: int
    global_batch_size: int
    batch_unit: str
    run_time_s: float
    init_time_s: float
    train_time_s: float
    eval_time_s: float
    warmup_steps: int
    warmup_time_s: float
    throughput_samples_per_s: float | None
    throughput_tokens_per_s: float | None
    step_time_ms: float | None
    phases_s: Mapping[str, float]  # the loop's wall time by phase (`other`: between steps)
    phase_shares: Mapping[str, float]
    communication_share: float
    first_step_times_ms: tuple[float, ...]
    iteration_time_ms_2_to_40: float | None
    train_loss: TrainLoss
    adaptive: AdaptiveSummary | None = None  # only a run with adaptive policies or monitors
    kind: str = TRAIN

    @property
    def did_not_learn(self) -> str | None:
        """The verdict "did not learn (top1_accuracy 0.26, chance 0.10)" for a run that missed
        its target nearer its task's chance level than the target (None: it learned, or no
        chance level is known). Such a run is no slow run: its seed or learning rate failed it."""
        final = self.final
        if final is None or self.target_reached or self.diverged:
            return None
        chance = final.chance
        if chance is None or self.target_value <= chance:
            return None
        if final.value >= (chance + self.target_value) / 2:
            return None
        return f"did not learn ({self.target_metric} {final.value:.2f}, chance {chance:.2f})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": TRAIN,
            "run_id": self.run_id,
            "benchmark": self.benchmark,
            "division": self.division,
            "strategy": self.strategy,
            "world_size": self.world_size,
            "device": self.device,
            "precision": self.precision,
            "status": self.status,
            "diverged": self.diverged,
            "target": {"metric": self.target_metric, "value": self.target_value},
            "target_reached": self.target_reached,
            "time_to_target_s": self.time_to_target_s,
            "stopped_by_time_budget": self.stopped_by_time_budget,
            "final": self.final.to_dict() if self.final else None,
            "best": self.best.to_dict() if self.best else None,
            "epochs": self.epochs,
            "steps": self.steps,
            "train_samples": self.train_samples,
            "global_batch_size": self.global_batch_size,
            "batch_unit": self.batch_unit,
            "run_time_s": self.run_time_s,
            "init_time_s": self.init_time_s,
            "train_time_s": self.train_time_s,
            "eval_time_s": self.eval_time_s,
            "warmup": {"steps": self.warmup_steps, "time_s": self.warmup_time_s},
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "step_time_ms": self.step_time_ms,
            "phases_s": dict(self.phases_s),
            "phase_shares": dict(self.phase_shares),
            "communication_share": self.communication_share,
            "first_step_times_ms": list(self.first_step_times_ms),
            "iteration_time_ms_2_to_40": self.iteration_time_ms_2_to_40,
            "train_loss": self.train_loss.to_dict(),
            "adaptive": self.adaptive.to_dict() if self.adaptive else None,
        }

    @classmethod
    def parse(cls, f: Fields) -> TrainSummary:
        target, warmup = f.object("target"), f.object("warmup")
        final, best = f.optional_object("final"), f.optional_object("best")
        adaptive = f.optional_object("adaptive")
        return cls(
            run_id=f.text("run_id"),
            benchmark=f.text("benchmark"),
            division=f.text("division"),
            strategy=f.text("strategy"),
            world_size=f.integer("world_size"),
            device=f.text("device"),
            precision=f.text("precision"),
            status=f.text("status"),
            diverged=f.optional_text("diverged"),
            target_metric=target.text("metric"),
            target_value=target.number("value"),
            target_reached=f.boolean("target_reached"),
            time_to_target_s=f.optional_amount("time_to_target_s"),
            stopped_by_time_budget=f.boolean("stopped_by_time_budget"),
            final=Evaluation.parse(final) if final else None,
            best=Evaluation.parse(best) if best else None,
            epochs=f.integer("epochs"),
            steps=f.integer("steps"),
            train_samples=f.integer("train_samples"),
            global_batch_size=f.integer("global_batch_size"),
            batch_unit=f.text("batch_unit"),
            run_time_s=f.amount("run_time_s"),
            init_time_s=f.amount("init_time_s"),
            train_time_s=f.amount("train_time_s"),
            eval_time_s=f.amount("eval_time_s"),
            warmup_steps=warmup.integer("steps"),
            warmup_time_s=warmup.amount("time_s"),
            throughput_samples_per_s=f.optional_amount("throughput_samples_per_s"),
            throughput_tokens_per_s=f.optional_amount("throughput_tokens_per_s"),
            step_time_ms=f.optional_amount("step_time_ms"),
            phases_s=f.amount_map("phases_s"),
            phase_shares=f.amount_map("phase_shares"),
            communication_share=f.amount("communication_share"),
            first_step_times_ms=f.numbers("first_step_times_ms"),
            iteration_time_ms_2_to_40=f.optional_amount("iteration_time_ms_2_to_40"),
            train_loss=TrainLoss.parse(f.object("train_loss")),
            adaptive=AdaptiveSummary.parse(adaptive) if adaptive else None,
        )


@dataclass(frozen=True)
class Measurement:
    """One all-reduce size and dtype, as nccl-tests reports it."""

    elements: int
    dtype: str
    size_bytes: int
    num_iters: int
    time_us: float  # per all-reduce, the slowest rank's
    algbw_gbps: float  # GB/s, 1e9 bytes
    busbw_gbps: float

    @classmethod
    def parse(cls, f: Fields) -> Measurement:
        return cls(
            f.integer("elements"), f.text("dtype"), f.integer("size_bytes"),
            f.integer("num_iters"), f.number("time_us"), f.number("algbw_gbps"),
            f.number("busbw_gbps"),
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class MicroSummary:
    run_id: str
    benchmark: str
    division: str
    status: str
    world_size: int
    device: str
    backend: str  # the collective backend: gloo or nccl
    run_time_s: float
    results: tuple[Measurement, ...]
    stopped_by_time_budget: bool
    kind: str = MICRO

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": MICRO,
            "run_id": self.run_id,
            "benchmark": self.benchmark,
            "division": self.division,
            "status": self.status,
            "world_size": self.world_size,
            "device": self.device,
            "backend": self.backend,
            "run_time_s": self.run_time_s,
            "results": [vars(r) for r in self.results],
            "stopped_by_time_budget": self.stopped_by_time_budget,
        }

    @classmethod
    def parse(cls, f: Fields) -> MicroSummary:
        return cls(
            run_id=f.text("run_id"),
            benchmark=f.text("benchmark"),
            division=f.text("division"),
            status=f.text("status"),
            world_size=f.integer("world_size"),
            device=f.text("device"),
            backend=f.text("backend"),
            run_time_s=f.amount("run_time_s"),
            results=tuple(Measurement.parse(r) for r in f.objects("results")),
            stopped_by_time_budget=f.boolean("stopped_by_time_budget"),
        )


Summary = TrainSummary | MicroSummary


def parse_summary(data: Any, path: Path = Path(SUMMARY)) -> Summary:
    """The record in `data` (summary.json's JSON); DamagedFile naming what is wrong."""
    f = Fields(data, path)
    check_version(f.data, path)
    kind = f.data.get("kind", TRAIN)  # summaries written before `kind` were training ones
    if kind == TRAIN:
        return TrainSummary.parse(f)
    if kind == MICRO:
        return MicroSummary.parse(f)
    raise DamagedFile(path, f"has an unknown kind {kind!r}")
