"""End to end in a real headless browser, pages of finished runs: an adaptive run's page draws
its decisions, knobs and noise scale; a study labelled with chart markup shows it as text; no
link on a run page leads to an error; and a comparison whose run is deleted says so rather
than showing it."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from runner import api
from tests.conftest import submit_local
from tests.runner.dashboard.browser import (
    chart_option,
    chart_points,
    choose,
    console_errors,
    dashboard_process,
    hover,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


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
