"""The report's series as the dashboard shows them, from the real server over run
directories in the real formats: links in order of their rate and an unshaped run labelled as
its record says, and a comparison's conflicts in the report's own words."""

from __future__ import annotations

from pathlib import Path

from runner.results import study
from tests.runner.dashboard.conftest import get_json
from tests.runner.reporting import link_runs
from tests.runner.rundirs import make_run


def test_a_study_page_orders_links_by_rate_and_labels_an_unshaped_run_so(results, dashboard):
    names = link_runs(results)
    planned = tuple(study.PlannedRun(1 + i % 2, (), 0, 0, name, "SUCCEEDED")
                    for i, name in enumerate(names))  # fmt: skip
    study.save(results, study.Study("study-links", "cnn-digits", (1, 2), {}, (), 1, "local",
                                    planned, state="complete"))  # fmt: skip

    report = get_json(dashboard + "api/studies/study-links")["report"]

    series = ["link=10mbit", "link=100mbit", "link=unshaped"]
    assert [c["series"] for c in report["cells"]] == [s for s in series for _ in "12"]
    cells_table = report["tables"][0]
    assert [row[0] for row in cells_table["rows"]] == [s for s in series for _ in "12"]
    labels = {c["run_id"]: c["label"] for c in report["curves"]}
    assert labels["unshaped-w1"] == "link=unshaped, 1 worker"
    assert "link=machine" not in str(report)


def test_a_comparisons_conflict_names_no_count_of_nothing(results: Path, dashboard):
    make_run(results, "a", 1, 10.0)
    make_run(results, "b", 1, 9.0, overrides=("momentum=0.5",))

    page = get_json(dashboard + "api/compare?run=a&run=b")

    assert page["conflicts"] == ["b differs from a: division closed vs open; momentum=0.9 vs 0.5"]


def test_a_study_page_groups_its_series_by_any_key_as_report_group_by_does(results, dashboard):
    names = link_runs(results)
    planned = tuple(study.PlannedRun(1 + i % 2, (), 0, 0, name, "SUCCEEDED")
                    for i, name in enumerate(names))  # fmt: skip
    study.save(results, study.Study("study-links", "cnn-digits", (1, 2), {}, (), 1, "local",
                                    planned, state="complete"))  # fmt: skip

    page = get_json(dashboard + "api/studies/study-links?group=lr")

    report = page["report"]
    assert (page["group_by"], report["group_by"], report["series"]) == ("lr", "lr", ["lr=0.05"])
    assert [(c["workers"], len(c["runs"])) for c in report["cells"]] == [(1, 3), (2, 3)]
    assert {c["group"] for c in report["curves"]} == {"lr=0.05"}  # one colour on the page
    assert {"link", "lr", "policy", "workers"} <= set(page["keys"])  # the page's choices
    unknown = get_json(dashboard + "api/studies/study-links?group=nope")
    assert unknown["report"] is None and "'nope'" in unknown["error"]
