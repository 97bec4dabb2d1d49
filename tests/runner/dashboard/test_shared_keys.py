"""The runs table's configuration keys: the ones every run shares sent once (a page of
/api/runs carries each row's own), every key still there for a filter or a group once put
back; and a plugin's name@version and source hash in a run's row and page."""

from __future__ import annotations

from contract.manifest import PluginRecord
from runner.dashboard.data import run_row
from runner.dashboard.shared import SHARED, split_keys
from tests.runner.dashboard.conftest import get_json
from tests.runner.rundirs import env_manifest, make_run

PLUGIN = PluginRecord(name="topk-example", version="0.1.0", source_sha256="ab12" * 16,
                      origin="topk-example==0.1.0")  # fmt: skip


def _runs(root):
    make_run(root, "fixed", 2, 20.0, overrides=("seed=1",))
    make_run(root, "batch", 2, 10.0, overrides=("policy=batch", "seed=2"))
    make_run(root, "plug", 2, 15.0, overrides=("seed=3",),
             manifest=env_manifest("plug", 2) | {"plugins": [PLUGIN.to_dict()]})  # fmt: skip
    (root / "broken").mkdir()  # a damaged run: no job.json, no keys


def _put_back(shared, row):
    """What the page does (runs.js withShared)."""
    if not row.get(SHARED):
        return row
    return {k: v for k, v in row.items() if k != SHARED} | {"keys": {**shared, **row["keys"]}}


def test_only_the_keys_that_vary_travel_with_each_row(tmp_path):
    _runs(tmp_path)
    rows = [run_row(tmp_path, name) for name in ("fixed", "batch", "plug", "broken")]
    shared, compact = split_keys(rows)
    assert shared["batch_size"] == "32" and shared["link"] == "unshaped"
    assert not {"seed", "policy", "division", "plugin"} & set(shared)  # they vary (or are rare)
    by_id = {r["run_id"]: r for r in compact}
    assert set(by_id["batch"]["keys"]) == {"seed", "policy", "division"}
    assert by_id["broken"]["keys"] == {} and SHARED not in by_id["broken"]  # never given them
    assert [_put_back(shared, r) for r in compact] == rows  # nothing lost
    # The keys sent: the shared once, each row's own; before, every key of every row.
    sent = len(shared) + sum(len(r["keys"]) for r in compact)
    assert sent < sum(len(r["keys"]) for r in rows) / 2


def test_a_plugin_runs_row_names_it_with_its_version_and_source_hash(tmp_path):
    _runs(tmp_path)
    row = run_row(tmp_path, "plug")
    assert row["keys"]["plugin"] == "topk-example@0.1.0"
    assert row["plugins"] == [{"label": "topk-example@0.1.0", "source_sha256": "ab12" * 16}]
    assert run_row(tmp_path, "fixed")["plugins"] == [] and "plugin" not in run_row(
        tmp_path, "fixed")["keys"]  # fmt: skip


def test_the_api_sends_the_shared_keys_once(results, dashboard):
    _runs(results)
    shared = get_json(dashboard + "api/keys")
    page = get_json(dashboard + "api/runs")
    rows = {r["run_id"]: r for r in page["rows"]}
    assert page["shared"] == shared  # every run is on the first page: the same keys
    assert "batch_size" in shared and "batch_size" not in rows["fixed"]["keys"]
    assert _put_back(shared, rows["batch"])["keys"]["policy"] == "batch"
    assert {"batch_size", "policy", "plugin"} <= set(page["keys"])  # every key, for the controls
    page = get_json(dashboard + "api/runs/plug")  # the run page's header reads the manifest
    [plugin] = page["manifest"]["plugins"]
    assert (plugin["name"], plugin["version"]) == ("topk-example", "0.1.0")
