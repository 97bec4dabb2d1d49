"""The dashboard's reader of run records: a run's row in the table (job, state, summary and
manifest, the end of its events while it runs). With runner.dashboard.runpage (a run's page:
its detail, events, logs and files) and runner.dashboard.reports (runs as reports read them,
studies), every file name and record format the dashboard knows is here, so moving them to
contract/'s typed records changes these modules alone.

It answers in JSON-ready dicts (the API's payloads) and never raises for one bad run: a run
whose files are damaged or hostile shows as DAMAGED with the file and the problem, and the
listing and every other run carry on. Records are read through contract.files (regular files
only, never through a link, size-capped); anything a request names is checked by
runner.dashboard.files, so nothing outside the results directory is ever read. State is what
the run directory records (kept current by whoever supervises or follows the run), except
that an unfinished local run whose supervisor is gone reads as failed, as `runner runs` says.

Not here: a run's page (runner.dashboard.runpage), runs and studies as reports read them
(runner.dashboard.reports), HTTP (runner.dashboard.server), chart points
(runner.dashboard.curves), shaping studies and comparisons (runner.dashboard.views),
statistics (runner.results).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from contract.events import parse_lines
from contract.files import MAX_RECORD_BYTES, DamagedFile, parse_json_object
from contract.manifest import Manifest, parse_manifest
from contract.rundir import EVENTS, JOB, LOGS, MANIFEST, STATE, SUMMARY, JobStatus
from contract.summary import MicroSummary, Summary, parse_summary
from runner.dashboard import curves, files
from runner.errors import RunnerError
from runner.results import index, rundir
from runner.results import study as studies
from runner.results.keys import config_keys, plugin_text
from workloads.tasks.config import LOWER_IS_BETTER

DAMAGED = "DAMAGED"  # a state of the dashboard's own: the records cannot be trusted
UNKNOWN = "UNKNOWN"  # no state.json yet
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")
RECORDS = (JOB, STATE, SUMMARY, MANIFEST)
SUPERVISOR = "supervisor.json"  # the local backend's record of its supervisor process
MAX_EVENTS_BYTES = 64 << 20  # the largest events.jsonl read whole (a long run's is a few MiB)
LATEST_BYTES = 64 << 10  # the end of a live run's events.jsonl read for the table's figure


class NotFound(LookupError):
    """No run or study of that name in the results directory."""


def problem(file: str, text: str) -> dict[str, str]:
    return {"file": file, "problem": text}


# ---- runs ---------------------------------------------------------------------------------


def run_path(root: Path, run_id: str) -> Path:
    """The run directory of `run_id`: a plain name, a directory, never a link."""
    path = root / run_id
    if not files.valid_name(run_id) or run_id == studies.STUDIES_DIR:
        raise NotFound(f"{run_id!r} is not a run id")
    if not files.is_plain_dir(path):
        raise NotFound(f"no run {run_id!r} in {root}")
    return path


def _entries(root: Path) -> Iterator[tuple[str, int | None]]:
    """(name, the directory's inode; None for a link) of every directory or link of `root`
    that may be a run (whether it is one: _is_run, from the files its row is built from)."""
    with contextlib.suppress(OSError), os.scandir(root) as it:
        for entry in it:
            if not files.valid_name(entry.name) or entry.name == studies.STUDIES_DIR:
                continue
            if entry.is_symlink():
                yield entry.name, None
            elif entry.is_dir(follow_symlinks=False):
                yield entry.name, entry.inode()


# A run directory holds one of its records, its events or its logs (SUPERVISOR, the last of
# the files a row is built from, alone does not make one).
RUN_FILES = (*RECORDS, EVENTS)


def _is_run(root: Path, name: str, sig: index.Signature) -> bool:
    """From the signature RowIndex just read (its first entry the directory's), so that only
    a directory with none of a run's files is looked at again, for its logs."""
    return any(sig[1 : 1 + len(RUN_FILES)]) or os.path.lexists(root / name / LOGS)


def signature(path: Path) -> tuple[Any, ...]:
    """Changes whenever a file that a run's row or page is built from changes."""
    out: list[tuple[int, int, int] | None] = []
    for name in (*RECORDS, EVENTS, SUPERVISOR):
        try:
            info = os.lstat(path / name)
            out.append((info.st_ino, info.st_size, info.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


# What builds a row (run_row): a change to any of them makes the stored rows another code's.
BUILDERS = (
    __name__, "runner.dashboard.curves", "runner.backends.local.backend", "contract.summary",
    "contract.manifest", "contract.rundir", "runner.job.spec",
)  # fmt: skip


class RunTable:
    """Every run's row, rebuilt only when its files change (an unfinished local run's is
    rebuilt on every call: its supervisor can die without a file changing). The rows are
    kept in the results directory's run index (runner/results/index.py), so the first page
    of a new server reads no record that is known."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._index = index.RowIndex(
            root, "dashboard", (*RUN_FILES, SUPERVISOR), index.code_key(BUILDERS),
            self._build, may_change_unseen, _stored_row,
            is_run=lambda name, sig: _is_run(root, name, sig),
        )  # fmt: skip
        self._lock = threading.Lock()  # one table serves every page's stream, from threads
        self._last: tuple[float, list[dict[str, Any]]] | None = None  # (begun at, rows)

    def rows(self) -> list[dict[str, Any]]:
        """Every run's row, read after this call began: a caller that waited while another
        read them takes that reading if it began after this call did (a page's first
        /api/runs and its stream's first poll arrive together; 10,000 runs are read once)."""
        asked = time.monotonic()
        with self._lock:
            if self._last is not None and self._last[0] >= asked:
                return self._last[1]
            begun = time.monotonic()
            rows = self._rows()
            self._last = (begun, rows)
            return rows

    def _rows(self) -> list[dict[str, Any]]:
        rows, dirs = {}, []
        for name, inode in _entries(self.root):
            if inode is None:
                rows[name] = _damaged_row(name, problem(name, "is a symbolic link, never followed"))
                continue
            dirs.append((name, inode))
        rows |= {name: row for name, (_, row) in self._index.rows(dirs).items()}
        return sorted(rows.values(), key=lambda r: r["created_at"] or "", reverse=True)

    def _build(self, name: str) -> dict[str, Any] | None:
        try:
            return run_row(self.root, name)
        except NotFound:  # removed (or swapped for a link) since it was listed
            return None


def _stored_row(row: Any) -> bool:
    """A row from the run index has the shape run_row builds (else it is built again)."""
    return (
        isinstance(row, dict) and set(row) >= {*ROW_FIELDS, "run_id", "state", "damaged", "notes"}
        and isinstance(row["state"], str) and isinstance(row["created_at"], str | None)
        and isinstance(row["backend"], str | None)
    )  # fmt: skip


def may_change_unseen(row: Mapping[str, Any]) -> bool:
    return row["backend"] == "local" and row["state"] not in (*FINISHED, DAMAGED)


ROW_FIELDS = (
    "reason", "since", "failed_rank", "exit_code", "benchmark", "division", "backend", "stack",
    "workers", "nodes", "device", "strategy", "created_at", "metric", "target", "value", "epoch",
    "max_epochs", "reached", "time_to_target_s", "run_time_s", "throughput", "link", "target_met_s",
    "plugins",
)  # fmt: skip


def _damaged_row(run_id: str, *problems: dict[str, str]) -> dict[str, Any]:
    return {**dict.fromkeys(ROW_FIELDS), "run_id": run_id, "state": DAMAGED, "reason": "",
            "damaged": list(problems), "notes": [], "lower_is_better": False,
            "keys": {}}  # fmt: skip


def open_in_run(path: Path, name: str) -> int:
    """A descriptor of the regular file `name` in the run directory `path` (one run_path
    found): the run directory is opened again here without following a link, so one swapped
    for a link since run_path looked (to a folder outside the results directory) is refused,
    never read. FileNotFoundError when missing; DamagedFile when a link or not a file."""
    return files.open_beneath(path.parent, (path.name, name))


def read_record(path: Path, name: str) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """(the JSON record, None), (None, None) when it does not exist, (None, problem)."""
    try:
        raw = files.read_beneath(path.parent, (path.name, name), MAX_RECORD_BYTES)
        return parse_json_object(path / name, raw), None
    except FileNotFoundError:
        return None, None
    except DamagedFile as err:
        return None, problem(name, err.problem)
    except OSError as err:
        return None, problem(name, err.strerror or str(err))


def read_typed(path: Path, name: str, parse: Any) -> tuple[Any, dict[str, str] | None]:
    """A record read and checked field by field (contract/summary.py, manifest.py)."""
    data, damage = read_record(path, name)
    if data is None:
        return None, damage
    try:
        return parse(data, path / name), None
    except DamagedFile as err:
        return None, problem(name, err.problem)


def read_job(path: Path, run_id: str) -> tuple[rundir.RunRecord | None, dict[str, str] | None]:
    data, damage = read_record(path, JOB)
    if data is None:
        return None, damage or problem(JOB, "is missing: this is not a complete run directory")
    try:
        record = rundir.RunRecord.from_dict(data)
    except DamagedFile as err:
        return None, problem(JOB, err.problem)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return None, problem(JOB, f"does not hold a job this runner reads ({err!r})")
    if record.spec.run_id != run_id:
        return None, problem(JOB, f"names run {record.spec.run_id!r}, not its directory")
    return record, None


def _state(root: Path, path: Path, record: rundir.RunRecord | None) -> JobStatus | None:
    """state.json, but an unfinished local run whose supervisor is gone has failed (the local
    backend's own verdict). Only once the supervisor is on record: before that, a run being
    submitted would flash as failed."""
    status = _read_state(path)
    live = status is None or not status.state.finished
    local = record is not None and record.handle == f"local://{path.name}"
    if live and local and os.path.lexists(path / SUPERVISOR):
        import psutil

        from runner.backends import factory

        try:
            return factory.listed_status(record, root)  # type: ignore[arg-type]
        except (RunnerError, OSError, ValueError, KeyError, TypeError, psutil.Error):
            return status  # its reads are not defensive; state.json was read defensively
    return status


def _read_state(path: Path) -> JobStatus | None:
    """state.json as contract.rundir.read_state reads it, through the run directory's
    no-follow open (open_in_run)."""
    data, damage = read_record(path, STATE)
    if damage:
        raise DamagedFile(path / STATE, damage["problem"])
    return None if data is None else JobStatus.from_dict(data, path / STATE)


def run_row(root: Path, run_id: str) -> dict[str, Any]:
    """One run as the runs table shows it."""
    path = run_path(root, run_id)
    records = {SUMMARY: read_typed(path, SUMMARY, parse_summary),
               MANIFEST: read_typed(path, MANIFEST, parse_manifest)}  # fmt: skip
    damage = [p for _, p in records.values() if p]
    record, job_damage = read_job(path, run_id)
    try:
        status = _state(root, path, record)
    except DamagedFile as err:
        status, damage = None, [*damage, problem(STATE, err.problem)]
    except OSError as err:  # the state the backend infers could not be written, say
        status, damage = None, [*damage, problem(STATE, f"cannot be read ({err.strerror or err})")]
    if job_damage:
        return _damaged_row(run_id, job_damage, *damage)
    assert record is not None
    spec, summary = record.spec, records[SUMMARY][0]
    config = spec.config.flat()  # the keys --set takes
    metric = getattr(spec.config, "target_metric", None)
    row = {
        **_damaged_row(run_id),
        "state": DAMAGED if damage else (status.state.value if status else UNKNOWN),
        "reason": status.reason if status else "", "since": status.since if status else None,
        "failed_rank": status.failed_rank if status else None,
        "exit_code": status.exit_code if status else None,
        "damaged": damage, "benchmark": spec.benchmark, "division": spec.division,
        "backend": record.backend, "stack": (record.cluster or {}).get("stack"),
        "workers": spec.placement.world_size, "nodes": spec.placement.num_nodes,
        "device": spec.placement.device, "strategy": config.get("strategy"),
        "created_at": spec.created_at, "metric": metric, "target": config.get("target_value"),
        "lower_is_better": metric in LOWER_IS_BETTER, "max_epochs": config.get("max_epochs"),
        "link": spec.placement.link,
        "keys": config_keys(config, spec.placement.workers_text, spec.placement.link, spec.division,
                            records[MANIFEST][0]),
    }  # fmt: skip
    row["plugins"] = plugins(records[MANIFEST][0])
    row.update(_headline(summary) if summary else _latest(path))
    row.update(_valid_result(row))
    row["notes"] = _notes(row, path, summary)
    return row


def plugins(manifest: Manifest | None) -> list[dict[str, str]]:
    """The plugins whose code a run used, as its pages name them: `name@version`, and the
    hash of their source for a reader who must tell two builds of one version apart."""
    if manifest is None:
        return []
    return [{"label": plugin_text([p]), "source_sha256": p.source_sha256} for p in manifest.plugins]


def _valid_result(row: Mapping[str, Any]) -> dict[str, Any]:
    """A time to target only for a run that succeeded (runner.results.runs.RunResult's rule):
    a run that failed after rank 0 wrote its summary (another rank crashed, the supervisor was
    killed) is a miss whatever its summary says; one not finished has no result yet."""
    if row["state"] == "SUCCEEDED" or row["reached"] is None:
        return {}
    return {"reached": False if row["state"] in FINISHED else None, "time_to_target_s": None}


def _headline(summary: Summary) -> dict[str, Any]:
    """The table's figures from summary.json's record (its fields checked when read)."""
    if isinstance(summary, MicroSummary):
        best = max((r.busbw_gbps for r in summary.results), default=None)
        return {"metric": "peak busbw (GB/s)", "value": best}
    return {
        "value": summary.final.value if summary.final else None,
        "epoch": summary.final.epoch if summary.final else None,
        "reached": summary.target_reached,
        "run_time_s": summary.run_time_s,
        "time_to_target_s": summary.time_to_target_s,
        "throughput": summary.throughput_samples_per_s,
    }


def _latest(path: Path) -> dict[str, Any]:
    """A live run's latest quality figure and epoch, from the end of its events."""
    try:
        fd = open_in_run(path, EVENTS)
    except (OSError, DamagedFile):
        return {}
    with os.fdopen(fd, "rb") as f:
        start = max(0, os.fstat(f.fileno()).st_size - LATEST_BYTES)
        f.seek(start)
        lines = f.read(LATEST_BYTES).decode("utf-8", errors="replace").splitlines()
    return curves.latest(parse_lines(lines[1:] if start else lines))  # [0]: cut by seek


def _notes(row: Mapping[str, Any], path: Path, summary: Any) -> list[str]:
    notes = []
    remote = row["backend"] not in (None, "local")
    if remote and row["state"] not in FINISHED:
        notes.append(
            f"followed on {row['backend']}: the state is what the runner following it last "
            "recorded; curves and logs arrive when it is fetched"
        )
    elif remote and (summary is None or not os.path.lexists(path / EVENTS)):
        notes.append(f"results not fetched yet: runner fetch {row['run_id']}")
    return notes
