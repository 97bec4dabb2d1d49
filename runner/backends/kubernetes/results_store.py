"""Copying a run's result files (events.jsonl, summary.json, manifest.json) from a stack's
results store into its run directory: `file:///dir` directly, `gs://` with the gcloud CLI,
`s3://` with the aws CLI (whichever the user already has, logged in, for that cloud).

The workload writes `<store>/<run-id>/<file>`; a file the store lacks is simply not copied
(the caller rebuilds it from the logs or reports it missing). Every write is atomic.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from runner.errors import RunnerError
from runner.results.rundir import EVENTS, MANIFEST, SUMMARY

log = logging.getLogger(__name__)
RESULT_FILES = (EVENTS, SUMMARY, MANIFEST)
COPY_TIMEOUT_S = 300.0
CLOUD_CLIS = {
    "gs": ("gcloud", ["storage", "cp"], "https://cloud.google.com/sdk/docs/install"),
    "s3": ("aws", ["s3", "cp", "--only-show-errors"], "https://aws.amazon.com/cli/"),
}


def fetch_results(store: str, run_id: str, dest: Path) -> list[str]:
    """Copy what the store has of the run into dest; returns the names copied."""
    scheme, _, rest = store.partition("://")
    copied = []
    for name in RESULT_FILES:
        tmp = _temp_beside(dest / name)
        try:
            if scheme == "file":
                found = _copy_local(Path(rest) / run_id / name, tmp)
            else:
                found = _copy_cloud(scheme, f"{store.rstrip('/')}/{run_id}/{name}", tmp)
            if found:
                os.replace(tmp, dest / name)
                copied.append(name)
        finally:
            tmp.unlink(missing_ok=True)
    return copied


def _copy_local(src: Path, tmp: Path) -> bool:
    if not src.is_file():
        return False
    shutil.copyfile(src, tmp)
    return True


def _copy_cloud(scheme: str, uri: str, tmp: Path) -> bool:
    tool, args, install = CLOUD_CLIS[scheme]
    exe = shutil.which(tool)
    if exe is None:
        raise RunnerError(f"reading {uri} needs the {tool} CLI, which is not on PATH ({install})")
    try:
        done = subprocess.run(
            [exe, *args, uri, str(tmp)], capture_output=True, text=True, timeout=COPY_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise RunnerError(f"copying {uri} took over {COPY_TIMEOUT_S:.0f} s") from None
    if done.returncode == 0:
        return True
    error = done.stderr.strip()
    if "404" in error or "No such object" in error or "does not exist" in error.lower():
        return False
    raise RunnerError(f"`{tool} {' '.join(args)} {uri}` failed: {error or done.returncode}")


def _temp_beside(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    return Path(name)
