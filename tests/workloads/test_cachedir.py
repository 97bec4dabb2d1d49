"""The per-user kernel cache: made private, and refused (one line, with the fix) when it is a
link, another user's, or open to others; real directories and modes, no mocks."""

import os
import stat

import pytest

from workloads.runtime.cachedir import CacheRefused, compile_cache_dir, prepare


def test_the_cache_is_made_private_under_xdg_cache_home(tmp_path):
    path = compile_cache_dir({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert path == tmp_path / "xdg" / "stackbench" / "compile"
    assert prepare(path) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert prepare(path) == path  # and taken again as it is


def _refused(path, *words):
    with pytest.raises(CacheRefused) as caught:
        prepare(path)
    message = str(caught.value)
    assert ("\n" not in message and f"rm -rf {path}" in message) or "rm -rf" in message
    for word in words:
        assert word in message
    return message


def test_a_link_another_users_or_an_open_cache_is_refused(tmp_path):
    path = tmp_path / "stackbench" / "compile"
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    path.parent.mkdir()
    path.symlink_to(planted)
    _refused(path, "is a symbolic link", f"rm -rf {path}")
    path.unlink()
    path.mkdir(mode=0o700)
    path.chmod(0o777)
    _refused(path, "is open to other users (mode 777")
    path.chmod(0o700)
    os.chown(path, 12345, -1)  # root here: a directory of another uid
    _refused(path, "belongs to uid 12345")
    os.chown(path, os.geteuid(), -1)
    path.parent.chmod(0o777)  # someone else could swap compile/ for their own
    _refused(path.parent / "compile", f"rm -rf {path.parent}", "writable by other users")
    path.parent.chmod(0o755)
    assert prepare(path) == path
