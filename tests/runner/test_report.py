"""Reports over generated run directories: cells and statistics, the closed-division guard,
figures written and non-empty, exports, and `runner report` on a study."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from contract import files
from runner.cli import main
from runner.results import export
from runner.results import report as reports
from runner.results import study as studies
from runner.results.runs import config_conflicts, load_run
from tests.runner.rundirs import env_manifest, make_run, write_events


def load(root, *names):
    return [load_run(root / n) for n in names]


def scaling_runs(root):
    """Five runs at 1 worker, five at 2 (one of which misses the target)."""
    names = []
    for i, t in enumerate([10.0, 11.0, 12.0, 13.0, 30.0]):
        names.append(make_run(root, f"w1-{i}", 1, t, overrides=(f"seed={i}",)).name)
    for i, t in enumerate([5.0, 6.0, None, 7.0, 4.0]):
        names.append(make_run(root, f"w2-{i}", 2, t, overrides=(f"seed={i}",)).name)
    return load(root, *names)


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


def test_figures_are_written_as_non_empty_png_and_svg(tmp_path):
    built = reports.build(scaling_runs(tmp_path / "results"), "t")
    paths = export.write_figures(built, tmp_path / "out")
    names = {p.name for p in paths}
    for stem in ("speedup", "time_to_accuracy", "compute_communication", "curves"):
        assert {f"{stem}.png", f"{stem}.svg"} <= names
    for path in paths:
        assert path.stat().st_size > 1000
    assert (tmp_path / "out" / "speedup.png").read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in (tmp_path / "out" / "speedup.svg").read_bytes()[:1000]


def test_markdown_and_html_exports_hold_every_table_and_figure(tmp_path):
    built = reports.build(scaling_runs(tmp_path / "results"), "t")
    out = tmp_path / "out"
    paths = export.write_figures(built, out)
    md = export.to_markdown(built, paths, out)
    assert "## Time to accuracy per cell" in md and "## Reproducibility" in md
    assert "![speedup](speedup.png)" in md
    page = export.to_html(built, paths, out)
    assert "<img src='compute_communication.svg'" in page and "NOT CONVERGED" in page


def test_runner_report_on_a_study_prints_tables_and_writes_the_figures(tmp_path):
    results = tmp_path / "results"
    runs = scaling_runs(results)
    planned = studies.plan((1, 2), {}, 5, 0)
    planned = tuple(
        studies.PlannedRun(p.workers, p.sets, p.index, p.seed, r.run_id, "SUCCEEDED")
        for p, r in zip(planned, runs, strict=True)
    )
    study = studies.Study("study-x", "cnn-digits", (1, 2), {}, (), 5, "local", planned, "complete")
    studies.save(results, study)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["--results-dir", str(results), "report", "study-x", "--format", "html"]
    )
    assert result.exit_code == 0, result.output
    assert "Time to accuracy per cell" in result.output and "2.00x" in result.output
    out = results / "studies" / "study-x" / "report"
    assert (out / "speedup.png").stat().st_size > 0
    assert (out / "compute_communication.svg").stat().st_size > 0
    assert "<table>" in (out / "report.html").read_text()


def test_runner_report_refusal_is_bad_input_exits_2_and_names_the_flag(tmp_path):
    # The fix is a flag on the command line: bad input (exit 2), not a failure (exit 1).
    make_run(tmp_path, "a", 1, 10.0)
    make_run(tmp_path, "b", 1, 9.0, overrides=("momentum=0.5",))
    result = CliRunner().invoke(main, ["--results-dir", str(tmp_path), "report", "a", "b"])
    assert result.exit_code == 2
    assert "--allow-mixed" in result.output and "Traceback" not in result.output
    assert "b differs from a: division closed vs open; momentum=0.9 vs 0.5" in result.output
    # Its lines are lines (a conflict each), not `\n` written out as a control character.
    assert "\\n" not in result.output
    assert "\n  b differs from a: division closed vs open; momentum=0.9 vs 0.5\n" in result.output


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


def report_study(results, runs, changes=None):  # type: ignore[no-untyped-def]
    """`runner report` on a study of `runs` (run ids, as a study record may hold anything)."""
    planned = [{"workers": 1, "sets": [], "index": i, "seed": i, "run_id": run_id,
                "state": "SUCCEEDED", "link": None} for i, run_id in enumerate(runs)]  # fmt: skip
    record = {"study_id": "study-h", "benchmark": "cnn-digits", "workers": [1], "grid": {},
              "fixed": [], "runs_per_cell": len(runs), "where": "local", "runs": planned,
              "state": "complete", "links": [None], "created_at": "2026-01-01T00:00:00+00:00",
              "finished_at": None} | (changes or {})  # fmt: skip
    files.write_json(results / "studies" / "study-h" / "study.json", record)
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["--results-dir", str(results), "report", "study-h", "--out", str(results / "o")],
        catch_exceptions=False,
    )  # fmt: skip


def test_a_study_never_follows_a_run_id_out_of_the_results_directory(tmp_path):
    results = tmp_path / "results"
    make_run(results, "inside", 1, 10.0)
    make_run(tmp_path / "elsewhere", "outside", 1, 99.0)
    (results / "linked").symlink_to(tmp_path / "elsewhere" / "outside")
    hostile = ["../elsewhere/outside", str(tmp_path / "elsewhere" / "outside"), "linked"]
    result = report_study(results, ["inside", *hostile, "not-started-yet"])
    assert result.exit_code == 0, result.output
    report_md = (results / "o" / "report.md").read_text()
    assert "inside" in report_md and "outside" not in report_md and "99.00" not in report_md
    for run_id in hostile:
        assert f"{run_id!r}: not a run directory" in result.output.replace("\n", "")
    assert "not-started-yet" not in result.output  # a planned run with no directory yet


@pytest.mark.parametrize(
    "changes",
    [
        {"grid": []},
        {"study_id": 5},
        {"workers": "12"},
        {"state": "finished"},
        {"runs": [{"workers": 1, "sets": [], "index": 0, "seed": 0, "run_id": 5}]},
        {"runs": [{"workers": 1, "sets": [["a", "b", "c"]], "index": 0, "seed": 0}]},
    ],
)
def test_a_damaged_study_record_is_refused_in_one_line(tmp_path, changes):
    results = tmp_path / "results"
    make_run(results, "inside", 1, 10.0)
    result = report_study(results, ["inside"], changes)
    assert result.exit_code == 1
    assert "study.json: is not a study record: field" in result.output


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


def test_a_report_never_writes_through_a_link_planted_in_the_results_directory(tmp_path):
    # A shared or copied results directory may hold links where the report goes: the files
    # they point at (a shell's rc file) must be left alone, not overwritten with a figure.
    results = tmp_path / "results"
    make_run(results, "run-a", 2, 10.0)
    out = results / "reports" / "run-a"
    out.mkdir(parents=True)
    victims = {name: tmp_path / f"victim-{name}" for name in ("report.md", "speedup.png")}
    for name, victim in victims.items():
        victim.write_text("precious\n")
        (out / name).symlink_to(victim)
    runner = CliRunner(env={"COLUMNS": "200"})
    result = runner.invoke(main, ["--results-dir", str(results), "report", "run-a"])
    assert result.exit_code == 0, result.output
    assert all(v.read_text() == "precious\n" for v in victims.values())
    assert not (out / "report.md").is_symlink() and (out / "speedup.png").stat().st_size > 0
    # The report folder itself a link out of the results directory: refused, nothing written.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for path in out.iterdir():
        path.unlink()
    out.rmdir()
    out.symlink_to(elsewhere)
    result = runner.invoke(main, ["--results-dir", str(results), "report", "run-a"])
    assert result.exit_code == 1
    assert "is a symbolic link, which is never followed" in result.output
    assert "--out DIR" in result.output and list(elsewhere.iterdir()) == []


def report_runs(results, *ids):  # type: ignore[no-untyped-def]
    """`runner report` on run ids, as a user types it."""
    return CliRunner(env={"COLUMNS": "250"}).invoke(
        main, ["--results-dir", str(results), "report", *ids, "--out", str(results / "o")],
        catch_exceptions=False,
    )  # fmt: skip


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


def test_a_huge_time_to_target_is_reported_not_a_traceback(tmp_path):
    for i in range(3):
        run_dir = make_run(tmp_path, f"h{i}", 1, 10.0, overrides=(f"seed={i}",))
        summary = files.read_json_object(run_dir / "summary.json")
        files.write_json(run_dir / "summary.json", summary | {"time_to_target_s": 1e308})
    result = report_runs(tmp_path, "h0", "h1", "h2")
    assert result.exit_code == 0, result.output


def test_values_matplotlib_cannot_scale_are_left_out_of_the_figures_with_a_note(tmp_path):
    # A hostile summary's 1e308 s printed "RuntimeWarning: overflow encountered in multiply"
    # (matplotlib's tick locator), and a loss of 1e290 beside 1.0 on the log axis of the
    # curves raised OverflowError: `runner report` died with a traceback.
    names = [make_run(tmp_path, f"h{i}", 1 + i, 10.0, overrides=(f"seed={i}",)).name
             for i in range(2)]  # fmt: skip
    hostiles = ({"time_to_target_s": 1e308}, {"target_value": 1e308})
    for name, hostile in zip(names, hostiles, strict=True):
        summary = files.read_json_object(tmp_path / name / "summary.json")
        phases = {k: 1e308 for k in summary["phases_s"]}
        files.write_json(tmp_path / name / "summary.json", summary | hostile | {"phases_s": phases})
    lines = (tmp_path / "h1" / "events.jsonl").read_text().splitlines()
    losses = [i for i, line in enumerate(lines) if '"train_loss"' in line]
    lines[losses[1]] = lines[losses[1]].replace('"value": 0.5', '"value": 1e290')
    (tmp_path / "h1" / "events.jsonl").write_text("\n".join(lines) + "\n")
    built = reports.build(load(tmp_path, *names), "t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = export.write_figures(built, tmp_path / "out")
    curves = (tmp_path / "out" / "curves.svg").read_text()
    assert "1 value(s) beyond ±1e+100 left out" in curves
    for figure in ("time_to_accuracy.svg", "compute_communication.svg"):
        assert "<!-- off -->" in (tmp_path / "out" / figure).read_text(), figure
    assert all(p.stat().st_size > 0 for p in paths)
    result = report_runs(tmp_path, *names)
    assert result.exit_code == 0, result.output


def test_a_negative_time_to_target_is_a_damaged_summary_left_out_and_named(tmp_path):
    # It would be the fastest run of its cell and drag the mean below zero.
    for i, t in enumerate([10.0, 11.0, 12.0]):
        run_dir = make_run(tmp_path, f"n{i}", 1, t, overrides=(f"seed={i}",))
    summary = files.read_json_object(run_dir / "summary.json")
    files.write_json(run_dir / "summary.json", summary | {"time_to_target_s": -1e6})
    result = report_runs(tmp_path, "n0", "n1", "n2")
    assert result.exit_code == 0, result.output
    assert "left out, damaged: n2: summary.json field 'time_to_target_s'" in result.output
    assert "10.50 ± 0.71" in result.output and "-333326" not in result.output


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


def test_a_copied_run_directory_is_named_as_left_out_not_dropped_in_silence(tmp_path):
    make_run(tmp_path, "a", 1, 10.0)
    shutil.copytree(tmp_path / "a", tmp_path / "copy-of-a")
    result = report_runs(tmp_path, "a", "copy-of-a")
    assert result.exit_code == 0, result.output
    assert "copy-of-a: job.json names run 'a', not its directory" in " ".join(result.output.split())


def test_figures_of_runs_without_a_valid_time_warn_nothing_on_the_terminal(tmp_path):
    # No line to name: matplotlib's legend warned "No artists with labels found".
    for i in range(2):
        make_run(tmp_path, f"miss{i}", 1 + i, None, overrides=(f"seed={i}",))
    built = reports.build(load(tmp_path, "miss0", "miss1"), "t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert export.write_figures(built, tmp_path / "out")


def on_link(run_dir: Path, link: str | None) -> Path:
    """The run as if submitted with --link LINK (None: no --link, the loopback unshaped)."""
    record = files.read_json_object(run_dir / "job.json")
    record["placement"]["link"] = link
    files.write_json(run_dir / "job.json", record)
    return run_dir


def link_runs(root: Path) -> list[str]:
    """Runs of cnn-digits at 1 and 2 workers on 100mbit, unshaped and 10mbit links."""
    names = []
    for link in ("100mbit", None, "10mbit"):
        for workers in (1, 2):
            name = f"{link or 'unshaped'}-w{workers}"
            on_link(make_run(root, name, workers, 10.0 / workers), link)
            names.append(name)
    return names


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


def report_folders(results: Path, *ids: str) -> list[Path]:
    """`runner report IDS` without --out, then every report folder under results/reports/."""
    result = CliRunner(env={"COLUMNS": "250"}).invoke(
        main, ["--results-dir", str(results), "report", *ids], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return sorted((results / "reports").iterdir())


def test_two_different_reports_never_share_a_folder(tmp_path):
    # `report a b` then `report a c` both wrote reports/a+1/, the second replacing the first.
    results = tmp_path / "results"
    for i, name in enumerate("abc"):
        make_run(results, name, 1, 10.0 + i, overrides=(f"seed={i}",))
    report_folders(results, "a", "b")
    first, second = report_folders(results, "a", "c")
    assert first.name.startswith("a+1-") and second.name.startswith("a+1-")
    texts = {p.name: (p / "report.md").read_text() for p in (first, second)}
    assert sorted("| b |" in t for t in texts.values()) == [False, True]
    assert sorted("| c |" in t for t in texts.values()) == [False, True]
    # The same set in another order, or by a prefix, is the same report: the same folder.
    assert report_folders(results, "c", "a") == [first, second]
    assert report_folders(results, "b", "a") == [first, second]


def test_a_rewritten_report_keeps_no_file_of_the_earlier_one(tmp_path):
    # A figure the earlier report drew (adaptive) and this one does not, or its export in
    # the other format, once stayed beside the new report as if it were part of it.
    results = tmp_path / "results"
    adaptive = make_run(results, "a", 2, 10.0)
    monitors = {"step": 0, "world_size": 2, "b_noise": 40.0, "global_batch": 64, "lr": 0.1,
                "knobs": {"global_batch": 64}}  # fmt: skip
    with open(adaptive / "events.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"namespace": "", "time_ms": 1_700_000_001_000, "value": monitors,
                            "key": "stackbench_monitors", "event_type": "POINT_IN_TIME",
                            "metadata": {}}) + "\n")  # fmt: skip
    make_run(results, "b", 1, 20.0)
    runner = CliRunner(env={"COLUMNS": "250"})
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    for args in ([], ["--out", str(out)]):
        first = runner.invoke(main, ["--results-dir", str(results), "report", "a", "b",
                                     "--format", "html", *args])  # fmt: skip
        assert first.exit_code == 0, first.output
    [folder] = (results / "reports").iterdir()
    for where in (folder, out):
        assert {"adaptive.png", "adaptive.svg", "report.html"} <= {p.name for p in where.iterdir()}
    write_events(adaptive / "events.jsonl", 10.0)  # fetched again: no monitor events now
    for args in ([], ["--out", str(out)]):
        again = runner.invoke(main, ["--results-dir", str(results), "report", "a", "b", *args])
        assert again.exit_code == 0, again.output
    for where in (folder, out):
        names = {p.name for p in where.iterdir()}
        assert not names & {"adaptive.png", "adaptive.svg", "report.html"}, names
        assert {"report.md", "speedup.png", "curves.svg"} <= names
    assert (out / "notes.txt").read_text() == "mine\n"  # what is not a report's is left alone


def test_a_report_removes_only_files_an_earlier_report_recorded_writing(tmp_path):
    # A person's own report.html or adaptive.png in --out was removed as "stale" although no
    # report ever wrote it; so is nothing a damaged or hostile record names.
    results = tmp_path / "results"
    make_run(results, "a", 1, 10.0)
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("report.html", "adaptive.png", "adaptive.svg"):
        (out / name).write_text("mine\n")
    result = report_runs_to(results, out, "a")
    assert result.exit_code == 0, result.output
    for name in ("report.html", "adaptive.png", "adaptive.svg"):
        assert (out / name).read_text() == "mine\n", name
    assert (out / "report.md").is_file() and (out / export.WRITTEN_RECORD).is_file()
    # A record that names what is not a report's file, or a link in its place, claims nothing.
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / ".bashrc").write_text("mine\n")
    hostile = {"files": ["report.html", "../victim", str(victim), ".bashrc", 7, None]}
    files.write_json(out / export.WRITTEN_RECORD, hostile)
    (out / "report.html").unlink()
    (out / "report.html").symlink_to(victim)
    for damage in ("garbage", "link", "not a list"):
        if damage == "garbage":
            (out / export.WRITTEN_RECORD).write_bytes(b"\xff[[[")
        elif damage == "link":
            (out / export.WRITTEN_RECORD).unlink()
            (tmp_path / "record").write_text(json.dumps({"files": ["adaptive.png"]}))
            (out / export.WRITTEN_RECORD).symlink_to(tmp_path / "record")
        else:
            files.write_json(out / export.WRITTEN_RECORD, {"files": "adaptive.png"})
        result = report_runs_to(results, out, "a")
        assert result.exit_code == 0, result.output
        assert (out / "adaptive.png").read_text() == "mine\n", damage
    files.write_json(out / export.WRITTEN_RECORD, hostile)
    assert report_runs_to(results, out, "a").exit_code == 0
    assert victim.read_text() == "precious\n" and (out / ".bashrc").read_text() == "mine\n"
    assert not (out / "report.html").exists()  # the record's one name a report writes: the link
    assert (tmp_path / "record").read_text() == json.dumps({"files": ["adaptive.png"]})


def report_runs_to(results: Path, out: Path, *ids: str):  # type: ignore[no-untyped-def]
    return CliRunner(env={"COLUMNS": "250"}).invoke(
        main, ["--results-dir", str(results), "report", *ids, "--out", str(out)],
        catch_exceptions=False,
    )  # fmt: skip


@pytest.mark.filterwarnings("error")  # matplotlib: "Glyph 27 missing from font"
def test_a_label_from_a_run_directory_is_shown_as_written_never_read_as_markup(tmp_path):
    # A --set value in job.json is the runs' series label: `$\foo$` was read as mathtext by
    # matplotlib (a traceback), `[red]` as rich markup (styled, `[x]` eaten), an escape
    # sequence reached the terminal raw, and in report.md a newline broke the table and
    # `![x](url)` was an image fetched from elsewhere.
    notes = ("$\\foo$ [red]x[/red] ![x](http://evil/t.png)", "a|b\n| forged | row |\x1b[2J")
    for i, note in enumerate(notes):
        run_dir = make_run(tmp_path, f"m{i}", 1, 10.0 + i, overrides=(f"seed={i}",))
        job = files.read_json_object(run_dir / "job.json")
        files.write_json(run_dir / "job.json", job | {"overrides": [["note", note]]})
    result = report_runs(tmp_path, "m0", "m1")
    assert result.exit_code == 0, result.output
    shown = "".join(result.output.split())
    assert "note=$\\foo$[red]x[/red]![x](http://evil/t.png)" in shown
    assert "\x1b" not in result.output and "forged|row|\\x1b[2J" in shown
    text = (tmp_path / "o" / "report.md").read_text()
    assert "| note=$\\\\foo$ \\[red\\]x\\[/red\\] !\\[x\\](http://evil/t.png) | 1 |" in text
    assert "| note=a\\|b\\\\x0a\\| forged \\| row \\|\\\\x1b\\[2J | 1 |" in text


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_a_bidi_override_in_a_label_is_shown_as_its_escape_in_the_report(tmp_path, fmt):
    # U+202E in a --set value of job.json reversed the rest of its line where the report is
    # read (the aggregation note's trusted text after the label: "...0.01" read "10.0..."), and
    # a zero-width space hid in a label; the CLI's tables already showed both as escapes.
    for i, note in enumerate(("x\u202e at 1 workers", "y\u200b")):
        run_dir = make_run(tmp_path, f"b{i}", 1, 10.0 + i, overrides=(f"seed={i}",))
        job = files.read_json_object(run_dir / "job.json")
        files.write_json(run_dir / "job.json", job | {"overrides": [["note", note]]})
    result = CliRunner(env={"COLUMNS": "250"}).invoke(main, [
        "--results-dir", str(tmp_path), "report", "b0", "b1", "--out", str(tmp_path / "o"),
        "--format", fmt], catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    text = (tmp_path / "o" / f"report.{fmt}").read_text(encoding="utf-8")
    assert "\u202e" not in text and "\u200b" not in text
    shown = "\\\\" if fmt == "md" else "\\"  # Markdown escapes the escape's backslash
    assert f"note=x{shown}u202e at 1 workers" in text and f"note=y{shown}u200b" in text


def test_a_results_folder_and_an_out_folder_the_user_links_elsewhere_are_written(tmp_path):
    """The user's own links (a results folder on another disk) are followed: only a link
    planted below them is refused (contract.files)."""
    real_results, real_out = tmp_path / "disk" / "results", tmp_path / "disk" / "out"
    real_results.mkdir(parents=True)
    real_out.mkdir()
    (tmp_path / "results").symlink_to(real_results)
    (tmp_path / "out").symlink_to(real_out)
    make_run(real_results, "a", 1, 10.0)
    for out in ((), ("--out", str(tmp_path / "out"))):
        result = CliRunner().invoke(
            main, ["--results-dir", str(tmp_path / "results"), "report", "a", *out]
        )
        assert result.exit_code == 0, result.output
    assert (real_out / "report.md").is_file()
    assert [p.name for p in (real_results / "reports").iterdir()] == ["a"]


def test_load_run_never_reads_a_run_directory_swapped_for_a_link_out_of_the_results(tmp_path):
    """A caller (the dashboard, a study) checks the run directory, then load_run reads it: one
    swapped for a link to a folder outside the results directory in between is refused, and
    so is a link at a record's name; the results folder's own link (another disk) is not."""
    results = tmp_path / "results"
    make_run(results, "r", 1, 10.0)
    make_run(tmp_path / "outside", "r", 1, 99.0)
    (results / "r").rename(tmp_path / "moved")
    (results / "r").symlink_to(tmp_path / "outside" / "r")
    with pytest.raises(files.DamagedFile, match="symbolic link"):
        load_run(results / "r")
    make_run(results, "s", 1, 10.0)
    (results / "s" / "summary.json").unlink()
    (results / "s" / "summary.json").symlink_to(tmp_path / "outside" / "r" / "summary.json")
    with pytest.raises(files.DamagedFile, match=r"summary\.json: is a symbolic link"):
        load_run(results / "s")
    (tmp_path / "linked-results").symlink_to(tmp_path / "outside")
    run = load_run(tmp_path / "linked-results" / "r")
    assert run.train_summary is not None and run.train_summary.time_to_target_s == 99.0


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
