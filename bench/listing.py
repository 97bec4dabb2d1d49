"""How long listing runs takes at scale: `runner runs` and the dashboard's first page over
N run directories (10,000 by default), against listing the directory alone (`ls`).

The run directories are copies of one real run (cnn-digits, 1 worker, 1 epoch, made first),
each with its own id in job.json, as a sweep leaves them. Measured, in rounds that rotate
which goes first:
- `ls RESULTS` (what listing the folder costs, the floor);
- `runner runs` cold (the run index deleted first: every record read) and warm (the index
  left by the previous listing: no record read);
- the dashboard's first page (`/api/runs`: the newest 100 runs, filtered and sorted over all
  of them on the server, runner/dashboard/paging.py): a server started fresh, from the
  request to the last byte of the answer, warm (its index on disk from an earlier server).
Issue 33's goals: `runner runs` warm and the dashboard's first page under 1 s at 10,000 runs;
each is printed with its ratio to `ls` of the same folder.
Each is given in wall time and in CPU time (user + system of the command, or of the server
while it answered), which other work on a shared machine disturbs far less than wall time.
A speed benchmark, not a test.

Usage: python bench/listing.py [--runs 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

RUNNER = str(Path(sys.executable).with_name("runner"))
INDEXES = (".stackbench-index-runs.json", ".stackbench-index-dashboard.json")


def make_runs(root: Path, count: int) -> None:
    """One real run, then `count` copies of it with their own ids (the original removed)."""
    subprocess.run(
        [RUNNER, "--results-dir", str(root), "submit", "cnn-digits", "--workers", "1",
         "--set", "max_epochs=1"], check=True, capture_output=True,
    )  # fmt: skip
    (template,) = [p for p in root.iterdir() if p.is_dir()]
    job = json.loads((template / "job.json").read_text())
    for i in range(count):
        name = f"cnn-digits-20260101-{i:06d}-bench"
        shutil.copytree(template, root / name, ignore=shutil.ignore_patterns("job.json"))
        copy = job | {"run_id": name, "handle": f"local://{name}"}
        (root / name / "job.json").write_text(json.dumps(copy))
    shutil.rmtree(template)


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def runs_cold(root: Path) -> tuple[float, float]:
    (root / INDEXES[0]).unlink(missing_ok=True)
    return timed([RUNNER, "--results-dir", str(root), "runs"])


def dashboard_first_page(root: Path) -> tuple[float, float]:
    """A fresh server's first /api/runs (its index on disk from an earlier one): (wall s,
    the server's CPU s while it answered)."""
    import psutil

    proc = subprocess.Popen(
        [RUNNER, "--results-dir", str(root), "dashboard", "--port", "0"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split(" at ")[1].split(";")[0].strip()
        server = psutil.Process(proc.pid)
        cpu0, t0 = sum(server.cpu_times()[:2]), time.perf_counter()
        with urllib.request.urlopen(url + "api/runs", timeout=600) as response:
            data = response.read()
        elapsed, cpu = time.perf_counter() - t0, sum(server.cpu_times()[:2]) - cpu0
        page = json.loads(data)
        assert page["total"] == sum(1 for p in root.iterdir() if p.is_dir()), page["total"]
        assert len(page["rows"]) == min(page["total"], page["limit"])
        return elapsed, cpu
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, "results")
        make_runs(root, args.runs)
        sides = {
            "ls": lambda: timed(["ls", str(root)]),
            "runner runs, cold": lambda: runs_cold(root),
            "runner runs, warm": lambda: timed([RUNNER, "--results-dir", str(root), "runs"]),
            "dashboard first page, warm": lambda: dashboard_first_page(root),
        }
        dashboard_first_page(root)  # its index, as an earlier server leaves it
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        names = list(sides)
        for i in range(args.rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                if name == "runner runs, warm":  # after a listing, whatever went before
                    timed([RUNNER, "--results-dir", str(root), "runs"])
                times[name].append(sides[name]())
    medians = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    first = "dashboard first page, warm"
    print(json.dumps({
        "runs": args.runs,
        "dashboard_first_page_s": round(medians[first], 3),
        "dashboard_first_page_cpu_s": round(cpu[first], 3),
        "dashboard_first_page_ratio_to_ls": round(medians[first] / medians["ls"], 1),
        "median_wall_s": {k: round(v, 3) for k, v in medians.items()},
        "median_cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "wall_ratio_to_ls": {k: round(v / medians["ls"], 1) for k, v in medians.items()
                             if k != "ls"},
        "per_round_wall_cpu_s": {k: [[round(w, 3), round(c, 3)] for w, c in v]
                                 for k, v in times.items()},
        "goal_s": 1.0,
        "met_by_wall": {k: medians[k] < 1.0 for k in ("runner runs, warm",
                                                       "dashboard first page, warm")},
        "rounds": args.rounds, "logical_cpus": os.cpu_count(),
        "load_average_1m_at_end": os.getloadavg()[0],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
