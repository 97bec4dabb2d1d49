"""The runs table a page at a time (/api/runs, runner/dashboard/paging.py): every run exactly
once across the pages, however sorted or grouped; a filter, a state and a sort over every
run, not the page; bad queries refused with a 400 that says why."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from runner.dashboard import paging
from runner.dashboard.shared import SHARED
from tests.runner.dashboard.conftest import get, get_json
from tests.runner.rundirs import make_run

RUNS = 23  # pages of 5 leave a last page of 3
BATCH = {f"run-{i:02d}" for i in range(RUNS) if i % 3 == 0}


@pytest.fixture
def many(results):
    for i in range(RUNS):
        policy = "batch" if f"run-{i:02d}" in BATCH else "none"
        # Workers 2 to 12 as text: a group of "10" sorts after "2", as numbers do.
        make_run(results, f"run-{i:02d}", 2 + i % 11, 10.0 + (i * 7) % 11,
                 overrides=(f"policy={policy}",), state="FAILED" if i == 5 else "SUCCEEDED",
                 created_at=f"2026-01-01T00:{i:02d}:00+00:00")  # fmt: skip
    (results / "broken").mkdir()  # a damaged run (no job.json) is a row like any other
    (results / "broken" / "state.json").write_text("{")
    return results


def _put_back(shared: dict, row: dict) -> dict:
    """What the page does (runs.js withShared)."""
    return row | {"keys": shared | row["keys"]} if row.get(SHARED) else row


def pages(dashboard: str, size: int, **params: str) -> tuple[list[dict], list[dict]]:
    """Every page of the query, `size` rows at a time: (the rows in order, the pages)."""
    rows, answers, offset = [], [], 0
    while True:
        query = urlencode({**params, "offset": offset, "limit": size})
        answer = get_json(f"{dashboard}api/runs?{query}")
        answers.append(answer)
        rows += answer["rows"]
        offset += size
        if offset >= answer["matched"]:
            return rows, answers


@pytest.mark.parametrize(
    "params",
    [{}, {"sort": "time_to_target_s"}, {"sort": "keys.workers", "order": "desc"},
     {"group": "policy", "sort": "run_id"}, {"group": "workers"}],
    ids=["newest-first", "by-time", "by-a-key", "grouped", "grouped-by-number"],
)  # fmt: skip
def test_the_pages_hold_every_run_exactly_once(many, dashboard, params):
    rows, answers = pages(dashboard, 5, **params)
    ids = [r["run_id"] for r in rows]
    assert sorted(ids) == sorted([*(f"run-{i:02d}" for i in range(RUNS)), "broken"])
    assert len(answers) == 5 and all(a["total"] == RUNS + 1 for a in answers)
    whole = get_json(f"{dashboard}api/runs?{urlencode({**params, 'limit': 100})}")
    assert [r["run_id"] for r in whole["rows"]] == ids  # pages cut one order, never reorder it
    if "group" in params:  # grouped rows come group by group, each group once
        values = [paging.group_value(_put_back(whole["shared"], r), params["group"])
                  for r in whole["rows"]]  # fmt: skip
        assert values == sorted(values, key=paging.natural)
        assert sum(whole["groups"].values()) == RUNS + 1


def test_the_default_order_is_newest_first_and_a_sort_sees_every_run(many, dashboard):
    first = get_json(f"{dashboard}api/runs?limit=3")
    assert [r["run_id"] for r in first["rows"]] == ["run-22", "run-21", "run-20"]
    assert (first["total"], first["matched"]) == (RUNS + 1, RUNS + 1)
    fastest = get_json(f"{dashboard}api/runs?limit=1&sort=time_to_target_s")["rows"][0]
    # A failed run has no time to target, whatever it would have been: not the fastest.
    times = {f"run-{i:02d}": 10.0 + (i * 7) % 11 for i in range(RUNS) if i != 5}
    # Ties (10 s: runs 0, 11 and 22) stay in the table's order, the newest first.
    assert fastest["run_id"] == min(times, key=lambda k: (times[k], -int(k[4:])))


def test_a_filter_applies_across_pages(many, dashboard):
    rows, answers = pages(dashboard, 2, q="policy=batch")
    assert {r["run_id"] for r in rows} == BATCH and len(rows) == len(BATCH)
    assert all(a["matched"] == len(BATCH) and a["total"] == RUNS + 1 for a in answers)
    # Words and key=value terms together, and a state: every term must hold.
    both = get_json(f"{dashboard}api/runs?" + urlencode({"q": "POLICY=bat run-1", "limit": 50}))
    assert {r["run_id"] for r in both["rows"]} == {i for i in BATCH if i.startswith("run-1")}
    failed = get_json(f"{dashboard}api/runs?state=FAILED")
    assert [r["run_id"] for r in failed["rows"]] == ["run-05"]
    assert failed["states"] == ["DAMAGED", "FAILED", "SUCCEEDED"]  # every state, to offer


@pytest.mark.parametrize(
    "query, words",
    [("sort=nothing", "no column"), ("order=sideways", "asc or desc"), ("limit=0", "limit"),
     ("offset=-1", "offset"), ("limit=%C2%B2", "limit"), ("q=" + "x" * 1001, "at most")],
)  # fmt: skip
def test_a_bad_query_is_a_400_that_says_why(results, dashboard, query, words):
    status, _, body = get(f"{dashboard}api/runs?{query}")
    assert status == 400 and words in body.decode(), body


def test_a_key_term_matches_its_key_alone():
    row = {"run_id": "a", "keys": {"policy": "none", "note": "batch"}}
    assert paging.matches(row, "batch")  # a word: anywhere
    assert not paging.matches(row, "policy=batch")  # a term: that key's value only
    assert paging.matches(row, "Policy=NO") and not paging.matches(row, "missing=x")
