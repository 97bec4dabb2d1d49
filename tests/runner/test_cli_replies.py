"""The command line's cache of replies (runner/cli/start.py, kept by runner/stamped.py): a
reply is served only while everything it came from is unchanged and the file is whole and
ours; otherwise the click group answers, and its reply replaces the cache; where no cache can
be kept, the command answers all the same.

Every run is the console script (or `python -m runner.cli`) in a process of its own
(tests/runner/startup_runs.py), which reports what it imported: a reply served from the cache
imports no click, one the group gave imports it. The plugin is installed the way pip leaves
one (a package and a dist-info folder with a `stackbench.benchmarks` entry point, on
PYTHONPATH), then edited and uninstalled; the cache file is cut short, damaged, replaced by a
link and handed to another user, each between two runs.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from runner import stamped
from tests.runner import startup_runs
from tests.runner.startup_runs import run
from tests.workloads.plugin_packages import VARIANT_PLUGIN, write_dist_info, write_package


@pytest.fixture(scope="module")
def pyc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bytecode tree the runs share (Python compiles the standard library into it once)."""
    return tmp_path_factory.mktemp("pyc")


@pytest.fixture
def env(tmp_path: Path, pyc: Path) -> dict[str, str]:
    """A user's environment with site/ (empty so far) on its path, and no cache yet."""
    startup_runs.fresh(pyc)
    (tmp_path / "site").mkdir()
    return startup_runs.environment(pyc, PYTHONPATH=str(tmp_path / "site"), COLUMNS="80")


def _install(site: Path, runs: int, age_s: float) -> None:
    """The plugin, or its source edited in place (so that nothing but the file changes: not
    the folder on sys.path, whose mtime every cache's stamp holds too), dated `age_s` back:
    Python's own bytecode check compares whole seconds (and the size, the same for each
    version), so versions dated apart are told apart however fast the test edits; and in the
    past, as no cache is written from a file changed while it was derived."""
    source = site / "minebench" / "__init__.py"
    if source.exists():
        source.write_text(textwrap.dedent(VARIANT_PLUGIN.format(runs=runs)).lstrip())
    else:
        write_package(site, "minebench", {"__init__.py": VARIANT_PLUGIN.format(runs=runs)})
    earlier = source.stat().st_mtime - age_s
    os.utime(source, (earlier, earlier))
    if not any(site.glob("*.dist-info")):
        write_dist_info(site, "mine-bench", "2.0", """
            [stackbench.benchmarks]
            mine = minebench:MINE
        """)  # fmt: skip


def _row(listing: startup_runs.Ran, name: str) -> str:
    rows = [line for line in listing.stdout.splitlines() if re.match(rf"{name}\s", line)]
    return rows[0] if rows else ""


def _reply_file(pyc: Path) -> Path:
    (found,) = pyc.rglob("cli-reply.*.cache")
    return found


def test_a_reply_follows_the_plugin_it_lists_and_the_packages_installed(tmp_path, env):
    """`runner benchmarks`' reply is recorded from the cards' cache, in a process that never
    imports the plugin: it still depends on the plugin's code, which the cards came from."""
    site = tmp_path / "site"
    _install(site, runs=3, age_s=20)
    derived = run(["--results-dir", "results", "benchmarks"], tmp_path, env)  # not served
    assert "minebench" in derived.modules  # the cards derived, and cached
    first = run(["benchmarks"], tmp_path, env)  # the group's reply, from the cached cards
    assert "3 runs" in _row(first, "mine") and first.stdout == derived.stdout
    assert "click" in first.modules and "minebench" not in first.modules
    served = run(["benchmarks"], tmp_path, env)
    assert served.reply == first.reply and "click" not in served.modules
    _install(site, runs=5, age_s=10)  # the plugin's code edited: the same size
    edited = run(["benchmarks"], tmp_path, env)
    assert "5 runs" in _row(edited, "mine") and "click" in edited.modules
    served = run(["benchmarks"], tmp_path, env)
    assert served.reply == edited.reply and "click" not in served.modules
    shutil.rmtree(next(site.glob("*.dist-info")))  # uninstalled
    gone = run(["benchmarks"], tmp_path, env)
    assert _row(gone, "mine") == "" and _row(gone, "cnn-digits") and "click" in gone.modules
    # Any package installed beside (a plugin could add a command): help is rendered again.
    helped = run(["--help"], tmp_path, env)
    assert "click" not in run(["--help"], tmp_path, env).modules
    write_dist_info(site, "other-thing", "1.0", "")
    again = run(["--help"], tmp_path, env)
    assert again.reply == helped.reply and "click" in again.modules


def _forged(tmp_path: Path, env: dict[str, str], pyc: Path) -> tuple[startup_runs.Ran, bytes]:
    """(click's reply to --help, a cache file that is whole, current and ours but says
    `forged`), the forgery shown served while it is trusted: what the tests refuse is only
    what they changed."""
    clicked = run(["--help"], tmp_path, env)
    cache = _reply_file(pyc)
    data = stamped.load(str(cache))
    assert data["payload"] == (clicked.stdout, "", 0)
    data["payload"] = ("forged\n", "", 0)
    forged = stamped.encode(data)
    cache.write_bytes(forged)
    assert run(["--help"], tmp_path, env).stdout == "forged\n"
    return clicked, forged


def _answered_by_click_and_replaced(clicked: startup_runs.Ran, ran: startup_runs.Ran, pyc: Path):
    assert ran.reply == clicked.reply and "click" in ran.modules
    cache = _reply_file(pyc)
    assert not cache.is_symlink() and cache.stat().st_uid == os.geteuid()
    assert stamped.load(str(cache))["payload"] == (clicked.stdout, "", 0)


def test_a_truncated_damaged_or_linked_reply_is_never_served(tmp_path, env, pyc):
    clicked, forged = _forged(tmp_path, env, pyc)
    cache = _reply_file(pyc)
    elsewhere = tmp_path / "elsewhere.cache"
    elsewhere.write_bytes(forged)
    for damage in (forged[:-3], forged.replace(b"forged", b"FORGED"), b"", b"\x00garbage"):
        cache.write_bytes(damage)
        _answered_by_click_and_replaced(clicked, run(["--help"], tmp_path, env), pyc)
    cache.unlink()
    cache.symlink_to(elsewhere)
    _answered_by_click_and_replaced(clicked, run(["--help"], tmp_path, env), pyc)
    assert elsewhere.read_bytes() == forged  # not written through either


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a file to another user needs root")
def test_a_reply_file_of_another_user_is_never_served(tmp_path, env, pyc):
    clicked, _ = _forged(tmp_path, env, pyc)
    os.chown(_reply_file(pyc), 4242, 4242)
    _answered_by_click_and_replaced(clicked, run(["--help"], tmp_path, env), pyc)


def test_python_m_runner_cli_is_answered_from_the_cache_too(tmp_path, env):
    first = run(["--help"], tmp_path, env, module=True)
    assert first.stdout.startswith("Usage: python -m runner.cli [OPTIONS]")  # click's name
    served = run(["--help"], tmp_path, env, module=True)
    assert served.reply == first.reply and "click" not in served.modules


def test_where_no_cache_can_be_kept_the_command_answers_all_the_same(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a bytecode tree under a file: nothing can be written there
    env = startup_runs.environment(blocked / "pyc", COLUMNS="80")
    clicked = run(["--help"], tmp_path, env, script=startup_runs.click_only(tmp_path))
    for _ in range(2):
        ran = run(["--help"], tmp_path, env)
        assert ran.reply == clicked.reply and "click" in ran.modules


def test_a_results_dir_click_would_refuse_or_resolve_goes_to_click(tmp_path, env):
    """`runner benchmarks` is served only where its --results-dir (./results here) passes
    click and own_folder without a word; else the group says what it says, every time."""
    click_only = startup_runs.click_only(tmp_path)
    (tmp_path / "results").write_text("")  # a file: click refuses it
    clicked = run(["benchmarks"], tmp_path, env, script=click_only)
    assert clicked.code == 2 and "is a file" in clicked.stderr
    for _ in range(2):
        ran = run(["benchmarks"], tmp_path, env)
        assert ran.reply == clicked.reply and "click" in ran.modules
    (tmp_path / "results").unlink()
    (tmp_path / "results").symlink_to(tmp_path / "elsewhere")  # own_folder resolves a link
    clicked = run(["benchmarks"], tmp_path, env, script=click_only)
    assert clicked.code == 0
    for _ in range(2):
        ran = run(["benchmarks"], tmp_path, env)
        assert ran.reply == clicked.reply and "click" in ran.modules
