"""The dashboard's HTTP API against the real server on 127.0.0.1, over run directories in
the real formats (tests/runner/rundirs.py), damaged and hostile ones included."""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from runner.job.spec import MAX_WORLD_SIZE
from runner.results import rundir, study
from tests.runner.dashboard.conftest import get, get_json, raw_get, running_dashboard
from tests.runner.rundirs import make_run
from tests.runner.test_teardown import unix_socket_at


def test_runs_lists_every_run_with_state_and_headline(results, dashboard):
    make_run(results, "cnn-a", 2, 12.5)
    make_run(results, "cnn-b", 4, None, state="FAILED", created_at="2026-01-02T00:00:00+00:00")
    (results / study.STUDIES_DIR).mkdir()  # not a run

    rows = {r["run_id"]: r for r in get_json(dashboard + "api/runs")["rows"]}

    assert set(rows) == {"cnn-a", "cnn-b"}
    a, b = rows["cnn-a"], rows["cnn-b"]
    assert (a["state"], a["benchmark"], a["division"], a["workers"]) == (
        "SUCCEEDED", "cnn-digits", "closed", 2,
    )  # fmt: skip
    assert a["reached"] and a["time_to_target_s"] == 12.5 and a["value"] == 0.96
    assert (b["state"], b["reached"], b["time_to_target_s"], b["value"]) == (
        "FAILED",
        False,
        None,
        0.9,
    )
    assert [r["run_id"] for r in get_json(dashboard + "api/runs")["rows"]] == [
        "cnn-b",
        "cnn-a",
    ]  # newest first


def test_run_detail_has_config_summary_manifest_files_and_logs(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 12.5, overrides=("lr=0.1",))
    (run_dir / "logs" / "rank-0.log").write_text("hello from rank 0\n")

    run = get_json(dashboard + "api/runs/cnn-a")

    assert run["config"]["lr"] == 0.1 and run["overrides"] == [["lr", "0.1"]]
    assert run["summary"]["time_to_target_s"] == 12.5
    assert run["manifest"]["code_version"] == "abc123"
    assert run["logs"] == ["rank-0.log", "rank-1.log"]  # every rank's, present or not
    paths = {f["path"]: f for f in run["files"]}
    assert {"job.json", "state.json", "summary.json", "events.jsonl", "logs/rank-0.log"} <= set(
        paths
    )
    assert paths["logs/rank-0.log"]["size"] == len("hello from rank 0\n")


def test_failed_run_carries_its_reason_and_failed_rank(results, dashboard):
    from contract.rundir import JobState, JobStatus

    run_dir = make_run(results, "cnn-a", 2, None, state="FAILED")
    reason = "rank 1 exited with code -9: killed"
    rundir.write_state(run_dir, JobStatus(JobState.FAILED, reason, failed_rank=1, exit_code=-9))

    run = get_json(dashboard + "api/runs/cnn-a")

    assert (run["state"], run["reason"], run["failed_rank"], run["exit_code"]) == (
        "FAILED", reason, 1, -9,
    )  # fmt: skip


def test_curves_are_seconds_since_run_start(results, dashboard):
    make_run(results, "cnn-a", 2, 30.0)  # epochs end at 10, 20 and 30 s

    curves = get_json(dashboard + "api/runs/cnn-a/curves")

    assert curves["train_loss"] == [[10.0, 1.0], [20.0, 0.5], [30.0, 1 / 3]]
    assert [t for t, _ in curves["eval_accuracy"]] == [10.0, 20.0, 30.0]


def test_log_reads_from_an_offset(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    (run_dir / "logs" / "rank-1.log").write_text("first line\nsecond line\n")

    whole = get_json(dashboard + "api/runs/cnn-a/logs/rank-1.log")
    rest = get_json(dashboard + "api/runs/cnn-a/logs/rank-1.log?offset=11")

    assert whole["text"] == "first line\nsecond line\n" and whole["offset"] == whole["size"] == 23
    assert rest["text"] == "second line\n"


@pytest.mark.parametrize("offset", ["-1", "x", "%C2%B2", "9" * 5000])
def test_an_offset_that_is_no_byte_count_is_a_400_not_a_server_error(results, dashboard, offset):
    # '²' passes str.isdigit() and 5000 digits pass it too; int() refuses both.
    make_run(results, "cnn-a", 2, 12.5)
    status, _, body = get(dashboard + f"api/runs/cnn-a/logs/rank-0.log?offset={offset}")
    assert status == 400 and b"byte count" in body


def test_a_run_of_an_absurd_world_size_offers_a_bounded_list_of_logs(results, dashboard):
    # job.json may be hostile: a tab per rank of the largest run a job.json may describe was
    # 100,000 names (and 10**12 ranks, before Placement refused them, the machine's memory).
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    job = json.loads((run_dir / "job.json").read_text())
    job["placement"] |= {"num_nodes": 100, "procs_per_node": 1000}
    (run_dir / "job.json").write_text(json.dumps(job))

    run = get_json(dashboard + "api/runs/cnn-a")

    assert run["workers"] == MAX_WORLD_SIZE
    assert run["logs"][:2] == ["rank-0.log", "rank-1.log"] and len(run["logs"]) <= 1024


def test_a_damaged_run_shows_as_damaged_and_breaks_nothing_else(results, dashboard):
    make_run(results, "good", 2, 12.5)
    garbled = make_run(results, "garbled", 2, 12.5)
    (garbled / "summary.json").write_bytes(b'{"final": {"value": 0.9')  # cut short by a crash
    no_job = make_run(results, "no-job", 2, 12.5)
    (no_job / "job.json").unlink()
    (make_run(results, "list-job", 2, 12.5) / "job.json").write_text("[1, 2]")
    (results / "linked").symlink_to(results / "good")

    rows = {r["run_id"]: r for r in get_json(dashboard + "api/runs")["rows"]}

    assert rows["good"]["state"] == "SUCCEEDED" and not rows["good"]["damaged"]
    for run_id, file, words in [
        ("garbled", "summary.json", "not valid JSON"),
        ("no-job", "job.json", "missing"),
        ("list-job", "job.json", "not an object"),
        ("linked", "linked", "symbolic link"),
    ]:
        assert rows[run_id]["state"] == "DAMAGED", run_id
        [problem] = rows[run_id]["damaged"]
        assert problem["file"] == file and words in problem["problem"], problem
    page = get_json(dashboard + "api/runs/garbled")  # its page opens and says why
    assert page["state"] == "DAMAGED" and page["summary"] is None
    assert page["config"]["lr"] == 0.05  # what is readable still shows
    assert get(dashboard + "api/runs/linked")[0] == 404  # never followed


def _edit_job(run_dir: Path, **changes: object) -> None:
    job = json.loads((run_dir / "job.json").read_text())
    (run_dir / "job.json").write_text(json.dumps(job | changes))


def test_a_job_record_of_the_wrong_types_is_damaged_and_every_page_still_served(results, dashboard):
    # JobSpec.from_dict takes these on trust: a created_at that was a number sorted against
    # the others' text was a 500 for the whole table, and 1.5 nodes a 500 for the run's page.
    make_run(results, "good", 2, 12.5)
    _edit_job(make_run(results, "numbered", 2, 12.5), created_at=5)
    placement = {"num_nodes": 1.5, "procs_per_node": 2, "device": "cpu"}
    _edit_job(make_run(results, "fractional", 2, 12.5), placement=placement)

    rows = {r["run_id"]: r for r in get_json(dashboard + "api/runs")["rows"]}

    assert rows["good"]["state"] == "SUCCEEDED"
    for run_id, words in [("numbered", "created_at"), ("fractional", "whole number")]:
        assert rows[run_id]["state"] == "DAMAGED", run_id
        [problem] = rows[run_id]["damaged"]
        assert problem["file"] == "job.json" and words in problem["problem"], problem
        assert get_json(dashboard + f"api/runs/{run_id}")["state"] == "DAMAGED"
    compared = get_json(dashboard + "api/compare?run=good&run=numbered&run=fractional")
    assert {p["run_id"] for p in compared["problems"]} == {"numbered", "fractional"}


def test_a_failed_run_shows_no_time_to_target_whatever_its_summary_says(results, dashboard):
    # Rank 0 wrote a summary that reached the target, then another rank was killed: the
    # report counts the run as a miss (RunResult.converged), and so must every page.
    from contract.rundir import JobState, JobStatus

    run_dir = make_run(results, "cnn-a", 2, 12.5)
    reason = "rank 1 exited with code -9: killed"
    rundir.write_state(run_dir, JobStatus(JobState.FAILED, reason, failed_rank=1, exit_code=-9))

    [row] = get_json(dashboard + "api/runs")["rows"]
    page = get_json(dashboard + "api/runs/cnn-a")
    compared = get_json(dashboard + "api/compare?run=cnn-a")["runs"][0]

    for shown in (row, page, compared):
        assert (shown["state"], shown["reached"], shown["time_to_target_s"]) == (
            "FAILED", False, None,
        )  # fmt: skip


def test_files_are_served_as_text_json_or_download_never_as_html(results, dashboard):
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    (run_dir / "logs" / "rank-0.log").write_text("<script>alert(1)</script>\n")
    (run_dir / "notes.html").write_text("<html><script>alert(1)</script></html>")

    status, headers, body = get(dashboard + "api/runs/cnn-a/files/logs/rank-0.log")
    assert status == 200 and body == b"<script>alert(1)</script>\n"
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
    status, headers, _ = get(dashboard + "api/runs/cnn-a/files/summary.json")
    assert headers["Content-Type"].startswith("application/json")
    status, headers, _ = get(dashboard + "api/runs/cnn-a/files/notes.html")
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"].startswith("attachment")
    _, headers, _ = get(dashboard + "api/runs/cnn-a/files/job.json?download=1")
    assert headers["Content-Disposition"] == 'attachment; filename="job.json"'


def test_paths_out_of_the_run_directory_are_refused(results, dashboard, tmp_path):
    make_run(results, "cnn-a", 2, 12.5)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    (results / "secret.txt").write_text("SECRET")
    for path in [
        "/api/runs/cnn-a/files/../secret.txt",
        "/api/runs/cnn-a/files/..%2Fsecret.txt",
        "/api/runs/cnn-a/files/%2e%2e/%2e%2e/secret.txt",
        "/api/runs/cnn-a/files/logs/../../secret.txt",
        "/api/runs/cnn-a/files//etc/passwd",
        "/api/runs/..%2F..%2Fetc/files/passwd",
        "/api/runs/cnn-a/logs/..%2F..%2Fsecret.txt",
    ]:
        status, body = raw_get(dashboard, path)
        assert status in (400, 403, 404), (path, status)
        assert b"SECRET" not in body and b"root:" not in body, path


def test_symbolic_links_inside_a_run_are_never_followed(results, dashboard, tmp_path):
    run_dir = make_run(results, "cnn-a", 2, 12.5)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    (run_dir / "link.txt").symlink_to(secret)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "rank-0.log").write_text("SECRET")
    os.rename(run_dir / "logs", run_dir / "logs-real")
    (run_dir / "logs").symlink_to(outside)

    for path in ["link.txt", "logs/rank-0.log"]:
        status, _, body = get(dashboard + f"api/runs/cnn-a/files/{path}")
        assert status == 403 and b"SECRET" not in body, path
        assert "symbolic link" in json.loads(body)["error"]
    status, _, body = get(dashboard + "api/runs/cnn-a/logs/rank-0.log")
    assert status == 403 and b"SECRET" not in body
    files = {f["path"]: f["kind"] for f in get_json(dashboard + "api/runs/cnn-a")["files"]}
    assert files["link.txt"] == files["logs"] == "link"


def test_the_app_page_has_a_strict_content_security_policy(dashboard):
    status, headers, body = get(dashboard)

    assert status == 200 and b'<div id="app">' in body
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self' 'sha256-" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_requests_for_another_host_name_are_refused(dashboard):
    # A page on another site reaching 127.0.0.1 through DNS rebinding sends its own Host.
    status, _, body = get(dashboard + "api/runs", headers={"Host": "attacker.example:80"})

    assert status == 403 and b"127.0.0.1" in body


def get_as(address: str, port: int, path: str, host: str | None) -> tuple[int, bytes]:
    """A GET sent to address:port whose Host header says `host` (None: no Host at all), as a
    browser on a rebound name sends it."""
    conn = http.client.HTTPConnection(address, port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def lan_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, if it has one."""
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                return a.address
    return None


REBOUND = ["attacker.example", "attacker.example:8765", "127.0.0.1.attacker.example", "[::1",
           "localhost:x", "a b", ""]  # fmt: skip


def test_a_dashboard_bound_to_every_address_answers_only_this_machines_names(results):
    make_run(results, "cnn-a", 2, 12.5)
    with running_dashboard(results, host="0.0.0.0") as url:
        port = urlsplit(url).port
        assert port is not None
        for path in ["/", "/api/runs", "/static/style.css", "/api/stream?table=1"]:
            for host in REBOUND:
                status, body = get_as("127.0.0.1", port, path, host)
                assert status == 403, (path, host, status)
                assert b"--allow-host" in body and b"\n" not in body, body  # one line
            assert get_as("127.0.0.1", port, path, None)[0] == 400  # aiohttp wants a Host
        ours = ["127.0.0.1", "localhost", "[::1]", "0.0.0.0", socket.gethostname(),
                *([lan] if (lan := lan_address()) else [])]  # fmt: skip
        for host in ours:
            for shown in (host, f"{host}:{port}"):
                status, body = get_as("127.0.0.1", port, "/api/runs", shown)
                assert status == 200, (shown, body)
                assert [r["run_id"] for r in json.loads(body)["rows"]] == ["cnn-a"]


def test_a_dashboard_bound_to_a_lan_address_answers_only_that_address(results):
    lan = lan_address()
    if lan is None:
        pytest.skip("this machine has no IPv4 address but loopback")
    with running_dashboard(results, host=lan) as url:
        port = urlsplit(url).port
        assert port is not None
        assert get_as(lan, port, "/api/runs", f"{lan}:{port}")[0] == 200
        for host in [*REBOUND, "localhost", "127.0.0.1"]:
            status, body = get_as(lan, port, "/api/runs", host)
            assert status == 403 and lan.encode() in body, (host, status)


def test_a_name_allowed_with_allow_host_is_answered_and_no_other(results):
    with running_dashboard(results, allowed_hosts=("bench.example.org",)) as url:
        port = urlsplit(url).port
        assert port is not None
        for host in ["bench.example.org", "BENCH.example.org.:443", "localhost"]:
            assert get_as("127.0.0.1", port, "/api/runs", host)[0] == 200, host
        for host in ["example.org", "bench.example.org.attacker.example", "x.bench.example.org"]:
            assert get_as("127.0.0.1", port, "/api/runs", host)[0] == 403, host


def test_a_run_whose_state_cannot_be_opened_is_damaged_and_the_table_still_served(
    results, dashboard
):
    make_run(results, "good", 2, 12.5)
    bad = make_run(results, "bad", 2, 12.5)
    with unix_socket_at(bad / "state.json"):
        rows = {r["run_id"]: r for r in get_json(dashboard + "api/runs")["rows"]}
        assert rows["good"]["state"] == "SUCCEEDED"
        assert rows["bad"]["state"] == "DAMAGED"
        assert rows["bad"]["damaged"] == [
            {"file": "state.json", "problem": "cannot be read (No such device or address)"}
        ]
        assert get_json(dashboard + "api/runs/bad")["state"] == "DAMAGED"


def test_only_reads_are_served(dashboard):
    import urllib.request

    request = urllib.request.Request(dashboard + "api/runs", data=b"{}", method="POST")
    try:
        urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as err:
        assert err.code == 405
    else:
        raise AssertionError("POST was accepted")


def test_compare_marks_the_config_keys_that_differ(results, dashboard):
    make_run(results, "a", 2, 12.5, overrides=("lr=0.1",))
    make_run(results, "b", 2, 14.0, overrides=("lr=0.2",))

    page = get_json(dashboard + "api/compare?run=a&run=b")

    config = {c["key"]: c for c in page["config"]}
    assert config["lr"] == {"key": "lr", "values": [0.1, 0.2], "differs": True}
    assert not config["batch_size"]["differs"] and not config["run: workers"]["differs"]
    assert [r["run_id"] for r in page["runs"]] == ["a", "b"]
    run_times = next(s for s in page["summary"] if s["label"] == "run time")
    assert run_times["values"] == [12.5, 14.0]
    # tests/runner/rundirs.py: 100 steps of 2 ms forward, 1 ms communication...
    assert page["phase_ms"][0]["forward"] == pytest.approx(2.0)
    assert page["phase_ms"][1]["communication"] == pytest.approx(1.0)


def test_compare_of_an_unknown_run_is_not_found(results, dashboard):
    make_run(results, "a", 2, 12.5)

    assert get(dashboard + "api/compare?run=a&run=nope")[0] == 404


def make_study(results: Path, times_s: list[float | None]) -> str:
    """A study of cnn-digits on 2 workers whose runs took `times_s` to the target."""
    planned = []
    for i, t in enumerate(times_s):
        run_id = f"run-{i}"
        make_run(results, run_id, 2, t, created_at=f"2026-01-01T00:0{i}:00+00:00")
        planned.append(study.PlannedRun(2, (), i, i, run_id, "SUCCEEDED"))
    record = study.Study("study-x", "cnn-digits", (2,), {}, (), len(times_s), "local",
                         tuple(planned), state="complete")  # fmt: skip
    study.save(results, record)
    return record.study_id


def test_a_study_page_has_the_reports_tables_and_flags_the_outlier(results, dashboard):
    make_study(results, [10.0, 10.4, 9.8, 10.1, 25.0])

    [listed] = get_json(dashboard + "api/studies")
    page = get_json(dashboard + "api/studies/study-x")

    assert (listed["study_id"], listed["state"], listed["submitted"]) == ("study-x", "complete", 5)
    report = page["report"]
    titles = [t["title"] for t in report["tables"]]
    assert titles == ["Time to accuracy per cell", "Runs", "Reproducibility"]
    [cell] = report["cells"]
    by_run = {r["run_id"]: r for r in cell["runs"]}
    assert by_run["run-4"]["flag"] == "slow outlier"
    assert [r for r in by_run if by_run[r]["flag"]] == ["run-4"]
    # The MLPerf mean (5 runs) drops the fastest and the slowest; the flag is separate.
    assert {r for r in by_run if by_run[r]["dropped"]} == {"run-2", "run-4"}
    assert cell["mean_s"] == (10.0 + 10.4 + 10.1) / 3


def test_a_study_with_a_damaged_run_still_reports_the_others(results, dashboard):
    make_study(results, [10.0, 10.4, 9.8])
    (results / "run-1" / "summary.json").write_text("not json")

    page = get_json(dashboard + "api/studies/study-x")

    assert [p["run_id"] for p in page["problems"]] == ["run-1"]
    assert page["problems"][0]["file"] == "summary.json"
    [cell] = page["report"]["cells"]
    assert [r["run_id"] for r in cell["runs"]] == ["run-0", "run-2"]


def test_a_damaged_study_record_is_listed_with_its_problem(results, dashboard):
    (results / "studies" / "study-bad").mkdir(parents=True)
    (results / "studies" / "study-bad" / "study.json").write_text('{"runs": 3}')

    [listed] = get_json(dashboard + "api/studies")

    assert (
        listed["study_id"] == "study-bad"
        and "not a study record" in listed["damaged"][0]["problem"]
    )
    assert get(dashboard + "api/studies/study-bad")[0] == 403
