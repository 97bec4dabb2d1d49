"""`runner benchmarks` from its cache of cards (runner/job/cards.py, kept by runner/stamped.py):
never a stale list.

Each listing runs in a fresh interpreter, as a user's does, with a bytecode tree of this
module's (PYTHONPYCACHEPREFIX, where the cache lives beside runner's bytecode; shared by
the tests so that Python compiles the standard library into it once, and emptied of cards
before each), and a benchmark plugin installed the way pip leaves one: a package and a
dist-info folder with a `stackbench.benchmarks` entry point, on PYTHONPATH. The plugin is
then edited, uninstalled, and the cache damaged, each between two listings. (With
--results-dir the listing is the click group's: the command line's cache of replies answers
only a bare `runner benchmarks`, tests/runner/test_cli_replies.py.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner import stamped
from runner.job import cards
from tests.workloads.plugin_packages import VARIANT_PLUGIN, write_dist_info, write_package
from workloads.plugins import points


@pytest.fixture(scope="module")
def pyc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pyc")


@pytest.fixture
def root(tmp_path: Path, pyc: Path) -> Path:
    """A folder whose site/ is on the listings' PYTHONPATH, pyc/ their bytecode tree."""
    (tmp_path / "pyc").symlink_to(pyc)
    for old in pyc.rglob("*.cache"):
        old.unlink()
    return tmp_path


def _install(root: Path, runs: int = 3) -> None:
    package = root / "site" / "minebench"
    if package.exists():
        shutil.rmtree(package)
    write_package(root / "site", "minebench",
                  {"__init__.py": VARIANT_PLUGIN.format(runs=runs)})  # fmt: skip
    if not any((root / "site").glob("*.dist-info")):
        write_dist_info(root / "site", "mine-bench", "2.0", """
            [stackbench.benchmarks]
            mine = minebench:MINE
        """)  # fmt: skip


def _listing(root: Path) -> dict[str, list[str]]:
    """Each benchmark's row of `runner benchmarks` (run in a fresh interpreter), by name."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPYCACHEPREFIX": str((root / "pyc").resolve()), "PYTHONPATH": str(root / "site")}
    proc = subprocess.run(
        [sys.executable, "-m", "runner.cli", "--results-dir", str(root / "results"),
         "benchmarks"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [re.split(r"\s{2,}", line) for line in proc.stdout.splitlines()]
    assert rows[0] == ["NAME", "TASK", "TARGET (LIGHT)", "DEFAULTS", "ORIGIN"], proc.stdout
    return {cells[0]: cells for cells in rows[1:]}


def _cache_file(root: Path) -> Path:
    (found,) = (root / "pyc").resolve().rglob("benchmark-cards.*.cache")
    return found


def _origin_of_mine(cache: Path) -> str:
    (mine,) = (c for c in stamped.load(str(cache))["payload"] if c["name"] == "mine")
    return str(mine["origin"])


def test_the_cards_are_the_registered_benchmarks_facts():
    listed = {c.name: c for c in cards.registered()}
    assert list(listed) == points.BENCHMARKS.names()
    digits = listed["cnn-digits"]
    assert (digits.origin, digits.target_metric, digits.target_value, digits.batch_size) == (
        "built in", "top1_accuracy", 0.95, 32,
    )  # fmt: skip
    assert listed["allreduce-micro"].target_metric is None  # a measurement: no target


def test_a_changed_or_uninstalled_plugin_is_never_listed_from_a_stale_cache(root):
    _install(root, runs=3)
    first = _listing(root)
    assert first["mine"][4] == "mine-bench==2.0" and first["cnn-digits"][4] == "built in"
    assert "3 runs" in first["mine"][3]
    assert _listing(root) == first  # from the cache: the same rows
    _install(root, runs=5)  # the plugin's source edited: the same size...
    # ...and dated 2 s on: Python's own bytecode check compares the source's size and mtime in
    # whole seconds, so an edit within the second of the last listing would import the old
    # bytecode whatever the cards' cache does (failed so on an idle CI machine).
    source = root / "site" / "minebench" / "__init__.py"
    later = source.stat().st_mtime + 2
    os.utime(source, (later, later))
    assert "5 runs" in _listing(root)["mine"][3]
    shutil.rmtree(next((root / "site").glob("*.dist-info")))  # uninstalled
    after = _listing(root)
    assert "mine" not in after and "cnn-digits" in after


def test_a_damaged_cache_is_derived_again_and_replaced(root):
    _install(root)
    first = _listing(root)
    cache = _cache_file(root)
    whole = cache.read_bytes()
    # Garbage; the right format line then garbage; cut short; one byte of a card changed
    # (the checksum's to catch: the stamp alone would not see it).
    forged = whole.replace(b"mine-bench==2.0", b"mine-bench==2.1")
    assert forged != whole
    for damage in (b"\x00garbage{", stamped.FORMAT + b"\x01\x02", whole[:-40], forged):
        cache.write_bytes(damage)
        assert _listing(root) == first
        assert _origin_of_mine(cache) == "mine-bench==2.0"  # replaced by a sound one
    # A cache whose stamp and checksum are right but whose cards are of another shape (one
    # missing a field, as a cache of an older Card would be) is derived again.
    data = stamped.load(str(cache))
    del data["payload"][0]["origin"]
    cache.write_bytes(stamped.encode(data))
    assert _listing(root) == first
    assert "origin" in stamped.load(str(cache))["payload"][0]


def test_a_cache_replaced_by_a_link_is_not_followed(root):
    _install(root)
    first = _listing(root)
    cache = _cache_file(root)
    data = stamped.load(str(cache))  # a sound cache in every other way, but for its origin
    for card in data["payload"]:
        card["origin"] = card["origin"].replace("mine-bench==2.0", "forged==6.6.6")
    elsewhere = root / "elsewhere.cache"
    elsewhere.write_bytes(stamped.encode(data))
    cache.unlink()
    cache.symlink_to(elsewhere)
    assert _listing(root) == first
    assert not cache.is_symlink() and _origin_of_mine(elsewhere) == "forged==6.6.6"
