"""End to end in a real headless browser: `runner dashboard` opened on a real 2-worker
cnn-digits run while it trains shows the run's curves growing, with no reload, and the page
runs under its Content-Security-Policy without a console error; a worker killed under it
turns the page to FAILED with the reason and the failed rank's log; a run started while the
table is open appears in it; a run deleted while its page or the table is open (or while the
dashboard restarted) is said to be gone, never shown as it last was. Pages of finished runs
are in test_browser_pages.py, filtering and grouping in test_browser_grouping.py."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket

import psutil
import pytest

from runner import api
from runner.errors import RunNotFound
from tests.conftest import submit_local
from tests.runner.dashboard.browser import (
    chart_points,
    console_errors,
    dashboard_process,
    hover,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Long enough to watch (about 0.3 s an epoch on 2 idle cores, more on a busy machine); the
# test cancels the run as soon as it has seen the curve grow.
EPOCHS = 200
# The live page's run: the target is met within a few epochs, and the rest leaves time to
# read the live figures before the run ends with its summary.
LIVE_EPOCHS = 40


def figure(driver, name: str) -> float | None:
    """The number a headline tile of the run page shows (its data-value), None when none."""
    tiles = driver.find_elements("css selector", f"[data-figure='{name}']")
    value = tiles[0].get_attribute("data-value") if tiles else ""
    return float(value) if value else None


HEADLINE = ("time_to_target", "throughput", "step_time", "communication_share")
SUMMARY_FIELDS = {
    "time_to_target": "time_to_target_s",
    "throughput": "throughput_samples_per_s",
    "step_time": "step_time_ms",
    "communication_share": "communication_share",
}


def test_the_run_page_shows_a_live_run_and_its_headline_as_the_summary_will(tmp_path, browser):
    # Its tiles stayed "-" while the run trained, even once the target was met.
    results = tmp_path / "results"
    results.mkdir()
    run = submit_local(results, [f"max_epochs={LIVE_EPOCHS}", "stop_at_target=false"], workers=2)
    try:
        with dashboard_process(results) as url:
            browser.get(f"{url}#/run/{run.run_id}")
            browser.execute_script("window.notReloaded = true")
            first = wait_for(lambda: max(chart_points(browser, "loss"), 0), 120, "a loss point")
            live = wait_for(lambda: browser.find_element("css selector", ".state").text
                            == "RUNNING" and figure(browser, "time_to_target"), 120,
                            "the time to target while the run trains")  # fmt: skip
            assert browser.find_element("css selector", ".state").text == "RUNNING"
            shown = {name: figure(browser, name) for name in HEADLINE}
            assert all(v is not None and v > 0 for v in shown.values()), shown
            wait_for(lambda: chart_points(browser, "loss") >= first + 3, 120, "more loss points")
            assert chart_points(browser, "quality") >= first  # the quality curve grows too
            assert browser.execute_script("return window.notReloaded") is True
            hover(browser, "quality")  # a tooltip must draw within the page's policy too
            wait_for(lambda: browser.find_element("css selector", ".state").text == "SUCCEEDED",
                     120, "the page to show the run succeeded")  # fmt: skip
            summary = json.loads((run.run_dir / "summary.json").read_text())
            # The live time to target is the summary's, to the last bit; once the summary is
            # there the tiles are its figures (throughput, step time and communication share
            # of the whole run, where the live ones were the last epoch's).
            assert live == summary["time_to_target_s"]
            wait_for(lambda: figure(browser, "throughput") == summary["throughput_samples_per_s"],
                     30, "the summary's figures")  # fmt: skip
            assert {n: figure(browser, n) for n in HEADLINE} == {
                n: summary[f] for n, f in SUMMARY_FIELDS.items()
            }
            # The log pane reads as `runner logs` does: no raw event lines.
            log = browser.find_element("css selector", "pre.log").text
            assert ":::MLLOG" not in log and "eval_accuracy 0." in log, log[-2000:]
            assert console_errors(browser) == []
    finally:
        api.cancel(results, run)  # idempotent; nothing outlives the test


def kill_rank(run, rank: int) -> None:
    """SIGKILL the worker process of `rank` (found by its RANK, under the run's supervisor)."""
    info = json.loads((run.run_dir / "supervisor.json").read_text())
    for proc in psutil.Process(info["pid"]).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            train = "workloads.train" in " ".join(proc.cmdline())
            if train and proc.environ().get("RANK") == str(rank):
                proc.kill()
                return
    raise AssertionError(f"no process of rank {rank}")


def test_a_run_killed_while_open_shows_why_and_the_failed_ranks_log(tmp_path, browser):
    results = tmp_path / "results"
    results.mkdir()
    run = submit_local(results, [f"max_epochs={EPOCHS}", "stop_at_target=false"], workers=2)
    try:
        with dashboard_process(results) as url:
            browser.get(f"{url}#/run/{run.run_id}")
            wait_for(lambda: chart_points(browser, "loss") > 0, 120, "a loss point")
            kill_rank(run, 1)  # a real fault: kill -9 one worker
            reason = wait_for(lambda: browser.find_elements("css selector", "#reason"), 60,
                              "the failure's reason")[0]  # fmt: skip
            assert "rank 1" in reason.text and "SIGKILL" in reason.text
            reason.find_element("css selector", "button").click()
            log = browser.find_element("css selector", "pre.log")
            assert log.get_attribute("data-log") == "rank-1.log"
            assert browser.current_url.endswith(f"#/run/{run.run_id}")  # still this page
    finally:
        api.cancel(results, run)


def cancel_unless_gone(results, run) -> None:
    """Nothing outlives the test: cancelled (and waited for) before its directory went."""
    with contextlib.suppress(RunNotFound):
        api.cancel(results, run)


def test_a_run_deleted_while_its_page_and_the_table_are_open_leaves_both(tmp_path, browser):
    results = tmp_path / "results"
    results.mkdir()
    run = submit_local(results, [f"max_epochs={EPOCHS}", "stop_at_target=false"], workers=1)
    try:
        with dashboard_process(results) as url:
            browser.get(f"{url}#/run/{run.run_id}")
            wait_for(lambda: chart_points(browser, "loss") > 0, 120, "a loss point")
            page = browser.current_window_handle
            browser.switch_to.new_window("window")
            browser.get(url)
            row = f"tr[data-run='{run.run_id}']"
            wait_for(lambda: "RUNNING" in browser.find_element("css selector", row).text, 60,
                     "the run's row, RUNNING")  # fmt: skip
            api.cancel(results, run)
            shutil.rmtree(run.run_dir)
            wait_for(lambda: not browser.find_elements("css selector", row), 30, "the row gone")
            browser.switch_to.window(page)
            wait_for(lambda: "no longer in the results directory" in browser.page_source, 30,
                     "the run page to say the run is gone")  # fmt: skip
            assert not browser.find_elements("css selector", ".state")  # no stale RUNNING
            assert console_errors(browser) == []
    finally:
        cancel_unless_gone(results, run)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_run_gone_while_the_dashboard_restarted_is_not_shown_as_running(tmp_path, browser):
    # The page's stream reconnects to the restarted dashboard, which refuses it (404: no such
    # run); the browser never retries an HTTP error, and the page kept the run's last state,
    # RUNNING, with "reconnecting…" forever.
    results = tmp_path / "results"
    results.mkdir()
    run = submit_local(results, [f"max_epochs={EPOCHS}", "stop_at_target=false"], workers=1)
    port = free_port()
    try:
        with dashboard_process(results, port) as url:
            browser.get(f"{url}#/run/{run.run_id}")
            wait_for(lambda: chart_points(browser, "loss") > 0, 120, "a loss point")
            assert browser.find_element("css selector", ".state").text == "RUNNING"
        api.cancel(results, run)
        shutil.rmtree(run.run_dir)
        with dashboard_process(results, port):
            wait_for(lambda: f"no run {run.run_id!r}" in browser.page_source, 30,
                     "the run page to say the run is gone")  # fmt: skip
            assert not browser.find_elements("css selector", ".state")
    finally:
        cancel_unless_gone(results, run)


def test_the_runs_table_lists_a_run_that_starts_while_it_is_open(tmp_path, browser):
    results = tmp_path / "results"
    results.mkdir()
    with dashboard_process(results) as url:
        browser.get(url)
        wait_for(lambda: "No runs" in browser.page_source, 30, "the empty table")
        run = submit_local(results, ["max_epochs=1"], workers=1)
        try:
            row = f"tr[data-run='{run.run_id}']"
            wait_for(lambda: browser.find_elements("css selector", row), 60, "the new run's row")
            state = api.wait(results, run).state.value
            wait_for(
                lambda: state in browser.find_element("css selector", row).text,
                30, f"the row to show the run {state}",
            )  # fmt: skip
        finally:
            api.cancel(results, run)
        assert console_errors(browser) == []
