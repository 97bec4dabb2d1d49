"""`runner data fetch` against a local HTTP server serving generated files (the `server`
fixture, tests/runner/conftest.py)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from runner.cli import main
from runner.datasets import fetch as datasets
from runner.datasets.fetch import DataSource, RemoteFile
from tests.datagen import cifar_archive, epsilon_points, write_libsvm
from workloads.data import DataError, epsilon_cache_dir
from workloads.data.cifar10 import load_cifar10
from workloads.data.epsilon import load_epsilon
from workloads.data.libsvm import open_split


def _publish(monkeypatch, name: str, files: dict[str, bytes], algorithm="md5", **extra) -> None:
    """Register `files` as data set `name`'s published files (digests of these bytes)."""
    remotes = tuple(
        RemoteFile(
            f"https://example.invalid/{fname}", algorithm, hashlib.new(algorithm, data).hexdigest()
        )
        for fname, data in files.items()
    )
    prepare = datasets.DATASETS[name].prepare  # how the published data set is prepared
    monkeypatch.setitem(
        datasets.DATASETS, name, DataSource(name, remotes, "test", prepare, **extra)
    )


def _serve_epsilon(served, monkeypatch, train, test, algorithm="md5", **extra) -> None:
    """Serve and publish epsilon's two files, holding `train` and `test` ((x, y) each)."""
    files = {"epsilon_normalized.bz2": train, "epsilon_normalized.t.bz2": test}
    data = {name: write_libsvm(served / name, *xy).read_bytes() for name, xy in files.items()}
    _publish(monkeypatch, "epsilon", data, algorithm=algorithm, **extra)


def _fetch(name, root, url, *extra):
    args = ["data", "fetch", name, "--dir", str(root), "--mirror", url, *extra]
    return CliRunner().invoke(main, args)


def _serve_cifar(server, monkeypatch) -> tuple[bytes, str]:
    """A CIFAR-10 archive on the local server, published as the data set's: (it, the URL)."""
    served, url = server
    archive = cifar_archive()
    (served / "cifar-10-python.tar.gz").write_bytes(archive)
    _publish(monkeypatch, "cifar10", {"cifar-10-python.tar.gz": archive})
    return archive, url


def test_fetch_cifar10_downloads_verifies_and_unpacks_the_batches(server, tmp_path, monkeypatch):
    archive, url = _serve_cifar(server, monkeypatch)
    root = tmp_path / "data"
    result = _fetch("cifar10", root, url)
    assert result.exit_code == 0, result.output
    assert "ready" in result.output
    names = sorted(p.name for p in (root / "cifar-10-batches-py").iterdir())
    assert names == [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    assert (root / "downloads" / "cifar-10-python.tar.gz").read_bytes() == archive
    assert sorted(p.name for p in root.iterdir()) == ["cifar-10-batches-py", "downloads"]


def test_a_second_fetch_finds_the_data_prepared_and_downloads_nothing(
    server, tmp_path, monkeypatch
):
    served, url = server
    archive = cifar_archive()
    (served / "cifar-10-python.tar.gz").write_bytes(archive)
    _publish(monkeypatch, "cifar10", {"cifar-10-python.tar.gz": archive})
    assert _fetch("cifar10", tmp_path / "data", url).exit_code == 0
    (served / "cifar-10-python.tar.gz").unlink()  # a download now would fail
    result = _fetch("cifar10", tmp_path / "data", url)
    assert result.exit_code == 0 and "already prepared" in result.output


def test_a_checksum_mismatch_fails_naming_the_file_and_leaves_nothing(
    server, tmp_path, monkeypatch
):
    served, url = server
    archive = cifar_archive()
    (served / "cifar-10-python.tar.gz").write_bytes(archive[:-10] + b"tampered!!")
    _publish(monkeypatch, "cifar10", {"cifar-10-python.tar.gz": archive})
    root = tmp_path / "data"
    result = _fetch("cifar10", root, url)
    assert result.exit_code == 1
    assert "cifar-10-python.tar.gz" in result.output and "does not match" in result.output
    assert list((root / "downloads").iterdir()) == []  # no .part, no unverified file
    assert not (root / "cifar-10-batches-py").exists()


def test_a_missing_remote_file_is_an_error_naming_its_url(server, tmp_path, monkeypatch):
    _, url = server
    _publish(monkeypatch, "cifar10", {"cifar-10-python.tar.gz": b"x"})
    result = _fetch("cifar10", tmp_path / "data", url)
    assert result.exit_code == 1
    assert f"{url}/cifar-10-python.tar.gz" in result.output and "404" in result.output


def test_fetch_epsilon_downloads_both_splits_and_converts_them(server, tmp_path, monkeypatch):
    served, url = server
    x, y = epsilon_points(6, 2000, seed=0)
    tx, ty = epsilon_points(3, 2000, seed=1)
    _serve_epsilon(served, monkeypatch, (x, y), (tx, ty), algorithm="sha256",
                   expected_rows={"train": 6, "test": 3})  # fmt: skip
    root = tmp_path / "data"
    result = _fetch("epsilon", root, url)
    assert result.exit_code == 0, result.output
    train_x, train_y = open_split(epsilon_cache_dir(root), "train")
    test_x, _ = open_split(epsilon_cache_dir(root), "test")
    assert np.allclose(train_x, x, rtol=1e-6) and train_y.tolist() == y.tolist()
    assert test_x.shape == (3, 2000)


def test_fetch_epsilon_refuses_a_file_with_fewer_samples_than_published(
    server, tmp_path, monkeypatch
):
    served, url = server
    x, y = epsilon_points(4, 2000, seed=0)
    _serve_epsilon(served, monkeypatch, (x, y), (x, y), algorithm="sha256",
                   expected_rows={"train": 5, "test": 4})  # fmt: skip
    result = _fetch("epsilon", tmp_path / "data", url)
    assert result.exit_code == 1 and "4 samples, expected 5" in result.output
    assert not epsilon_cache_dir(tmp_path / "data").exists()


def _run_the_named_fix(err: pytest.ExceptionInfo[DataError], url: str) -> None:
    """Run the `runner data fetch ...` command a loader's error names (from the server)."""
    named = re.search(r"`runner (data fetch [^`]*)`", str(err.value))
    assert named is not None, err.value
    result = CliRunner().invoke(main, [*named.group(1).split(), "--mirror", url])
    assert result.exit_code == 0, result.output


def test_the_command_a_damaged_cifar_batch_names_repairs_it(server, tmp_path, monkeypatch):
    # The six files are there, so a fetch without --force finds cifar10 prepared and does
    # nothing: the loader's error must name the command that does put the batch right.
    _, url = _serve_cifar(server, monkeypatch)
    root = tmp_path / "data"
    assert _fetch("cifar10", root, url).exit_code == 0
    (root / "cifar-10-batches-py" / "data_batch_2").write_bytes(b"damaged")
    with pytest.raises(DataError, match="data_batch_2: corrupt") as err:
        load_cifar10(root, torch.device("cpu"))
    _run_the_named_fix(err, url)
    assert load_cifar10(root, torch.device("cpu")).num_train == 5 * 4


def test_the_command_a_damaged_epsilon_cache_names_repairs_it(server, tmp_path, monkeypatch):
    served, url = server
    x, y = epsilon_points(6, 2000, seed=0)
    _serve_epsilon(served, monkeypatch, (x, y), (x, y), expected_rows={"train": 6, "test": 6})
    root = tmp_path / "data"
    assert _fetch("epsilon", root, url).exit_code == 0
    (epsilon_cache_dir(root) / "train.y.i8").write_bytes(bytes([5] * 6))  # labels not +-1
    with pytest.raises(DataError, match=r"train\.y\.i8: row 1 has label 5") as err:
        load_epsilon(root, torch.device("cpu"))
    _run_the_named_fix(err, url)
    assert load_epsilon(root, torch.device("cpu")).num_train == 6


def test_an_unknown_data_set_is_a_usage_error():
    result = CliRunner().invoke(main, ["data", "fetch", "imagenet"])
    assert result.exit_code == 2 and "cifar10, epsilon" in result.output


def test_published_sources_pin_the_canonical_urls_and_checksums():
    cifar = datasets.DATASETS["cifar10"].files[0]
    assert cifar.url == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert (cifar.algorithm, cifar.digest) == ("md5", "c58f30108f718f92721af3b95e74349a")
    eps = datasets.DATASETS["epsilon"]
    assert [f.filename for f in eps.files] == ["epsilon_normalized.bz2", "epsilon_normalized.t.bz2"]
    assert eps.expected_rows == {"train": 400_000, "test": 100_000}


def test_the_fetch_path_imports_no_torch():
    code = (
        "import sys, runner.datasets.fetch, workloads.data, workloads.data.libsvm; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
