"""`runner dashboard`: it serves until Ctrl-C, fails fast on a taken port, and stays off the
CLI's start-up path."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest
from click.testing import CliRunner

from runner.cli import main
from tests.runner.rundirs import make_run


def test_the_cli_starts_without_importing_the_dashboards_server():
    code = (
        "import sys; from click.testing import CliRunner; from runner.cli import main; "
        "CliRunner().invoke(main, ['--help']); CliRunner().invoke(main, ['dashboard', '--help']); "
        "print(sorted(m for m in ('aiohttp', 'runner.dashboard.server') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_aiohttp_it_says_what_to_install(tmp_path):
    # sys.modules[name] = None makes `import name` fail as a missing package does.
    code = "import sys; sys.modules['aiohttp'] = None; from runner.cli import main; main()"
    out = subprocess.run(
        [sys.executable, "-c", code, "--results-dir", str(tmp_path), "dashboard"],
        capture_output=True, text=True, timeout=30, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert out.returncode == 1
    assert "runner dashboard needs aiohttp" in out.stderr
    assert "pip install -c constraints.txt -e '.[dashboard]'" in " ".join(out.stderr.split())
    assert "Traceback" not in out.stderr + out.stdout


def test_a_taken_port_fails_at_once_naming_the_option(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main, ["--results-dir", str(tmp_path), "dashboard", "--port", str(port)]
        )
    assert result.exit_code == 1
    assert f"cannot serve on 127.0.0.1:{port}" in result.output and "--port N" in result.output
    assert "Traceback" not in result.output


def test_it_serves_the_results_directory_until_interrupted(tmp_path):
    make_run(tmp_path, "cnn-a", 2, 12.5)
    env = {**os.environ, "COLUMNS": "200"}
    cli = [sys.executable, "-c", "from runner.cli import main; main()"]
    proc = subprocess.Popen(
        [*cli, "--results-dir", str(tmp_path), "dashboard", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        # As from a terminal: a test run started in the background (`make test &`) ignores
        # SIGINT, and an ignored SIGINT is inherited, so Ctrl-C would never reach the CLI.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        url = line.split(" at ")[1].split(";")[0].strip()
        assert url.startswith("http://127.0.0.1:"), line
        with urllib.request.urlopen(url + "api/runs", timeout=10) as response:
            assert [r["run_id"] for r in json.load(response)["rows"]] == ["cnn-a"]
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        # Its output is read while it stops (a full pipe would block it), and shown if it fails.
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0, out[-3000:]
        assert "dashboard stopped" in out
    finally:
        proc.kill()
        proc.wait()


def test_a_name_given_with_allow_host_is_served_and_a_rebound_name_refused(tmp_path):
    make_run(tmp_path, "cnn-a", 2, 12.5)
    cli = [sys.executable, "-c", "from runner.cli import main; main()"]
    proc = subprocess.Popen(
        [*cli, "--results-dir", str(tmp_path), "dashboard", "--host", "0.0.0.0", "--port", "0",
         "--allow-host", "Bench.Example.org"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        url = line.split(" at ")[1].split(";")[0].strip()
        assert url.startswith("http://bench.example.org:"), line  # one a browser can open
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        assert f"also http://127.0.0.1:{port}/" in line  # and from this machine
        for host, expected in [("bench.example.org", 200), ("attacker.example", 403)]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/runs", headers={"Host": f"{host}:{port}"})
            assert conn.getresponse().status == expected, (host, line)
            conn.close()
    finally:
        proc.kill()
        proc.wait()


def test_an_allowed_host_or_an_address_not_of_this_machine_is_bad_input(tmp_path):
    for args, what in [
        (["--allow-host", "http://bench.example.org/"], "--allow-host"),
        (["--allow-host", "bench.example.org:9000"], "--allow-host"),
        (["--host", "203.0.113.7", "--port", "0"], "--host"),  # TEST-NET-3: not ours
    ]:
        result = CliRunner().invoke(main, ["--results-dir", str(tmp_path), "dashboard", *args])
        assert result.exit_code == 2, (args, result.output)
        assert f"Invalid value for {what}" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("bound", ["0.0.0.0", "::"])
def test_bound_to_every_address_it_prints_urls_a_browser_can_open_and_it_answers(bound):
    """0.0.0.0 is no address to open; what is printed instead is one the server's own host
    policy answers (and loopback, for this machine)."""
    from runner.cli.dashboard import open_urls
    from runner.dashboard.hosts import ANY_ADDRESS, policy

    shown = f"[{bound}]" if ":" in bound else bound
    urls = open_urls(f"http://{shown}:8765/", ())
    assert urls[-1] in ("http://127.0.0.1:8765/", "http://[::1]:8765/")
    for url in urls:
        netloc = urllib.parse.urlsplit(url).netloc
        assert urllib.parse.urlsplit(url).hostname not in ANY_ADDRESS
        assert policy(bound).allows(netloc), url
    assert open_urls("http://127.0.0.1:8765/", ()) == ["http://127.0.0.1:8765/"]
