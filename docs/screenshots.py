"""Take the README's dashboard screenshots with Debian's headless chromium.

    PYTHONPATH=. .venv/bin/python docs/screenshots.py RESULTS_DIR

RESULTS_DIR must hold a finished study with runs on 2 workers; the README's is fixed against
adaptive batch size (`runner sweep cnn-digits --workers 2 --runs 3 --set policy=none,batch
--set batch_size=4 --set lr=0.01 --set strategy=allreduce --set monitor_interval_steps=5`).
The script starts one more cnn-digits run on 2 workers under the batch policy, so that the
table and the run page show a run training, its batch decisions marked on its curves, and
the comparison sets it beside one of the study's; it serves RESULTS_DIR with `runner dashboard`
and writes docs/dashboard-{runs,run,compare,study}.png, then cancels its run. Needs chromium,
chromium-driver and selenium (tests/runner/dashboard/browser.py).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from runner import api
from runner.backends.local.backend import LocalBackend
from runner.dashboard import reports
from runner.job.spec import Placement, resolve
from tests.runner.dashboard.browser import chart_points, chromium, dashboard_process, missing

DOCS = Path(__file__).parent
WIDTH = 1400


def wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s} s")
        time.sleep(0.5)


def shoot(driver, url: str, name: str, ready, height: int | None = None) -> None:
    driver.get(url)
    wait_for(ready, 120)
    time.sleep(1.5)  # let the charts settle
    full = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WIDTH, height or full)
    time.sleep(1.0)
    path = DOCS / f"dashboard-{name}.png"
    driver.save_screenshot(str(path))
    print(f"wrote {path}")


def study_run(root: Path, study_id: str, workers: int) -> str:
    """The first run of the study on `workers` workers."""
    study = reports.load_study_record(root, study_id)
    for planned in study.runs:
        if planned.run_id and planned.workers == workers:
            return planned.run_id
    raise SystemExit(f"{study_id} has no run on {workers} workers")


def main(root: Path) -> None:
    reason = missing()
    if reason:
        raise SystemExit(reason)
    studies = [s for s in reports.list_studies(root) if s.get("state") == "complete"]
    if not studies:
        raise SystemExit(f"no finished study in {root}; run a sweep first (see the docstring)")
    study_id = studies[0]["study_id"]
    # 15 epochs: long enough to watch. The batch at most 4-fold: grown 16-fold, the linear LR
    # rule with it, the run diverged (at epoch 20 on a busy machine, at 13 on an idle one,
    # before the last screenshot: recorded FAILED, as it should be, but not what to show).
    overrides = ["policy=batch", "batch_size=4", "lr=0.01", "strategy=allreduce",
                 "monitor_interval_steps=5", "max_global_batch=32", "max_epochs=15",
                 "stop_at_target=false"]  # fmt: skip
    spec = resolve("cnn-digits", overrides, Placement(procs_per_node=2))
    run = api.submit(spec, LocalBackend(root), root, "local")
    try:
        with (
            tempfile.TemporaryDirectory() as profile,
            dashboard_process(root) as url,
            chromium(Path(profile), WIDTH, 900) as driver,
        ):
            live = f"{url}#/run/{run.run_id}"
            driver.get(live)
            # Until the batch has grown (a decision to mark) and the target is met (live tiles).
            wait_for(lambda: chart_points(driver, "loss") >= 6
                     and driver.find_elements("css selector", "[data-decisions]"), 600)  # fmt: skip
            shoot(driver, url, "runs", lambda: driver.find_elements("css selector", "tr.run-row"),
                  height=900)  # fmt: skip
            driver.set_window_size(WIDTH, 900)
            shoot(driver, live, "run", lambda: chart_points(driver, "loss") >= 6, height=1950)
            driver.set_window_size(WIDTH, 900)
            pair = f"{study_run(root, study_id, 2)},{run.run_id}"
            shoot(driver, f"{url}#/compare/{pair}", "compare",
                  lambda: chart_points(driver, "quality") > 0, height=1500)  # fmt: skip
            driver.set_window_size(WIDTH, 900)
            shoot(driver, f"{url}#/study/{study_id}", "study",
                  lambda: chart_points(driver, "speedup") > 0, height=2300)  # fmt: skip
    finally:
        api.cancel(root, run)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
