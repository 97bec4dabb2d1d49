"""`runner data fetch wikitext2` against a local HTTP server serving generated archives with
the published layout, and WikiText-2 read back by workloads/data/wikitext.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runner import datasets
from tests.datagen import wikitext2_zip, zip_bytes
from tests.runner.test_data_fetch import _fetch, _publish
from workloads.data import DataError
from workloads.data.wikitext import load_wikitext

TRAIN = " = Valkyria = \n\n The game began . \n The  game\tended . \n"
VALID = " The game began . \n"
TEST = "\n ended . \n"


def _said(result) -> str:
    """The command's output with the console's line wrapping undone."""
    return " ".join(result.output.split())


def _serve(served: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (served / name).write_bytes(data)


def test_fetch_wikitext2_unpacks_the_files_and_load_wikitext_reads_them_as_word_ids(
    server, tmp_path, monkeypatch
):
    served, url = server
    archive = wikitext2_zip(TRAIN, VALID, TEST)
    _serve(served, {"wikitext-2-v1.zip": archive})
    _publish(monkeypatch, "wikitext2", {"wikitext-2-v1.zip": archive})
    root = tmp_path / "data"
    result = _fetch("wikitext2", root, url)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in root.iterdir()) == ["downloads", "wikitext-2"]
    assert (root / "downloads" / "wikitext-2-v1.zip").read_bytes() == archive

    corpus = load_wikitext(root / "wikitext-2")
    # Train's words in order of first appearance; every line, the empty one too, ends in <eos>.
    assert corpus.vocab == ("=", "Valkyria", "<eos>", "The", "game", "began", ".", "ended")
    assert corpus.vocab_size == 8
    assert corpus.train.dtype == np.int64
    assert corpus.train.tolist() == [0, 1, 0, 2, 2, 3, 4, 5, 6, 2, 3, 4, 7, 6, 2]
    assert corpus.valid.tolist() == [3, 4, 5, 6, 2]
    assert corpus.test.tolist() == [2, 7, 6, 2]
    assert _fetch("wikitext2", root, url).output.startswith("wikitext2 is already prepared")


def test_a_wikitext2_checksum_mismatch_leaves_nothing_prepared(server, tmp_path, monkeypatch):
    served, url = server
    archive = wikitext2_zip(TRAIN, VALID, TEST)
    _serve(served, {"wikitext-2-v1.zip": wikitext2_zip(TRAIN + " extra \n", VALID, TEST)})
    _publish(monkeypatch, "wikitext2", {"wikitext-2-v1.zip": archive})
    root = tmp_path / "data"
    result = _fetch("wikitext2", root, url)
    assert result.exit_code == 1
    assert "wikitext-2-v1.zip" in _said(result) and "does not match" in _said(result)
    assert [p.name for p in root.iterdir()] == ["downloads"]
    assert list((root / "downloads").iterdir()) == []


@pytest.mark.parametrize(
    "evil", ["../escaped.txt", "wikitext-2/../../escaped.txt", "/tmp/escaped.txt", "C:/x.txt"]
)
def test_a_zip_member_outside_the_directory_refuses_the_archive(
    server, tmp_path, monkeypatch, evil
):
    served, url = server
    members = {f"wikitext-2/wiki.{s}.tokens": b"a b\n" for s in ("train", "valid", "test")}
    archive = zip_bytes({**members, evil: b"gotcha"})
    _serve(served, {"wikitext-2-v1.zip": archive})
    _publish(monkeypatch, "wikitext2", {"wikitext-2-v1.zip": archive})
    root = tmp_path / "data"
    result = _fetch("wikitext2", root, url)
    assert result.exit_code == 1
    assert repr(evil) in _said(result) and "refusing the archive" in _said(result)
    assert [p.name for p in root.iterdir()] == ["downloads"]  # no wikitext-2/, no temp dir
    assert not list(tmp_path.rglob("escaped.txt"))


def test_load_wikitext_names_a_word_outside_the_training_vocabulary(tmp_path):
    directory = tmp_path / "wikitext-2"
    directory.mkdir()
    for split, text in (("train", TRAIN), ("valid", " The game \n zebra began \n"), ("test", TEST)):
        (directory / f"wiki.{split}.tokens").write_text(text)
    with pytest.raises(DataError, match=r"wiki\.valid\.tokens:2: word 'zebra' is not in") as err:
        load_wikitext(directory)
    assert f"runner data fetch wikitext2 --dir {tmp_path} --force" in str(err.value)


def test_load_wikitext_names_a_missing_file_and_the_fetch_command(tmp_path):
    directory = tmp_path / "wikitext-2"
    directory.mkdir()
    (directory / "wiki.train.tokens").write_text(TRAIN)
    with pytest.raises(DataError, match=r"wiki\.valid\.tokens not found") as err:
        load_wikitext(directory)
    assert f"runner data fetch wikitext2 --dir {tmp_path}`" in str(err.value)


def test_published_text_sources_pin_the_urls_and_checksums():
    wikitext = datasets.DATASETS["wikitext2"].files
    assert [(f.url, f.algorithm, f.digest) for f in wikitext] == [
        (
            "https://wikitext.smerity.com/wikitext-2-v1.zip",
            "md5",
            "542ccefacc6c27f945fb54453812b3cd",
        )
    ]


def test_an_unknown_data_set_lists_the_text_ones():
    result = _fetch("ptb", Path("unused"), "http://127.0.0.1:9")
    assert result.exit_code == 2 and "epsilon, wikitext2" in _said(result)


def test_the_text_fetch_path_imports_no_torch():
    code = (
        "import sys, runner.datasets, workloads.data.wikitext; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
