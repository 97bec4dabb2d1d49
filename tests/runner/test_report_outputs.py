"""What a report writes: figures written and non-empty, markdown and HTML exports holding every
table and figure, `runner report` on a study (and its refusals, exit 2), and its folders: two
reports never share one, and a report rewritten or removed touches only files it recorded."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from contract import files
from runner.cli import main
from runner.results import export
from runner.results import report as reports
from runner.results import study as studies
from tests.runner.reporting import scaling_runs
from tests.runner.rundirs import make_run, write_events


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
