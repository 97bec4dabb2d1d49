"""Run directories on the runner's side: creating one, finding one by id, listing them, and
reading job.json back into the resolved job (file names and records: contract/rundir.py).

Every read tolerates damage: a run directory whose job.json is truncated, binary, of the wrong
shape or a link is reported as damaged (contract.files.DamagedFile, naming the file and the
problem) and never stops a command about other runs. Nothing else holds state: listing runs is
listing this directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import files
from contract.events import RUN_START, RUN_STOP, stream_events
from contract.files import DamagedFile
from contract.manifest import Manifest, parse_manifest
from contract.rundir import (
    EVENTS,
    JOB,
    LOGS,
    MANIFEST,
    STATE,
    SUMMARY,
    JobStatus,
    check_version,
)
from contract.summary import Summary, parse_summary
from runner.errors import RunnerError, RunNotFound, StorageError
from runner.job.spec import JobSpec

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
    def from_dict(cls, data: Mapping[str, Any], path: Path = Path(JOB)) -> RunRecord:
        """The record, or DamagedFile saying what is wrong with it."""
        check_version(data, path)
        backend, handle, cluster = data.get("backend"), data.get("handle"), data.get("cluster")
        if backend not in ("local", "kubernetes"):
            raise DamagedFile(path, f"names no known backend ({backend!r})")
        if not isinstance(handle, str):
            raise DamagedFile(path, "has no handle")
        if cluster is not None and not isinstance(cluster, dict):
            raise DamagedFile(path, "has a `cluster` that is not an object")
        try:
            spec = JobSpec.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise DamagedFile(
                path, f"does not describe a job ({type(err).__name__}: {err})"
            ) from None
        return cls(spec, backend, handle, cluster)


def create(root: Path, record: RunRecord) -> Path:
    """Make the run directory with job.json in it; refuses to reuse a run id. A disk that is
    full, read-only or not ours fails with one line naming the path, and leaves nothing."""
    run_dir = root / record.spec.run_id
    try:
        root.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir()
    except FileExistsError:
        raise RunnerError(f"{run_dir} already exists; run ids are unique, submit again") from None
    except OSError as err:
        raise storage_error(err, run_dir) from None
    try:
        (run_dir / LOGS).mkdir()
        files.write_json(run_dir / JOB, record.to_dict())
    except OSError as err:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise storage_error(err, run_dir) from None
    return run_dir


def storage_error(err: OSError, path: Path) -> StorageError:
    """One line for a disk that refuses a write: the path and what the system said."""
    hint = {
        errno.ENOSPC: "free some space or use another --results-dir",
        errno.EDQUOT: "free some space or use another --results-dir",
        errno.EROFS: "the file system is read-only; use another --results-dir",
        errno.EACCES: "no permission to write there; use another --results-dir",
        errno.EPERM: "no permission to write there; use another --results-dir",
    }.get(err.errno or 0, "check the disk")
    where = err.filename or path
    return StorageError(f"cannot write {where}: {err.strerror or err}; {hint}")


def plain_name(run_id: str) -> bool:
    """A name that stays in the directory it is joined to: no separator, not `.` or `..`."""
    return bool(run_id) and "/" not in run_id and "\0" not in run_id and run_id not in (".", "..")


def named(root: Path, run_id: str) -> Path | None:
    """The run directory of exactly `run_id`, never through a link or out of `root`; None when
    there is none."""
    if plain_name(run_id) and _is_run_dir(root / run_id):
        return root / run_id
    return None


def find(root: Path, run_id: str) -> Path:
    """The run directory for an id or an unambiguous prefix of one."""
    exact = named(root, run_id)
    if exact is not None:
        return exact
    matches = [p for p in _run_dirs(root) if p.name.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFound(f"no run {run_id!r} under {root}/; list them with `runner runs`")
    names = ", ".join(p.name for p in matches[:5])
    raise RunNotFound(f"{run_id!r} matches several runs ({names}); give more of the id")


def list_dirs(root: Path) -> list[Path]:
    """Run directories, newest first (by job.json's time of writing)."""

    def written(p: Path) -> float:
        with contextlib.suppress(OSError):
            return (p / JOB).lstat().st_mtime
        return 0.0

    return sorted(_run_dirs(root), key=written, reverse=True)


def read_record(run_dir: Path) -> RunRecord:
    """job.json, or DamagedFile; RunNotFound when there is none."""
    path = run_dir / JOB
    try:
        return RunRecord.from_dict(files.read_json_object(path), path)
    except FileNotFoundError:
        raise RunNotFound(f"{run_dir} has no {JOB}; it is not a run directory") from None


class RunFolder:
    """A run directory opened once, without following a link, and its files read relative to
    that descriptor: a run directory swapped for a link since a caller found it (to a folder
    outside the results directory) is refused, never read, and so is a link at a file's name.
    Links above the run directory (a results folder on another disk) are the user's own and
    are followed."""

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.path, self.fd = run_dir, fd  # fd: the folder, open while the RunFolder is

    def read(self, name: str, max_bytes: int = files.MAX_RECORD_BYTES) -> bytes:
        """The bytes of the regular file `name`; FileNotFoundError when missing, DamagedFile
        when a link, not a regular file, over `max_bytes` or unreadable."""
        return files.read_bytes(self.path / name, max_bytes, dir_fd=self.fd)


@contextlib.contextmanager
def open_run(run_dir: Path) -> Iterator[RunFolder]:
    """The run directory `run_dir` as a RunFolder; RunNotFound when it is gone or not a
    folder, DamagedFile when it is a symbolic link."""
    try:
        fd = files.open_folder(run_dir, create=False)
    except files.LinkedPath:
        raise DamagedFile(run_dir, "is a symbolic link, which is never followed") from None
    except (FileNotFoundError, NotADirectoryError):
        raise RunNotFound(f"{run_dir} is not a run directory (gone, or not a folder)") from None
    except OSError as err:
        raise DamagedFile(run_dir, f"cannot be opened ({err.strerror or err})") from None
    try:
        yield RunFolder(run_dir, fd)
    finally:
        os.close(fd)


def record_in(folder: RunFolder) -> RunRecord:
    """job.json of an opened run directory, or DamagedFile; RunNotFound when there is none."""
    path = folder.path / JOB
    try:
        return RunRecord.from_dict(files.parse_json_object(path, folder.read(JOB)), path)
    except FileNotFoundError:
        raise RunNotFound(f"{folder.path} has no {JOB}; it is not a run directory") from None


def json_in(folder: RunFolder, name: str) -> Any:
    """The JSON document `name` of an opened run directory; None when there is none yet."""
    try:
        return files.parse_json(folder.path / name, folder.read(name))
    except FileNotFoundError:
        return None


def write_state(run_dir: Path, status: JobStatus) -> None:
    files.write_json(run_dir / STATE, status.to_dict())


def read_summary(run_dir: Path) -> Summary | None:
    """summary.json's record, None when there is none yet; DamagedFile when it is unusable."""
    path = run_dir / SUMMARY
    try:
        return parse_summary(files.read_json(path), path)
    except FileNotFoundError:
        return None


def read_manifest(run_dir: Path) -> Manifest | None:
    """manifest.json's record, None when there is none yet; DamagedFile when it is unusable."""
    path = run_dir / MANIFEST
    try:
        return parse_manifest(files.read_json(path), path)
    except FileNotFoundError:
        return None


def read_json_or_none(path: Path) -> Any:
    try:
        return files.read_json(path)
    except FileNotFoundError:
        return None


def missing_results(run_dir: Path, world_size: int) -> list[str]:
    """What a complete successful run has and this one lacks, as human-readable items."""
    missing = [name for name in (JOB, EVENTS, SUMMARY, MANIFEST) if not _is_file(run_dir / name)]
    missing += _missing_rank_logs(run_dir, world_size)
    if EVENTS not in missing:
        starts = stops = 0  # counted as the events stream by: memory stays flat
        for event in stream_events(run_dir / EVENTS):
            starts += event["key"] == RUN_START
            stops += event["key"] == RUN_STOP
        if starts != 1:
            missing.append(f"{EVENTS}: exactly one {RUN_START} event")
        if not stops:
            missing.append(f"{EVENTS}: a {RUN_STOP} event")
    return missing


# Rank logs named one by one in `missing_results`; past these, a count.
MAX_MISSING_LOGS_NAMED = 8


def _missing_rank_logs(run_dir: Path, world_size: int) -> list[str]:
    """The rank logs a run of `world_size` lacks, the first few by name and the rest counted:
    job.json may be hostile, and a loop over a world size of 10**12 would never end. Takes
    as many steps as there are logs present, plus the names it lists."""
    present = _rank_logs_present(run_dir, world_size)
    missing: list[str] = []
    rank = 0
    while rank < world_size and len(missing) < MAX_MISSING_LOGS_NAMED:
        if rank not in present:
            missing.append(f"{LOGS}/rank-{rank}.log")
        rank += 1
    more = world_size - len(present) - len(missing)
    if more > 0:
        missing.append(f"{LOGS}/rank-N.log of {more} more ranks")
    return missing


def _rank_logs_present(run_dir: Path, world_size: int) -> set[int]:
    """The ranks below `world_size` that have a log that is a regular file (not a link)."""
    present = set()
    with contextlib.suppress(OSError), os.scandir(run_dir / LOGS) as entries:
        for entry in entries:
            match = _RANK_LOG.fullmatch(entry.name)
            if match and int(match.group(1)) < world_size and _is_file(Path(entry.path)):
                present.add(int(match.group(1)))
    return present


_RANK_LOG = re.compile(r"rank-(0|[1-9][0-9]{0,8})\.log")


def _is_file(path: Path) -> bool:
    """A regular file, not a link to one (links are never followed)."""
    return path.is_file() and not path.is_symlink()


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and (path / JOB).exists()


def _run_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    return [p for p in entries if _is_run_dir(p)]
