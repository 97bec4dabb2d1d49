"""`runner data fetch` when things go wrong outside the archive: a server that cuts a download
short or does not speak HTTP, a mirror that is not a URL, a full disk, a --dir under a file,
two fetches at once, a fetch killed with SIGKILL. Each ends in one line (never a traceback)
or in a complete data set, and none leaves litter that a later fetch keeps."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.datagen import cifar_archive, epsilon_points
from tests.runner.test_data_fetch import _fetch, _publish, _serve_cifar, _serve_epsilon
from workloads.data import epsilon_cache_dir

ARCHIVE = "cifar-10-python.tar.gz"


@contextlib.contextmanager
def _raw_server(answer: Callable[[socket.socket], None], connections: int = 1) -> Iterator[str]:
    """A server on 127.0.0.1 for `connections` connections, each answered on a thread of its
    own by `answer` once the request is read."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=connections)

    def reply(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            answer(conn)

    def serve() -> None:
        with contextlib.suppress(OSError):  # the listener closed
            for _ in range(connections):
                conn, _ = listener.accept()
                threading.Thread(target=reply, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        thread.join(timeout=10)


def _chunked_cut_short(conn: socket.socket) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    conn.sendall(head + b"%x\r\n" % 50_000 + bytes(10_000))  # announces 50,000, sends 10,000


def _not_http(conn: socket.socket) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\nnot http at all\r\n\r\n")


@pytest.mark.parametrize(
    ("answer", "said"),
    [(_chunked_cut_short, "IncompleteRead"), (_not_http, "BadStatusLine: SSH-2.0-OpenSSH_9.6")],
)
def test_a_download_the_server_spoils_is_one_line_and_leaves_no_part_file(
    tmp_path, monkeypatch, answer, said
):
    _publish(monkeypatch, "cifar10", {ARCHIVE: cifar_archive()})
    root = tmp_path / "data"
    with _raw_server(answer) as url:
        result = _fetch("cifar10", root, url)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"downloading {url}/{ARCHIVE} failed ({said}" in result.output
    assert "check the network and retry" in result.output
    assert list((root / "downloads").iterdir()) == []


@pytest.mark.parametrize("mirror", ["mirror.internal/datasets", "ftp://host/x", "http://[::1"])
def test_a_mirror_that_urllib_cannot_fetch_from_is_a_usage_error(tmp_path, mirror):
    result = _fetch("cifar10", tmp_path / "data", mirror)
    assert result.exit_code == 2, result.output
    assert "Invalid value for --mirror" in result.output
    assert not (tmp_path / "data").exists()


def test_a_directory_under_a_file_is_one_line_naming_it(tmp_path, monkeypatch):
    _publish(monkeypatch, "cifar10", {ARCHIVE: cifar_archive()})
    (tmp_path / "file").write_text("not a directory")
    result = _fetch("cifar10", tmp_path / "file" / "data", "http://127.0.0.1:9")
    assert result.exit_code == 1, result.output
    assert "Not a directory" in result.output and "give another --dir" in result.output


@pytest.mark.parametrize("name", ["cifar10", "epsilon", "wikitext2"])
def test_a_dir_that_cannot_be_looked_into_is_one_line_naming_it(tmp_path, name):
    # ENAMETOOLONG from pathlib's is_file() (EACCES, to a user who is not root, alike) was a
    # traceback before anything was downloaded.
    result = _fetch(name, tmp_path / ("d" * 300), "http://127.0.0.1:9")
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"preparing {name} in" in result.output and "File name too long" in result.output


def test_a_link_planted_at_the_part_file_is_never_written_through(server, tmp_path, monkeypatch):
    # A shared data directory where someone put a link at the name the download is written
    # to: the download must replace the link, not overwrite the file it leads to.
    archive, url = _serve_cifar(server, monkeypatch)
    root = tmp_path / "data"
    (root / "downloads").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (root / "downloads" / f"{ARCHIVE}.part").symlink_to(victim)
    result = _fetch("cifar10", root, url)
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n"
    assert (root / "downloads" / ARCHIVE).read_bytes() == archive
    assert sorted(p.name for p in (root / "downloads").iterdir()) == [ARCHIVE]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("planted", ["fifo", "link to /dev/zero"])
def test_something_not_a_file_at_the_download_is_replaced_never_read(
    server, tmp_path, monkeypatch, planted
):
    # A FIFO (or a link to an endless device) where a verified download may be reused: its
    # digest would read for ever; it is fetched again over it instead.
    archive, url = _serve_cifar(server, monkeypatch)
    root = tmp_path / "data"
    (root / "downloads").mkdir(parents=True)
    if planted == "fifo":
        os.mkfifo(root / "downloads" / ARCHIVE)
    else:
        (root / "downloads" / ARCHIVE).symlink_to("/dev/zero")
    result = _fetch("cifar10", root, url)
    assert result.exit_code == 0, result.output
    assert (root / "downloads" / ARCHIVE).read_bytes() == archive


def test_a_forced_fetch_over_a_linked_data_set_replaces_the_link_never_its_target(
    server, tmp_path, monkeypatch
):
    # The batches moved to another disk and linked back: --force said "cannot unpack (Cannot
    # call rmtree on a symbolic link); delete it [the verified archive] and fetch again",
    # which never helped. The link is replaced; what it leads to is left as it was.
    _, url = _serve_cifar(server, monkeypatch)
    root = tmp_path / "data"
    assert _fetch("cifar10", root, url).exit_code == 0
    moved = tmp_path / "elsewhere" / "cifar-10-batches-py"
    moved.parent.mkdir()
    (root / "cifar-10-batches-py").rename(moved)
    (root / "cifar-10-batches-py").symlink_to(moved)
    before = {p.name: p.read_bytes() for p in moved.iterdir()}
    result = _fetch("cifar10", root, url, "--force")
    assert result.exit_code == 0, result.output
    prepared = root / "cifar-10-batches-py"
    assert prepared.is_dir() and not prepared.is_symlink()
    assert {p.name: p.read_bytes() for p in moved.iterdir()} == before
    assert sorted(p.name for p in prepared.iterdir()) == sorted(before)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a real full disk (needs root, as mount does)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_disk_that_fills_while_converting_is_named_in_one_line(server, small_disk, monkeypatch):
    # The downloads fit in 1 MiB; the converted float32 rows (640 KB more) do not.
    served, url = server
    x, y = epsilon_points(80, 2000, seed=0)
    _serve_epsilon(served, monkeypatch, (x, y), (x[:2], y[:2]),
                   expected_rows={"train": 80, "test": 2})  # fmt: skip
    result = _fetch("epsilon", small_disk, url)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "No space left on device" in result.output and "the disk is full" in result.output
    assert not epsilon_cache_dir(small_disk).exists()


# Runs `runner data fetch cifar10` in a process of its own, its archive published as the test's.
_FETCHER = textwrap.dedent(
    """
    import sys
    from runner.datasets import fetch as datasets
    from runner.datasets.fetch import DataSource, RemoteFile
    from runner.cli import main
    name, digest, root, url = sys.argv[1:]
    remote = RemoteFile("https://example.invalid/" + name, "md5", digest)
    prepare = datasets.DATASETS["cifar10"].prepare
    datasets.DATASETS["cifar10"] = DataSource("cifar10", (remote,), "test", prepare)
    sys.argv = ["runner", "data", "fetch", "cifar10", "--dir", root, "--mirror", url]
    main()
    """
)


def test_two_fetches_at_once_take_turns_and_both_end_with_the_data_set(tmp_path):
    archive = cifar_archive()
    requests, release = [], threading.Event()

    def slow(conn: socket.socket) -> None:
        # Held until the test releases it, then sent in two parts: two downloads, were they
        # let run together, would overlap.
        requests.append(conn)
        release.wait(30)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(archive))
        conn.sendall(archive[:40_000])
        time.sleep(0.3)
        conn.sendall(archive[40_000:])

    root = tmp_path / "data"
    processes: list[subprocess.Popen[bytes]] = []
    with _raw_server(slow, connections=2) as url:
        argv = [sys.executable, "-c", _FETCHER, ARCHIVE, hashlib.md5(archive).hexdigest()]
        argv += [str(root), url]
        try:
            processes.append(subprocess.Popen(argv, stderr=subprocess.PIPE))
            _until(lambda: len(requests) == 1, processes[0])
            processes.append(subprocess.Popen(argv, stderr=subprocess.PIPE))
            # The second waits for its turn and says so; unguarded, it would download too.
            said = _first_line(processes[1].stderr)
            if "waiting for another" not in said:
                _until(lambda: len(requests) == 2, processes[1])
            release.set()
            errors = [p.communicate(timeout=60)[1].decode() for p in processes]
        finally:
            release.set()
            for p in processes:
                p.kill()
                p.wait()
    assert [p.returncode for p in processes] == [0, 0], errors
    assert "waiting for another `runner data fetch`" in said
    assert len(requests) == 1  # the second found the first's data set
    assert (root / "downloads" / ARCHIVE).read_bytes() == archive
    assert len(list((root / "cifar-10-batches-py").iterdir())) == 6


def _until(done: Callable[[], bool], process: subprocess.Popen[bytes]) -> None:
    while not done():
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)


def _first_line(stream) -> str:
    """The first line `stream` gives within a few seconds, or "" (the reader does not block)."""
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout=5)
    return line[0].decode() if line else ""


def test_a_conversion_killed_with_sigkill_leaves_nothing_the_next_fetch_keeps(
    server, tmp_path, monkeypatch
):
    root = tmp_path / "data"
    cache = epsilon_cache_dir(root)
    cache.parent.mkdir(parents=True)
    # A converter that blocks reading its source (a FIFO nobody writes), inside its temporary
    # directory, then is killed there: what a SIGKILLed `runner data fetch epsilon` leaves.
    fifo = tmp_path / "source.fifo"
    os.mkfifo(fifo)
    code = (
        "import sys; from pathlib import Path; from workloads.data.libsvm import convert; "
        "convert({'train': Path(sys.argv[1])}, Path(sys.argv[2]), 2000)"
    )
    killed = subprocess.Popen([sys.executable, "-c", code, str(fifo), str(cache)])
    _until(lambda: any(cache.parent.glob(f".{cache.name}-*")), killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    left = list(cache.parent.glob(f".{cache.name}-*"))
    assert left and not cache.exists()

    served, url = server
    x, y = epsilon_points(4, 2000, seed=0)
    _serve_epsilon(served, monkeypatch, (x, y), (x, y), expected_rows={"train": 4, "test": 4})
    result = _fetch("epsilon", root, url)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in cache.parent.iterdir()) == ["cache"]
