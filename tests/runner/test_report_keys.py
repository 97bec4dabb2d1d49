"""`runner report` by configuration key (--group-by, the dashboard's reading of the keys),
adaptive and fixed arms side by side without --allow-mixed, and a plugin's name@version in
the series and the runs table: over generated run directories."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from contract.manifest import PluginRecord
from runner.cli import main
from runner.results import export
from runner.results import report as reports
from runner.results.runs import config_conflicts, load_run
from tests.runner.rundirs import env_manifest, make_run


def _grid(root):
    """Four runs: two strategies (both exact: closed division) x two learning rates."""
    runs = []
    for i, (strategy, lr) in enumerate([("ddp", "0.05"), ("ddp", "0.1"),
                                        ("allreduce", "0.05"), ("allreduce", "0.1")]):  # fmt: skip
        overrides = (f"strategy={strategy}", f"lr={lr}", f"seed={i}")
        runs.append(load_run(make_run(root, f"r{i}", 2, 10.0 + i, overrides=overrides)))
    return runs


def test_group_by_makes_one_series_per_value_of_the_key(tmp_path):
    runs = _grid(tmp_path)
    assert len(reports.build(runs, "t").series) == 4  # lr and strategy both vary
    built = reports.build(runs, "t", group_by="strategy")
    cells = {c.series: sorted(r.run_id for r in c.runs) for c in built.cells}
    assert cells == {"strategy=ddp": ["r0", "r1"], "strategy=allreduce": ["r2", "r3"]}
    assert {row[1] for row in export.runs_table(built).rows} == set(cells)
    by_link = reports.build(runs, "t", group_by="link")  # a key outside --set: where it ran
    assert by_link.series == ["link=unshaped"]


def test_runner_report_group_by_labels_the_tables_and_refuses_an_unknown_key(tmp_path):
    _grid(tmp_path)
    args = ["--results-dir", str(tmp_path), "report", "r0", "r1", "r2", "r3"]
    result = CliRunner().invoke(main, [*args, "--group-by", "strategy", "--out",
                                       str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "strategy=allreduce" in result.output and "lr=0.1" not in result.output
    bad = CliRunner().invoke(main, [*args, "--group-by", "stratgy"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "--group-by stratgy: no run has that configuration key" in bad.output
    assert "strategy" in bad.output  # the keys it could have meant


def test_arms_that_differ_only_by_policy_stand_side_by_side_without_allow_mixed(tmp_path):
    fixed = [load_run(make_run(tmp_path, f"f{i}", 2, 20.0 + i, overrides=(f"seed={i}",)))
             for i in range(3)]  # fmt: skip
    adaptive = [load_run(make_run(tmp_path, f"a{i}", 2, 10.0 + i,
                                  overrides=("policy=batch", "batch_growth=3", f"seed={i}")))
                for i in range(3)]  # fmt: skip
    assert {r.division for r in adaptive} == {"open"}
    assert config_conflicts([*fixed, *adaptive]) == []
    built = reports.build([*fixed, *adaptive], "t")
    [arm] = built.arms
    assert arm.ratio.ratio == pytest.approx(11.0 / 21.0)


def test_adaptive_sync_stands_beside_allreduce_its_fixed_arm(tmp_path):
    fixed = load_run(make_run(tmp_path, "f", 2, 20.0, overrides=("strategy=allreduce",)))
    sync = load_run(make_run(tmp_path, "s", 2, 10.0,
                             overrides=("strategy=adaptive-sync", "policy=sync")))  # fmt: skip
    assert config_conflicts([fixed, sync]) == []


def test_any_other_difference_beside_the_policy_still_needs_allow_mixed(tmp_path):
    fixed = load_run(make_run(tmp_path, "f", 2, 20.0))
    adaptive = load_run(make_run(tmp_path, "a", 2, 10.0,
                                 overrides=("policy=batch", "momentum=0.5")))  # fmt: skip
    [conflict] = config_conflicts([fixed, adaptive])
    assert "momentum=0.9 vs 0.5" in conflict and "policy" not in conflict
    with pytest.raises(reports.MixedConfigurations):
        reports.build([fixed, adaptive], "t")


def _plugin_run(root, run_id):
    plugin = PluginRecord(name="topk-example", version="0.1.0", source_sha256="1a2b3c" * 10,
                          origin="topk-example==0.1.0")  # fmt: skip
    manifest = env_manifest(run_id, 2) | {"plugins": [plugin.to_dict()]}
    return load_run(make_run(root, run_id, 2, 9.0, manifest=manifest))


def test_a_plugin_run_names_its_plugin_and_version_in_the_series_and_the_runs_table(tmp_path):
    reference = load_run(make_run(tmp_path, "ref", 2, 10.0))
    plugin = _plugin_run(tmp_path, "plug")
    assert plugin.keys["plugin"] == "topk-example@0.1.0" and "plugin" not in reference.keys
    built = reports.build([reference, plugin], "t", allow_mixed=True)
    table = export.runs_table(built)
    assert table.header[:3] == ("run", "series", "plugin")
    rows = {row[0]: row for row in table.rows}
    assert rows["plug"][1:3] == ("plugin=topk-example@0.1.0", "topk-example@0.1.0")
    assert rows["ref"][2] == "-"
    alone = export.runs_table(reports.build([reference], "t"))
    assert "plugin" not in alone.header  # no column when no run used a plugin


def test_group_by_never_pools_runs_whose_workers_had_other_threads(tmp_path):
    one = load_run(make_run(tmp_path, "t1", 2, 10.0))
    two = load_run(make_run(tmp_path, "t2", 2, 12.0, overrides=("seed=2",),
                            manifest=env_manifest("t2", 2, torch_threads=2)))  # fmt: skip
    built = reports.build([one, two], "t", group_by="strategy")
    assert built.series == ["threads=1, strategy=ddp", "threads=2, strategy=ddp"]
