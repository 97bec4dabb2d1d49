"""Runs and studies as the reports read them, for the study and comparison pages: each run
loaded by runner.results (load_run) only once its records have been read the dashboard's
defensive way (runner.dashboard.data), so a damaged or hostile run is a problem on the page,
never a traceback; and the studies of results/studies/, a damaged one saying why.

Not here: the runs table's rows (runner.dashboard.data), shaping the pages (views).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract.files import DamagedFile
from contract.rundir import EVENTS, JOB
from runner.dashboard import data, files
from runner.dashboard.data import NotFound, problem
from runner.errors import RunnerError
from runner.results import study as studies
from runner.results.runs import RunResult, load_run


def load_results(root: Path, run_ids: Sequence[str]) -> tuple[list[RunResult], list[dict]]:
    """The runs as runner.results reads them, and a problem for each that cannot be read."""
    runs, problems = [], []
    for run_id in dict.fromkeys(run_ids):
        try:
            path = data.run_path(root, run_id)
        except NotFound as err:
            problems.append({"run_id": run_id, **problem("", str(err))})
            continue
        damage = _unsafe_for_load_run(path)
        if not damage:
            try:
                runs.append(load_run(path))
                continue
            except DamagedFile as err:  # swapped for a link since data.run_path looked, say
                damage.append(problem(err.path.name, err.problem))
            except RunnerError as err:  # removed since data.run_path looked
                damage.append(problem("", str(err)))
            except (KeyError, TypeError, ValueError, AttributeError, OSError) as err:
                damage.append(problem(JOB, f"cannot be read as a run ({err!r})"))
        problems += [{"run_id": run_id, **p} for p in damage]
    return runs, problems


def _unsafe_for_load_run(path: Path) -> list[dict[str, str]]:
    """load_run's own reads are not defensive: every record read the defensive way first, and
    events.jsonl a plain file under the cap (load_run reads it whole)."""
    damage = [p for name in data.RECORDS if name != JOB and (p := data.read_record(path, name)[1])]
    if job_damage := data.read_job(path, path.name)[1]:  # the table's own check: DAMAGED there too
        damage.append(job_damage)
    try:
        with os.fdopen(data.open_in_run(path, EVENTS), "rb") as f:
            size = os.fstat(f.fileno()).st_size
        if size > data.MAX_EVENTS_BYTES:
            damage.append(problem(EVENTS, f"is {size} bytes, over the {data.MAX_EVENTS_BYTES} cap"))
    except FileNotFoundError:
        pass
    except DamagedFile as err:
        damage.append(problem(EVENTS, err.problem))
    return damage


def list_studies(root: Path) -> list[dict[str, Any]]:
    """Every study under results/studies/, newest first; a damaged one says why."""
    base = studies.studies_root(root)
    if not files.is_plain_dir(base):
        return []
    out: list[dict[str, Any]] = []
    for name in sorted(os.listdir(base)):
        if not files.valid_name(name) or not files.is_plain_dir(base / name):
            continue
        try:
            study = load_study_record(root, name)
        except DamagedFile as err:
            out.append({"study_id": name, "damaged": [problem(studies.STUDY_FILE, err.problem)]})
            continue
        except NotFound:
            continue
        out.append({
            "study_id": name, "benchmark": study.benchmark, "state": study.state,
            "workers": list(study.workers), "grid": {k: list(v) for k, v in study.grid.items()},
            "runs_per_cell": study.runs_per_cell, "planned": len(study.runs),
            "submitted": len(study.run_ids), "where": study.where,
            "created_at": study.created_at, "finished_at": study.finished_at, "damaged": [],
        })  # fmt: skip
    return sorted(out, key=lambda s: str(s.get("created_at") or ""), reverse=True)


def load_study_record(root: Path, study_id: str) -> studies.Study:
    """study.json of a study (NotFound; DamagedFile when unreadable)."""
    base = studies.studies_root(root)
    if not files.valid_name(study_id) or not files.is_plain_dir(base / study_id):
        raise NotFound(f"no study {study_id!r} in {base}")
    try:
        return studies.load(base / study_id / studies.STUDY_FILE)  # its fields checked
    except FileNotFoundError:
        raise NotFound(f"study {study_id!r} has no {studies.STUDY_FILE}") from None
