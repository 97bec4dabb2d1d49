"""Run directories written by hand in the real formats (job.json, state.json, summary.json,
manifest.json, events.jsonl), for tests of what reads them: reports, cost, teardown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract import files
from contract.manifest import Manifest
from contract.rundir import JobState, JobStatus
from contract.summary import Evaluation, TrainLoss, TrainSummary
from runner.job.spec import Placement, resolve
from runner.results import rundir

PHASES_PER_STEP_S = {
    "data": 0.0001,
    "forward": 0.002,
    "backward": 0.003,
    "communication": 0.001,
    "optimizer": 0.0005,
}


def make_run(
    root: Path,
    run_id: str,
    workers: int,
    time_to_target_s: float | None,
    *,
    overrides: tuple[str, ...] = (),
    state: str = "SUCCEEDED",
    stack: str | None = None,
    num_nodes: int = 1,
    steps: int = 100,
    created_at: str = "2026-01-01T00:00:00+00:00",
    finished_at: str | None = "2026-01-01T00:30:00+00:00",
    manifest: dict[str, Any] | None = None,
    write_summary: bool = True,
) -> Path:
    """One run of cnn-digits; `time_to_target_s` None: it ran but missed the target."""
    placement = Placement(num_nodes, workers // num_nodes, "cpu")
    spec = resolve("cnn-digits", list(overrides), placement, run_id=run_id)
    data = spec.to_dict() | {"created_at": created_at}
    backend = "local" if stack is None else "kubernetes"
    handle = f"local://{run_id}" if stack is None else f"k8s://bench/{run_id}"
    record = {"backend": backend, "handle": handle, **data}
    if stack is not None:
        record["cluster"] = {"stack": stack, "job_api": "trainjob", "pending_timeout_s": None}
    run_dir = root / run_id
    (run_dir / rundir.LOGS).mkdir(parents=True)
    files.write_json(run_dir / rundir.JOB, record)
    rundir.write_state(run_dir, JobStatus(JobState(state), "", finished_at))
    run_s = time_to_target_s if time_to_target_s is not None else 50.0
    if write_summary:
        files.write_json(
            run_dir / rundir.SUMMARY, summary(run_id, workers, time_to_target_s, steps)
        )
    files.write_json(run_dir / rundir.MANIFEST, manifest or env_manifest(run_id, workers))
    write_events(run_dir / rundir.EVENTS, run_s)
    return run_dir


def summary(run_id: str, workers: int, tta_s: float | None, steps: int) -> dict[str, Any]:
    """summary.json as the workload writes it (the contract's record, so it is valid)."""
    phases = {k: v * steps for k, v in PHASES_PER_STEP_S.items()}
    total = sum(phases.values())
    reached = tta_s is not None
    final = Evaluation(3, 0.96 if reached else 0.9, tta_s or 50.0)
    return TrainSummary(
        run_id=run_id, benchmark="cnn-digits", division="closed", strategy="ddp",
        world_size=workers, device="cpu", precision="fp32",
        status="success" if reached else "aborted", diverged=None,
        target_metric="top1_accuracy", target_value=0.95, target_reached=reached,
        time_to_target_s=tta_s, stopped_by_time_budget=False, final=final, best=final,
        epochs=3, steps=steps, train_samples=32 * steps, global_batch_size=32 * workers,
        batch_unit="samples", run_time_s=tta_s or 50.0, init_time_s=2.0, train_time_s=total,
        eval_time_s=0.1, warmup_steps=1, warmup_time_s=0.01, throughput_samples_per_s=1000.0,
        throughput_tokens_per_s=None, step_time_ms=1000 * total / steps, phases_s=phases,
        phase_shares={k: v / total for k, v in phases.items()},
        communication_share=phases["communication"] / total, first_step_times_ms=(),
        iteration_time_ms_2_to_40=None, train_loss=TrainLoss(final=0.3),
    ).to_dict()  # fmt: skip


def env_manifest(run_id: str, workers: int, **changes: Any) -> dict[str, Any]:
    """manifest.json as the workload writes it (the contract's record)."""
    fields: dict[str, Any] = {
        "run_id": run_id, "code_version": "abc123", "image": None, "python": "3.11.7",
        "packages": {"torch": "2.13.0+cpu", "numpy": "2.4.6"},
        "hardware": {"machine": "x86_64", "cpu": "AMD EPYC", "cpu_count": 2, "device": "cpu"},
        "network": None, "world_size": workers, "dist_backend": "gloo", "seed": 0,
        "torch_threads": 1, "hostname": "vm",
    } | changes  # fmt: skip
    return Manifest(**fields).to_dict()


def write_events(path: Path, run_s: float) -> None:
    start_ms = 1_700_000_000_000
    events = [("run_start", None, 0)]
    for epoch in (1, 2, 3):
        at = int(run_s * 1000 * epoch / 3)
        events += [("train_loss", 1.0 / epoch, at), ("eval_accuracy", 0.8 + 0.05 * epoch, at)]
    events.append(("run_stop", None, int(run_s * 1000)))
    with open(path, "w", encoding="utf-8") as f:
        for key, value, offset_ms in events:
            event = {"namespace": "", "time_ms": start_ms + offset_ms, "key": key,
                     "event_type": "POINT_IN_TIME", "value": value, "metadata": {}}  # fmt: skip
            f.write(json.dumps(event) + "\n")
