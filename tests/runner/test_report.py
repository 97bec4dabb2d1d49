"""Reports over generated run directories: cells and statistics (the MLPerf rule, misses,
outliers, spread), the closed-division guard and what may stand side by side, speedups (equal
threads per worker, a larger baseline, one device per cell), series (one per value, link rates
in order) and adaptive arms against their fixed ones. What a report writes is in
test_report_outputs.py; damaged and hostile run directories under it in test_report_hostile.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from contract import files
from runner.results import export
from runner.results import report as reports
from runner.results.runs import config_conflicts, load_run
from tests.runner.reporting import link_runs, load, report_runs, scaling_runs
from tests.runner.rundirs import env_manifest, make_run


def test_cells_aggregate_by_the_mlperf_rule_and_compute_speedup(tmp_path):
    built = reports.build(scaling_runs(tmp_path), "t")
    one, two = built.cells
    assert one.tta.mean_s == pytest.approx(12.0)  # 11, 12, 13 of 10..30
    assert two.tta.mean_s == pytest.approx(6.0)  # 5, 6, 7; the miss dropped as slowest
    assert two.speedup == pytest.approx(2.0)
    assert two.phase_ms["communication"] == pytest.approx(1.0)


def test_runs_that_missed_the_target_are_flagged_in_the_runs_table(tmp_path):
    built = reports.build(scaling_runs(tmp_path), "t")
    rows = {row[0]: row for row in export.runs_table(built).rows}
    assert "NOT CONVERGED" in rows["w2-2"]
    assert "NOT CONVERGED" not in rows["w2-1"]
    cells = export.cells_table(built)
    assert cells.rows[1][2] == "4/5"


def test_a_run_far_from_its_cells_median_is_flagged_and_so_is_the_speedup_it_bends(tmp_path):
    names = [make_run(tmp_path, f"w1-{i}", 1, t, overrides=(f"seed={i}",)).name
             for i, t in enumerate([10.0, 11.0, 66.0])]  # fmt: skip
    names += [make_run(tmp_path, f"w2-{i}", 2, t, overrides=(f"seed={i}",)).name
              for i, t in enumerate([5.0, 5.5, 6.0])]  # fmt: skip
    built = reports.build(load(tmp_path, *names), "t")
    one, two = built.cells
    assert set(one.outliers) == {"w1-2"} and one.outliers["w1-2"] == pytest.approx(6.0)
    assert not two.outliers
    notes = " ".join(export.cells_table(built).notes)
    assert "OUTLIER w1-2" in notes
    assert "SUSPECT speedup 5.27x for 2x the workers" in notes  # 29 s / 5.5 s
    rows = {row[0]: row for row in export.runs_table(built).rows}
    assert "OUTLIER" in rows["w1-2"][5] and "OUTLIER" not in rows["w1-1"][5]


def test_the_tables_say_which_spread_they_show(tmp_path):
    notes = " ".join(export.cells_table(reports.build(scaling_runs(tmp_path), "t")).notes)
    assert "± is the sample standard deviation" in notes
    assert "error bars are their fastest to slowest" in notes


def test_cancelled_runs_are_left_out_of_the_statistics_and_said_so(tmp_path):
    make_run(tmp_path, "a", 1, 10.0)
    make_run(tmp_path, "b", 1, 1.0, state="CANCELLED")
    built = reports.build(load(tmp_path, "a", "b"), "t")
    assert built.cells[0].tta.mean_s == pytest.approx(10.0)
    assert any("b is CANCELLED" in n for n in export.runs_table(built).notes)


def test_a_failed_run_counts_as_a_miss_whatever_its_summary_says(tmp_path):
    # Rank 0 wrote "target reached" in 1 s, then another rank crashed: the run FAILED, and a
    # failed run is no valid result, so it is the miss dropped as slowest, not the fastest.
    names = [make_run(tmp_path, f"r{i}", 1, t, overrides=(f"seed={i}",)).name
             for i, t in enumerate([10.0, 11.0, 12.0, 13.0])]  # fmt: skip
    names.append(make_run(tmp_path, "crashed", 1, 1.0, state="FAILED").name)
    built = reports.build(load(tmp_path, *names), "t")
    [cell] = built.cells
    assert cell.tta.num_converged == 4
    assert cell.tta.mean_s == pytest.approx(12.0)  # 11, 12, 13: 10 and the miss dropped
    rows = {row[0]: row for row in export.runs_table(built).rows}
    assert rows["crashed"][5] == "FAILED: counted as a miss"


def test_different_closed_division_configurations_are_refused_unless_allowed(tmp_path):
    make_run(tmp_path, "a", 1, 10.0)
    make_run(tmp_path, "b", 1, 9.0, overrides=("momentum=0.5",))  # open division
    runs = load(tmp_path, "a", "b")
    with pytest.raises(reports.MixedConfigurations, match="momentum"):
        reports.build(runs, "t")
    built = reports.build(runs, "t", allow_mixed=True)
    assert built.conflicts


def test_tunables_run_controls_and_exact_strategies_may_stand_side_by_side(tmp_path):
    make_run(tmp_path, "a", 1, 10.0, overrides=("lr=0.1", "seed=3"))
    make_run(tmp_path, "b", 1, 9.0, overrides=("strategy=allreduce", "max_epochs=5"))
    built = reports.build(load(tmp_path, "a", "b"), "t")
    assert not built.conflicts
    assert {c.series for c in built.cells} == {
        "lr=0.05, strategy=allreduce",
        "lr=0.1, strategy=ddp",
    }


def test_environment_differences_are_shown(tmp_path):
    make_run(tmp_path, "a", 1, 10.0)
    make_run(tmp_path, "b", 1, 9.0, manifest=env_manifest("b", 1, code_version="def456"))
    table = export.environment_table(reports.build(load(tmp_path, "a", "b"), "t"))
    row = next(r for r in table.rows if r[0] == "code_version")
    assert row[1] == "abc123, def456" and row[2] == "DIFFERS"


def test_a_conflict_says_how_many_more_runs_only_when_there_are_more(tmp_path):
    # "b (and 0 more) differs from a" named a count of nothing.
    make_run(tmp_path, "a", 1, 10.0)
    make_run(tmp_path, "b", 1, 9.0, overrides=("momentum=0.5",))
    make_run(tmp_path, "c", 1, 9.0, overrides=("momentum=0.5",))
    make_run(tmp_path, "d", 1, 9.0, overrides=("momentum=0.7",))
    assert config_conflicts(load(tmp_path, "a", "b", "c", "d")) == [
        "b (and 1 more) differs from a: division closed vs open; momentum=0.9 vs 0.5",
        "d differs from a: division closed vs open; momentum=0.9 vs 0.7",
    ]


def test_threads_are_compared_per_worker_as_a_scaling_study_holds_them():
    from contract.manifest import parse_manifest
    from runner.results.runs import environment_differences

    def run(workers, threads):
        return SimpleNamespace(
            manifest=parse_manifest(env_manifest("r", workers, torch_threads=threads))
        )

    held = [run(1, 1), run(2, 1)]  # each worker computes alike: the study's premise
    assert "threads per worker" not in environment_differences(held)
    split = [run(1, 2), run(2, 1)]  # the same two cores split differently: not like for like
    assert environment_differences(split)["threads per worker"] == ["1", "2"]


def test_a_speedup_is_only_between_runs_with_equal_threads_per_worker(tmp_path):
    # Issue 33: one worker on 2 threads against two on 1 each read as a 13x "speedup".
    def threaded(run_id, workers, t, threads):
        manifest = env_manifest(run_id, workers, torch_threads=threads)
        return make_run(tmp_path, run_id, workers, t, manifest=manifest).name

    names = [threaded("one-2t", 1, 20.0, 2), threaded("two-1t", 2, 8.0, 1),
             threaded("one-1t", 1, 16.0, 1)]  # fmt: skip
    built = reports.build(load(tmp_path, *names), "t")
    by = {(c.series, c.workers): c for c in built.cells}
    assert set(by) == {("threads=1", 1), ("threads=1", 2), ("threads=2", 1)}
    assert by["threads=1", 2].speedup == pytest.approx(2.0)  # 16 s / 8 s, not 20 s / 8 s
    assert by["threads=2", 1].speedup == pytest.approx(1.0)  # its own series' baseline
    notes = " ".join(export.cells_table(built).notes)
    assert "only between runs whose workers had equal resources: 1 or 2 intra-op" in notes


def test_the_speedup_note_names_the_threads_every_worker_had(tmp_path):
    notes = " ".join(export.cells_table(reports.build(scaling_runs(tmp_path), "t")).notes)
    assert "equal resources: 1 intra-op thread per worker" in notes


def test_each_aggregation_line_names_the_cells_it_applies_to(tmp_path):
    # Cells of 3 and 2 runs follow different rules: a bare "aggregation: mean of all 3 runs"
    # beside "... 2 runs" did not say which cell each was.
    names = [make_run(tmp_path, f"w1-{i}", 1, 10.0 + i, overrides=(f"seed={i}",)).name
             for i in range(3)]  # fmt: skip
    names += [make_run(tmp_path, f"w2-{i}", 2, 5.0 + i, overrides=(f"seed={i}",)).name
              for i in range(2)]  # fmt: skip
    notes = [n for n in export.cells_table(reports.build(load(tmp_path, *names), "t")).notes
             if n.startswith("aggregation")]  # fmt: skip
    assert notes == [
        "aggregation (strategy=ddp at 1 worker): mean of all 3 runs (fewer than 5: nothing "
        "dropped)",
        "aggregation (strategy=ddp at 2 workers): mean of all 2 runs (fewer than 5: nothing "
        "dropped)",
    ]
    same = export.cells_table(reports.build(scaling_runs(tmp_path / "same"), "t")).notes
    assert [n for n in same if n.startswith("aggregation")] == [
        "aggregation (every cell): MLPerf: mean of 3 of 5 runs (fastest and slowest dropped)"
    ]


def test_a_cell_of_five_runs_with_two_misses_reports_no_result_and_no_spread(tmp_path):
    # Two misses among five make the cell invalid; the misses' inf times once reached the
    # standard deviation, and `runner report` died with a traceback.
    for i, t in enumerate([10.0, None, 12.0, None, 13.0]):
        make_run(tmp_path, f"r{i}", 1, t, overrides=(f"seed={i}",))
    result = report_runs(tmp_path, *(f"r{i}" for i in range(5)))
    assert result.exit_code == 0, result.output
    built = reports.build(load(tmp_path, *(f"r{i}" for i in range(5))), "t")
    [row] = export.cells_table(built).rows
    assert row[2:5] == ("3/5", "not converged", "-")  # no mean, so no ± and no range of it
    assert "2 of 5 runs missed the target" in result.output


def test_a_cancelled_or_running_run_is_never_said_to_count_as_a_miss(tmp_path):
    # Their summaries say the target was reached, but neither is in any statistic.
    make_run(tmp_path, "a", 1, 10.0)
    make_run(tmp_path, "b", 1, 1.0, state="CANCELLED")
    make_run(tmp_path, "c", 1, 1.0, state="RUNNING", finished_at=None)
    built = reports.build(load(tmp_path, "a", "b", "c"), "t")
    rows = {row[0]: row for row in export.runs_table(built).rows}
    assert rows["b"][5] == "CANCELLED: left out" and rows["c"][5] == "RUNNING: left out"
    assert built.cells[0].tta.num_runs == 1


def test_speedups_against_a_larger_baseline_say_so_and_are_judged_against_it(tmp_path):
    # 1 worker never converged: speedups are against 2 workers, so 5.12x at 4 is 5.12x for
    # twice the workers, far beyond linear (against 1 worker it looked like 4x the workers).
    names = []
    for i in range(3):
        names.append(make_run(tmp_path, f"w1-{i}", 1, None, overrides=(f"seed={i}",)).name)
        names.append(make_run(tmp_path, f"w2-{i}", 2, 20.0 + i, overrides=(f"seed={i}",)).name)
        names.append(make_run(tmp_path, f"w4-{i}", 4, 4.0 + i / 10, overrides=(f"seed={i}",)).name)
    built = reports.build(load(tmp_path, *names), "t")
    assert [c.baseline_workers for c in built.cells] == [2, 2, 2]
    notes = " ".join(export.cells_table(built).notes)
    assert "strategy=ddp: speedups are against 2 workers" in notes
    assert "SUSPECT speedup 5.12x for 2x the workers" in notes
    # The figure's point without a speedup says so inside the axes (y=0 was below them).
    export.write_figures(built, tmp_path / "out")
    assert "no valid time" in (tmp_path / "out" / "speedup.svg").read_text()


def test_runs_on_different_devices_are_never_averaged_in_one_cell(tmp_path):
    make_run(tmp_path, "cpu", 1, 100.0)
    gpu = make_run(tmp_path, "gpu", 1, 1.0)
    record = files.read_json_object(gpu / "job.json")
    record["placement"]["device"] = "cuda"
    files.write_json(gpu / "job.json", record)
    built = reports.build(load(tmp_path, "cpu", "gpu"), "t")
    assert sorted((c.series, c.tta.mean_s) for c in built.cells) == [
        ("device=cpu", 100.0),
        ("device=cuda", 1.0),
    ]


def test_the_same_value_written_two_ways_is_one_series(tmp_path):
    # `lr=.05`, `lr=0.050` and the default 0.05 are one configuration: one series, not three
    # with a speedup each against a different baseline.
    make_run(tmp_path, "a0", 1, 10.0, overrides=("lr=.05", "seed=0"))
    make_run(tmp_path, "a1", 1, 11.0, overrides=("seed=1",))
    make_run(tmp_path, "b0", 2, 6.0, overrides=("lr=0.050", "seed=0"))
    make_run(tmp_path, "b1", 2, 5.0, overrides=("seed=1",))
    built = reports.build(load(tmp_path, "a0", "a1", "b0", "b1"), "t")
    assert [(c.series, c.workers, c.tta.num_runs) for c in built.cells] == [
        ("strategy=ddp", 1, 2),
        ("strategy=ddp", 2, 2),
    ]
    assert built.cells[1].speedup == pytest.approx(10.5 / 5.5)


def test_a_cluster_run_not_over_yet_has_no_cost_rather_than_nothing(tmp_path):
    # It holds its nodes and has no end time and no summary: $0.0000 would be a lie.
    project = Path(__file__).resolve().parents[2]
    make_run(tmp_path, "running", 1, None, stack="gke-gpu-8", state="RUNNING",
             finished_at="2026-01-01T00:00:05+00:00", write_summary=False)  # fmt: skip
    run = load_run(tmp_path / "running")
    (c,) = reports.cluster_costs([run], project).values()
    assert c.usd is None
    assert export.cost_text(c, run) == "unknown price (RUNNING: known once it ends)"


def test_link_series_sort_by_rate_and_an_unshaped_run_says_so(tmp_path):
    # As text, link=100mbit came before link=10mbit; and a run without --link was labelled
    # link=machine while its record says "loopback, unshaped".
    built = reports.build(load(tmp_path, *link_runs(tmp_path)), "t")
    series = ["link=10mbit", "link=100mbit", "link=unshaped"]
    assert built.series == series
    assert [row[0] for row in export.cells_table(built).rows] == [s for s in series for _ in "12"]
    labels = {row[0]: row[1] for row in export.runs_table(built).rows}
    assert labels["unshaped-w1"] == "link=unshaped" and labels["10mbit-w2"] == "link=10mbit"
    export.write_figures(built, tmp_path / "out")
    for figure in ("speedup.svg", "time_to_accuracy.svg", "curves.svg"):
        text = (tmp_path / "out" / figure).read_text()
        assert "link=unshaped" in text and "machine" not in text
    legend = (tmp_path / "out" / "speedup.svg").read_text()  # the series, as the tables have them
    assert legend.index("link=10mbit") < legend.index("link=100mbit") < legend.index("unshaped")


def _arms(root, adaptive_s, fixed_s):
    names = [make_run(root, f"fixed-{i}", 2, t, overrides=(f"seed={i}", "policy=none")).name
             for i, t in enumerate(fixed_s)]  # fmt: skip
    names += [make_run(root, f"batch-{i}", 2, t, overrides=(f"seed={i}", "policy=batch")).name
              for i, t in enumerate(adaptive_s)]  # fmt: skip
    return reports.build(load(root, *names), "t", allow_mixed=True)  # open beside closed


def test_an_adaptive_arm_beside_its_fixed_arm_gets_a_ratio_with_an_interval(tmp_path):
    built = _arms(tmp_path, [5.0, 5.5, 6.0, 5.2, 5.8], [10.0, 11.0, 10.5, 9.5, 10.2])
    [arm] = built.arms
    assert (arm.adaptive, arm.fixed) == ("policy=batch", "policy=none")
    assert arm.ratio.ratio == pytest.approx(5.5 / 10.24)
    assert arm.ratio.low < arm.ratio.ratio < arm.ratio.high < 1
    table = next(t for t in export.tables(built) if t.title == "Adaptive against fixed")
    assert table.rows[0][3] == "0.54" and table.rows[0][5].startswith("faster")
    assert "bootstrap" in " ".join(table.notes) and "seed 0" in " ".join(table.notes)
    again = _arms(tmp_path / "again", [5.0, 5.5, 6.0, 5.2, 5.8], [10.0, 11.0, 10.5, 9.5, 10.2])
    assert again.arms[0].ratio == arm.ratio  # seeded: the same runs, the same interval


def test_arms_whose_interval_holds_one_read_no_difference(tmp_path):
    built = _arms(tmp_path, [9.0, 12.0, 10.0, 11.0], [10.0, 11.5, 9.5, 10.5])
    [arm] = built.arms
    assert arm.ratio.low < 1 < arm.ratio.high
    assert arm.ratio.verdict == "no difference"


def test_series_that_differ_by_more_than_their_policy_get_no_ratio(tmp_path):
    names = [make_run(tmp_path, f"f-{i}", 2, 10.0 + i, overrides=(f"seed={i}", "lr=0.05")).name
             for i in range(2)]  # fmt: skip
    names += [make_run(tmp_path, f"b-{i}", 2, 5.0 + i,
                       overrides=(f"seed={i}", "policy=batch", "lr=0.1")).name
              for i in range(2)]  # fmt: skip
    assert reports.build(load(tmp_path, *names), "t", allow_mixed=True).arms == ()
