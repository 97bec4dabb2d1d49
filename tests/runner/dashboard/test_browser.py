"""End to end in a real headless browser: `runner dashboard` opened on a real 2-worker
cnn-digits run while it trains shows the run's curves growing, with no reload, and the page
runs under its Content-Security-Policy without a console error; a worker killed under it
turns the page to FAILED with the reason and the failed rank's log; a run started while the
table is open appears in it; a run deleted while its page, the table or a comparison is open
(or while the dashboard restarted) is said to be gone, never shown as it last was."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time

import psutil
import pytest

from runner import api
from runner.errors import RunNotFound
from tests.conftest import submit_local
from tests.runner.dashboard.browser import (
    chart_points,
    chromium,
    console_errors,
    dashboard_process,
    missing,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Long enough to watch (about 0.3 s an epoch on 2 idle cores, more on a busy machine); the
# test cancels the run as soon as it has seen the curve grow.
EPOCHS = 200
# The live page's run: the target is met within a few epochs, and the rest leaves time to
# read the live figures before the run ends with its summary.
LIVE_EPOCHS = 40


def wait_for(condition, timeout_s: float, what: str):
    """As selenium's WebDriverWait: an element not there yet (the runs table comes a page at
    a time, after the page) or replaced while read (the table re-rendered) is asked again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (NoSuchElementException, StaleElementReferenceException):
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def hover(driver, chart: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    element = driver.find_element("css selector", f"[data-chart='{chart}']")
    ActionChains(driver).move_to_element(element).perform()
    time.sleep(0.5)


@pytest.fixture
def browser(tmp_path):
    reason = missing()
    if reason:
        pytest.skip(reason)
    with chromium(tmp_path / "profile") as driver:
        yield driver


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


def choose(driver, select: str, text: str) -> None:
    """Picks the option shown as `text` of the <select> at CSS `select` (Preact sets an
    option's value as a property, which Selenium's by-value lookup does not see)."""
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("css selector", select)).select_by_visible_text(text)


def chart_option(driver, chart: str, script: str):
    """`script` run on chart `chart`'s option (`o`)."""
    return driver.execute_script(
        "const el = document.querySelector(`[data-chart='${arguments[0]}']`);"
        f"const o = window.echarts.getInstanceByDom(el).getOption(); return {script};",
        chart,
    )


def test_an_adaptive_runs_page_draws_its_decisions_knobs_and_noise_scale(tmp_path, browser):
    from contract.events import read_events
    from runner.results.eventtext import event_text

    results = tmp_path / "results"
    results.mkdir()
    # A small starting batch, so that the noise scale soon exceeds it and the batch grows.
    sets = ["policy=batch", "batch_size=4", "lr=0.01", "max_epochs=2", "stop_at_target=false",
            "strategy=allreduce", "monitor_interval_steps=5"]  # fmt: skip
    run = submit_local(results, sets, workers=2)
    try:
        assert api.wait(results, run).state.value == "SUCCEEDED"
        events = read_events(run.run_dir / "events.jsonl")
        start_ms = next(e["time_ms"] for e in events if e["key"] == "run_start")
        stop_s = (next(e["time_ms"] for e in events if e["key"] == "run_stop") - start_ms) / 1000
        decisions = [e for e in events if e["key"] == "stackbench_decision"]
        moments = sorted({(e["time_ms"] - start_ms) / 1000 for e in decisions})
        assert moments, "the batch never grew: nothing to draw"
        with dashboard_process(results) as url:
            browser.get(f"{url}#/run/{run.run_id}")
            wait_for(lambda: chart_points(browser, "adaptive", 0) > 2, 60, "the batch series")
            assert chart_points(browser, "adaptive", 1) > 2  # B_noise beside it
            # The knobs' series run from the run's start to its end (not from the first
            # change to the last).
            for chart in ("workers", "adaptive"):
                first, last = chart_option(
                    browser,
                    chart,
                    "[o.series[0].data[0], o.series[0].data[o.series[0].data.length - 1]]",
                )
                assert first[0] == 0 and last[0] == pytest.approx(stop_s, abs=1e-3), chart
            # Each moment of decision a marker, its reason on hover.
            marks = chart_option(browser, "loss", "o.series[0].markLine.data.map("
                                 "(m) => [m.xAxis, m.emphasis.label.formatter()])")  # fmt: skip
            assert [m[0] for m in marks] == pytest.approx(moments, abs=1e-3)
            assert decisions[0]["value"]["reason"] in marks[0][1]
            assert "evidence" in decisions[0]["value"]  # what the policy acted on
            # The log pane: `runner logs`' own lines, the decisions among them.
            log = browser.find_element("css selector", "pre.log").text.splitlines()
            assert event_text(decisions[0], start_ms) in log
            # Epochs on the x axis: the loss (one point an epoch) at epochs 1 and 2.
            choose(browser, "select[data-control='x']", "epoch")
            wait_for(lambda: chart_option(browser, "loss", "o.xAxis[0].name") == "epoch", 10,
                     "the epoch axis")  # fmt: skip
            xs = chart_option(browser, "loss", "o.series[0].data.map((p) => p[0])")
            # A point sits where the run's clock puts its event's time: an epoch's loss is
            # logged a few ms before that epoch's end anchor on a busy machine (0.9993 in CI).
            assert xs == pytest.approx([1, 2], abs=0.01)
            hover(browser, "adaptive")
            assert console_errors(browser) == []
    finally:
        api.cancel(results, run)


def tooltip_text(driver, chart: str) -> list[str]:
    """The pieces of text the tooltip of chart `chart` draws now: a richText tooltip is a text
    element at the top of the chart's scene (legends and axes sit in groups below it), drawn
    as one span per piece of its markup."""
    return driver.execute_script(
        "const el = document.querySelector(`[data-chart='${arguments[0]}']`);"
        "const roots = window.echarts.getInstanceByDom(el).getZr().storage.getRoots();"
        "return roots.filter((e) => e.type === 'text' && e.childrenRef)"
        "  .flatMap((e) => e.childrenRef()).map((span) => String(span.style.text || ''));",
        chart,
    )  # fmt: skip


def test_a_study_labelled_with_chart_markup_shows_it_as_text(tmp_path, browser):
    # A study's series are named by --set values, which job.json may hold as anything: a
    # richText tooltip read `{marker0|}` in one as markup (a coloured dot, the text gone).
    from runner.results import study
    from tests.runner.rundirs import make_run

    results = tmp_path / "results"
    results.mkdir()
    planned = []
    # `}` ended ECharts' own `{style|name}` span early: `{a}b` showed as `{a` and `b}`.
    notes = ("{a}b", "{b}{marker0|}forged")
    for workers in (1, 2):
        for i, note in enumerate(notes):
            run_id = f"run-{workers}-{i}"
            run_dir = make_run(results, run_id, workers, 10.0 / workers)
            job = json.loads((run_dir / "job.json").read_text())
            (run_dir / "job.json").write_text(json.dumps(job | {"overrides": [["note", note]]}))
            planned.append(study.PlannedRun(workers, (("note", note),), 0, 0, run_id, "SUCCEEDED"))
    record = study.Study("study-x", "cnn-digits", (1, 2), {"note": notes}, (), 1, "local",
                         tuple(planned), state="complete")  # fmt: skip
    study.save(results, record)
    with dashboard_process(results) as url:
        browser.get(f"{url}#/study/study-x")
        wait_for(lambda: chart_points(browser, "speedup") > 0, 60, "the speedup chart")
        hover(browser, "speedup")  # the tooltip names every series at the nearest count
        drawn = wait_for(lambda: "".join(tooltip_text(browser, "speedup")), 10, "the tooltip")
        # Shown, not drawn as a marker (a zero-width space after the brace keeps it text).
        assert "{marker0|" in drawn.replace("\u200b", "") and "forged" in drawn, drawn
        for chart in ("speedup", "compute_communication"):  # value and category axes
            hover(browser, chart)
            pieces = wait_for(lambda: tooltip_text(browser, chart), 10, f"{chart}'s tooltip")  # noqa: B023
            assert any(p.strip().startswith("note={a}b") for p in pieces), pieces
        assert console_errors(browser) == []


def test_no_link_on_a_run_page_leads_to_an_error(tmp_path, browser):
    # The page linked every regular file and made a log tab of every log, while the server
    # serves only plain names (no hidden files, spaces, `<`, bytes that are not UTF-8) under
    # its size cap: a user clicked a link to a 404. And a rank's log not written yet had a
    # download link too.
    from tests.runner.dashboard.conftest import get
    from tests.runner.rundirs import make_run

    results = tmp_path / "results"
    results.mkdir()
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    (run_dir / "logs" / "rank-0.log").write_text("step 1\n")  # rank-1.log: none yet
    for name in (".hidden", "a b.txt", "x<y>.txt", "logs/bad name.log", "logs/.x.log"):
        (run_dir / name).write_text("text\n")
    os.close(os.open(bytes(run_dir) + b"/caf\xe9.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    os.truncate(os.open(run_dir / "huge.bin", os.O_CREAT | os.O_WRONLY, 0o644), 65 << 20)
    with dashboard_process(results) as url:
        browser.get(f"{url}#/run/cnn-a")
        wait_for(lambda: browser.find_elements("css selector", "table.files"), 60, "the files")
        hrefs = browser.execute_script(
            "return [...document.querySelectorAll('a[href]')].map((a) => a.href)"
            "  .filter((h) => !h.includes('#'));"
        )
        tabs = [t.text for t in browser.find_elements("css selector", "#log .tab")]
        files_text = browser.find_element("css selector", "table.files").text
        assert console_errors(browser) == []
        statuses = {href: get(href)[0] for href in hrefs}
    assert tabs == ["rank-0.log", "rank-1.log"], tabs
    assert statuses and all(s == 200 for s in statuses.values()), statuses
    assert sum(1 for h in hrefs if "rank-0.log" in h) == 3  # open, download; the tab's
    assert not any("rank-1.log" in h or "hidden" in h or "huge" in h for h in hrefs), hrefs
    assert "a b.txt" in files_text and "not served" in files_text
    assert "too large to serve" in files_text


def test_a_comparison_whose_run_is_deleted_says_so_rather_than_showing_it(tmp_path, browser):
    # The stream said the run was gone, the page had no ear for it: the comparison went on
    # showing the deleted run's figures and configuration as if it were there.
    from tests.runner.rundirs import make_run

    results = tmp_path / "results"
    results.mkdir()
    make_run(results, "a", 1, 10.0)
    make_run(results, "b", 2, 6.0)
    with dashboard_process(results) as url:
        browser.get(f"{url}#/compare/a,b")
        wait_for(lambda: "Comparing 2 runs" in browser.page_source, 60, "the comparison")
        shutil.rmtree(results / "b")
        wait_for(lambda: "no run 'b'" in browser.page_source, 30, "the page to say b is gone")
        assert "Comparing 2 runs" not in browser.page_source


def policy_and_strategy_arms(results) -> list[str]:
    """Four runs of 2 workers (policy none/batch x two strategies; every other one on a
    25mbit link) and the study of them, written by hand; their ids."""
    from runner.results import study
    from tests.runner.rundirs import make_run

    arms = [("none", "allreduce"), ("batch", "allreduce"), ("none", "allreduce-per-param"),
            ("batch", "allreduce-per-param")]  # fmt: skip
    ids, planned = [], []
    for i, (policy, strategy) in enumerate(arms):
        run_id = f"cnn-digits-20260101-00000{i}-{i}a1b2c-{strategy}-{policy}"
        run_dir = make_run(results, run_id, 2, 10.0 + i,
                           overrides=(f"policy={policy}", f"strategy={strategy}"))  # fmt: skip
        job = json.loads((run_dir / "job.json").read_text())
        job["placement"]["link"] = "25mbit" if i % 2 else None
        (run_dir / "job.json").write_text(json.dumps(job))
        ids.append(run_id)
        sets = (("policy", policy), ("strategy", strategy))
        planned.append(study.PlannedRun(2, sets, 0, 0, run_id, "SUCCEEDED"))
    record = study.Study("study-keys", "cnn-digits", (2,), {"policy": ("none", "batch"),
                         "strategy": ("allreduce", "allreduce-per-param")}, (), 1, "local",
                         tuple(planned), state="complete")  # fmt: skip
    study.save(results, record)
    return ids


def test_any_configuration_key_filters_groups_and_labels_without_overlap(tmp_path, browser):
    # The link and the policy were in neither the table nor a filter; compare and study
    # legends of full run ids were cut and paged, and their x labels drawn over each other.
    from tests.runner.dashboard.browser import text_overlaps
    from tests.runner.rundirs import env_manifest, make_run

    results = tmp_path / "results"
    results.mkdir()
    ids = policy_and_strategy_arms(results)

    def runs_shown() -> list[str]:  # read at once: a filter's answer draws the rows again
        return sorted(browser.execute_script(
            "return [...document.querySelectorAll('tr.run-row')].map((r) => r.dataset.run)"
        ))  # fmt: skip

    with dashboard_process(results) as url:
        browser.get(url)
        wait_for(lambda: len(runs_shown()) == 4, 60, "the runs")
        links = [c.text for c in browser.find_elements("css selector", "td[data-key='link']")]
        assert sorted(links) == ["25mbit", "25mbit", "unshaped", "unshaped"]
        search = browser.find_element("css selector", "input[type=search]")
        search.send_keys("policy=batch 25mbit")
        wait_for(lambda: runs_shown() == [ids[1], ids[3]], 10, "the filtered runs")
        search.clear()
        choose(browser, "select[aria-label='group by']", "group by strategy")
        groups = ("return [...document.querySelectorAll('tbody[data-group]')]"
                  ".map((g) => g.dataset.group)")  # fmt: skip
        wait_for(lambda: browser.execute_script(groups) == ["allreduce", "allreduce-per-param"],
                 30, "the groups, from the server")  # fmt: skip
        choose(browser, "select[aria-label='add a column']", "batch_size")
        # A key every run shares comes once (runner/dashboard/shared.py) and is put back.
        cells = browser.find_elements("css selector", "td[data-key='batch_size']")
        assert cells and {c.text for c in cells} == {"32"}
        pages = {f"#/compare/{','.join(ids)}": ("loss", "quality", "phases"),
                 "#/study/study-keys": ("speedup", "time_to_accuracy", "compute_communication",
                                        "curves")}  # fmt: skip
        for page, charts in pages.items():
            browser.get(f"{url}{page}")
            wait_for(lambda c=charts: chart_points(browser, c[-1]) > 0, 60, f"{page}'s charts")
            for width in (1400, 800):
                browser.set_window_size(width, 1000)
                time.sleep(0.5)  # the charts follow the resize on the next frame
                for chart in charts:
                    assert text_overlaps(browser, chart) == [], (page, width, chart)
            browser.set_window_size(1400, 1000)
        browser.get(f"{url}#/compare/{','.join(ids)}")
        wait_for(lambda: chart_points(browser, "loss") > 0, 60, "the comparison")
        names = chart_option(browser, "loss", "o.series.map((s) => s.name)")
        assert all(len(n) <= 26 for n in names) and len(set(names)) == 4, names
        full = chart_option(browser, "loss", "o.series.map((s) => "
                            "o.legend[0].tooltip.formatter({ name: s.name }))")  # fmt: skip
        assert full == ids
        # A run of a plugin's code: its name@version a column by default (source hash on
        # hover) and named in its page's header.
        plugin = {"name": "topk-example", "version": "0.1.0", "source_sha256": "ab12" * 16,
                  "origin": "topk-example==0.1.0", "load": None}  # fmt: skip
        make_run(results, "plug", 2, 9.0, created_at="2026-01-02T00:00:00+00:00",
                 manifest=env_manifest("plug", 2) | {"plugins": [plugin]})  # fmt: skip
        browser.get(url)
        cell = "tr[data-run='plug'] td[data-key='plugin']"
        wait_for(lambda: browser.find_elements("css selector", cell), 30, "the plugin's column")
        shown = browser.find_element("css selector", cell)
        assert shown.text == "topk-example@0.1.0"
        assert "sha256 ab12ab12ab12" in shown.get_attribute("title")
        browser.get(f"{url}#/run/plug")
        wait_for(lambda: browser.find_elements("css selector", "[data-plugin]"), 30, "its header")
        named = browser.find_element("css selector", "[data-plugin]")
        assert named.text == "topk-example@0.1.0" and "ab12" in named.get_attribute("title")
        assert console_errors(browser) == []


def no_overlaps_at_both_widths(driver, charts: tuple[str, ...]) -> None:
    """No chart of `charts` draws a text over another at 1400 px wide, nor at 800 px."""
    from tests.runner.dashboard.browser import text_overlaps

    for width in (1400, 800):
        driver.set_window_size(width, 1000)
        time.sleep(0.5)  # the charts follow the resize on the next frame
        for chart in charts:
            assert text_overlaps(driver, chart) == [], (width, chart)
    driver.set_window_size(1400, 1000)


def test_compare_and_study_pages_group_runs_by_any_configuration_key(tmp_path, browser):
    # The runs table and `runner report --group-by` grouped by any key; the comparison and
    # the study page only by run or by what the runs varied in.
    results = tmp_path / "results"
    results.mkdir()
    ids = policy_and_strategy_arms(results)
    with dashboard_process(results) as url:
        browser.get(f"{url}#/compare/{','.join(ids)}")
        wait_for(lambda: chart_points(browser, "loss") > 0, 60, "the comparison")
        choose(browser, "select[aria-label='group by']", "group by policy")
        heads = wait_for(lambda: browser.find_elements("css selector", "th[data-group]"), 10,
                         "the table's group header")  # fmt: skip
        assert [(h.text, h.get_attribute("colspan")) for h in heads] == [
            ("batch", "2"),
            ("none", "2"),
        ]
        lines = chart_option(browser, "loss", "o.series.map((s) => [s.name, s.itemStyle.color,"
                             " o.legend[0].tooltip.formatter({ name: s.name })])")  # fmt: skip
        names, colours, full = zip(*lines, strict=True)
        # Group by group, each named by its value first, short and unique; a group's colour.
        assert [n.split(":")[0] for n in names] == ["batch", "batch", "none", "none"], names
        assert all(len(n) <= 26 for n in names) and len(set(names)) == 4, names
        assert colours[0] == colours[1] != colours[2] == colours[3], colours
        assert list(full) == [ids[1], ids[3], ids[0], ids[2]]  # the whole id on hover
        columns = browser.find_elements(
            "css selector", "table.compare thead tr:last-child th[title]"
        )
        assert [c.get_attribute("title") for c in columns] == list(full)
        no_overlaps_at_both_widths(browser, ("loss", "quality", "phases"))

        browser.get(f"{url}#/study/study-keys")
        wait_for(lambda: chart_points(browser, "speedup") > 0, 60, "the study's charts")
        # The report's series by policy (each policy one division here: never split by it).
        choose(browser, "select[aria-label='group by']", "group by policy")
        policies = ["policy=batch", "policy=none", "ideal"]
        names = "o.series.filter(Boolean).map((s) => s.name)"  # a series replaced leaves a null
        wait_for(lambda: chart_option(browser, "speedup", names) == policies, 30,
                 "the speedup chart's series by policy")  # fmt: skip
        curves = chart_option(
            browser, "curves", "o.series.filter(Boolean).map((s) => [s.name, s.itemStyle.color])"
        )
        by_series: dict[str, set[str]] = {}
        for name, colour in curves:
            by_series.setdefault(name.split(",")[0], set()).add(colour)
        assert sorted(by_series) == policies[:2]  # each run under its policy's series
        assert all(len(c) == 1 for c in by_series.values()), by_series  # one colour a series
        assert len({next(iter(c)) for c in by_series.values()}) == 2
        table = browser.find_element("css selector", "table.report").text
        assert "policy=batch" in table and "strategy=" not in table, table
        no_overlaps_at_both_widths(
            browser, ("speedup", "time_to_accuracy", "compute_communication", "curves")
        )
        assert console_errors(browser) == []


def test_the_runs_table_comes_a_page_at_a_time_and_scrolls_to_every_run(tmp_path, browser):
    # The table's first message was every run: at 10,000 runs, seconds before a first row.
    from tests.runner.rundirs import make_run

    results = tmp_path / "results"
    results.mkdir()
    template = make_run(results, "template", 2, 10.0)
    job = json.loads((template / "job.json").read_text())
    for i in range(105):  # copies, as a sweep leaves them: one page of 100 and five more
        run_id = f"run-{i:03d}"
        shutil.copytree(template, results / run_id, ignore=shutil.ignore_patterns("job.json"))
        created_at = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00"
        record = job | {"run_id": run_id, "handle": f"local://{run_id}", "created_at": created_at}
        (results / run_id / "job.json").write_text(json.dumps(record))
    shutil.rmtree(template)

    def shown() -> list[str]:  # read at once: the rows are drawn again as pages come
        return browser.execute_script(
            "return [...document.querySelectorAll('tr.run-row')].map((r) => r.dataset.run)"
        )

    with dashboard_process(results) as url:
        browser.get(url)
        wait_for(lambda: len(shown()) == 100, 60, "the first page")
        assert shown()[:2] == ["run-104", "run-103"]  # the newest first, over every run
        assert "100 shown of 105 matching" in browser.find_element("css selector", "#shown").text
        browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        wait_for(lambda: len(shown()) == 105, 30, "the rest, once the table's end is seen")
        assert sorted(shown()) == [f"run-{i:03d}" for i in range(105)]  # each once
        search = browser.find_element("css selector", "input[type=search]")
        search.send_keys("run-00")  # over every run, not the rows shown
        wait_for(lambda: shown() == [f"run-{i:03d}" for i in range(9, -1, -1)], 30,
                 "the filtered runs")  # fmt: skip
        assert console_errors(browser) == []
