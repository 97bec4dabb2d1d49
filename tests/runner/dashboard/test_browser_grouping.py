"""End to end in a real headless browser, many runs at once: any configuration key filters,
groups and labels the runs table, the compare page and the study page, with no text drawn
over other text at either width; and the runs table comes a page at a time and scrolls to
every run."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from tests.runner.dashboard.browser import (
    chart_option,
    chart_points,
    choose,
    console_errors,
    dashboard_process,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


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
