"""The run directory `results/<run-id>/`: the same files whatever the backend ran the job.

    job.json        the resolved JobSpec plus backend and handle (written before submit)
    state.json      the last known JobStatus (written by whoever supervises the job)
    events.jsonl    MLPerf-style events from rank 0
    summary.json    the run's outcome, written once at the end
    manifest.json   the environment: code version, packages, hardware, seeds, world size
    logs/rank-N.log every rank's output

Nothing else holds state: listing runs is listing this directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import files
from contract.rundir import (  # noqa: F401  (read_state: callers still reach it here)
    EVENTS,
    JOB,
    LOGS,
    MANIFEST,
    STATE,
    SUMMARY,
    JobStatus,
    rank_log,
    read_state,
)
from runner.errors import RunNotFound
from runner.job.spec import JobSpec
from workloads.mllog import RUN_START, RUN_STOP, read_events

RESULTS_ENV = "STACKBENCH_RESULTS"


def default_results_root() -> Path:
    return Path(os.environ.get(RESULTS_ENV, "results"))


@dataclass(frozen=True)
class RunRecord:
    """job.json: what was submitted, where, and under which handle."""

    spec: JobSpec
    backend: str
    handle: str
    # Cluster runs: how to reach the job again (a stack name or kubeconfig path, no secrets).
    cluster: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"backend": self.backend, "handle": self.handle, **self.spec.to_dict()}
        if self.cluster is not None:
            data["cluster"] = dict(self.cluster)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        return cls(JobSpec.from_dict(data), data["backend"], data["handle"], data.get("cluster"))


def create(root: Path, record: RunRecord) -> Path:
    """Make the run directory and write job.json; refuses to reuse an existing run id."""
    run_dir = root / record.spec.run_id
    (run_dir / LOGS).mkdir(parents=True, exist_ok=False)
    write_json(run_dir / JOB, record.to_dict())
    return run_dir


def find(root: Path, run_id: str) -> Path:
    """The run directory for an id or an unambiguous prefix of one."""
    exact = root / run_id
    if (exact / JOB).is_file():
        return exact
    matches = [p for p in _run_dirs(root) if p.name.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFound(f"no run {run_id!r} under {root}/; list them with `runner runs`")
    names = ", ".join(p.name for p in matches[:5])
    raise RunNotFound(f"{run_id!r} matches several runs ({names}); give more of the id")


def list_dirs(root: Path) -> list[Path]:
    """Run directories, newest first (run ids sort by time within a benchmark)."""
    return sorted(_run_dirs(root), key=lambda p: (p / JOB).stat().st_mtime, reverse=True)


def read_record(run_dir: Path) -> RunRecord:
    return RunRecord.from_dict(read_json(run_dir / JOB))


def write_state(run_dir: Path, status: JobStatus) -> None:
    write_json(run_dir / STATE, status.to_dict())


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    return read_json_or_none(run_dir / SUMMARY)


def missing_results(run_dir: Path, world_size: int) -> list[str]:
    """What a complete successful run has and this one lacks, as human-readable items."""
    missing = [name for name in (JOB, EVENTS, SUMMARY, MANIFEST) if not (run_dir / name).is_file()]
    missing += [
        f"{LOGS}/rank-{r}.log" for r in range(world_size) if not rank_log(run_dir, r).is_file()
    ]
    keys = [e["key"] for e in read_events(run_dir / EVENTS)]
    if EVENTS not in missing:
        if keys.count(RUN_START) != 1:
            missing.append(f"{EVENTS}: exactly one {RUN_START} event")
        if RUN_STOP not in keys:
            missing.append(f"{EVENTS}: a {RUN_STOP} event")
    return missing


write_json = files.write_json
write_text = files.write_text


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_json_or_none(path: Path) -> Any:
    try:
        return read_json(path)
    except FileNotFoundError:
        return None


def _run_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if (p / JOB).is_file()]
