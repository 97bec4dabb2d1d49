"""`runner data fetch wikitext2|wmt16|wmt17` against a local HTTP server serving generated
archives with the published layouts, and WikiText-2 read back by workloads/data/wikitext.py.

The WMT tokenizer (workloads/data/translation.py) is replaced by a stand-in that records how
it is called, so these tests check the fetch and extraction, not the tokenization.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from runner.datasets import fetch as datasets
from runner.datasets import wmt
from tests.datagen import tgz_bytes, wikitext2_zip, wmt_sgml, zip_bytes
from tests.runner.test_data_fetch import _fetch, _publish
from workloads.data import DataError, translation_cache_dir
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


# --- WMT -------------------------------------------------------------------------------------
# Member names as the references give them (t2t translate_ende, tensorflow/datasets wmt.py,
# sacreBLEU wmt14/full), written out here rather than taken from runner.datasets.wmt.
EUROPARL = ("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en")
COMMONCRAWL = ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en")
NC11 = ("training-parallel-nc-v11.tgz", "training-parallel-nc-v11/news-commentary-v11.de-en")
NC12 = ("training-parallel-nc-v12.tgz", "training/news-commentary-v12.de-en")
TRAIN_ORDER = {"wmt16": (EUROPARL, COMMONCRAWL, NC11), "wmt17": (NC12, COMMONCRAWL, EUROPARL)}
MAX_TOKENS = {"wmt16": 50, "wmt17": 256}
TEST_EN = ["Gutach: Increased safety &amp; &quot;pedestrians&quot;", "  Two\t spaces  ", "x &lt; y"]
TEST_DE = ["Gutach: Mehr Sicherheit &amp; &quot;Fußgänger&quot;", "Zwei", "x &lt; y &gt; z"]


def _corpus_lines(stem: str, lang: str, n: int = 3) -> list[str]:
    return [f"{stem.rsplit('/', 1)[-1]} {lang} {i}" for i in range(n)]


def _wmt_archives(name: str, de_lines: int = 3) -> dict[str, bytes]:
    """The data set's archives; every training corpus has 3 lines (its German side
    `de_lines`), the last line of each English side without its newline."""
    archives = {}
    for archive, stem in TRAIN_ORDER[name]:
        members = {
            stem.replace("de-en", "fr-en") + ".en": b"a decoy: another language pair\n",
            f"{stem}.en": "\n".join(_corpus_lines(stem, "en")).encode(),
            f"{stem}.de": "".join(s + "\n" for s in _corpus_lines(stem, "de", de_lines)).encode(),
        }
        archives[archive] = tgz_bytes(members)
    archives["test-full.tgz"] = tgz_bytes(
        {
            "test-full/newstest2014-deen-src.de.sgm": wmt_sgml(["decoy"] * 3, "de", ref=False),
            "test-full/newstest2014-deen-src.en.sgm": wmt_sgml(TEST_EN, "en", ref=False),
            "test-full/newstest2014-deen-ref.de.sgm": wmt_sgml(TEST_DE, "de", ref=True),
            "test-full/newstest2014-deen-ref.en.sgm": wmt_sgml(["decoy"] * 3, "en", ref=True),
        }
    )
    return archives


@pytest.fixture
def translation(monkeypatch):
    """A stand-in for workloads.data.translation with its interface; returns its calls."""
    calls: list[dict] = []

    def prepare_parallel(
        splits,
        cache_dir,
        *,
        vocab_size,
        max_tokens_per_sentence=None,
        max_sentences_for_vocab=2_000_000,
        seed=0,
        on_progress=None,
    ):
        texts = {s: tuple(p.read_text() for p in pair) for s, pair in splits.items()}
        calls.append(
            {
                "splits": splits,
                "texts": texts,
                "cache_dir": cache_dir,
                "vocab_size": vocab_size,
                "max_tokens_per_sentence": max_tokens_per_sentence,
                "max_sentences_for_vocab": max_sentences_for_vocab,
                "seed": seed,
            }
        )
        on_progress("encoding train", 9)
        cache_dir.mkdir(parents=True)
        (cache_dir / "meta.json").write_text("{}")
        return cache_dir

    module = types.ModuleType("workloads.data.translation")
    module.prepare_parallel = prepare_parallel  # type: ignore[attr-defined]
    module.is_prepared = lambda cache_dir: (cache_dir / "meta.json").is_file()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "workloads.data.translation", module)
    return calls


def _publish_wmt(monkeypatch, served: Path, name: str, archives: dict[str, bytes]) -> None:
    _serve(served, archives)
    _publish(monkeypatch, name, archives, algorithm="sha256")


@pytest.mark.parametrize("name", ["wmt16", "wmt17"])
def test_fetch_wmt_extracts_aligned_raw_text_and_tokenizes_it(
    server, tmp_path, monkeypatch, translation, name
):
    served, url = server
    _publish_wmt(monkeypatch, served, name, _wmt_archives(name))
    root = tmp_path / "data"
    result = _fetch(name, root, url)
    assert result.exit_code == 0, result.output
    raw = root / name / "raw"
    assert sorted(p.name for p in raw.iterdir()) == ["test.de", "test.en", "train.de", "train.en"]
    for lang in ("en", "de"):  # the corpora in the reference's order, no decoys
        expected = [line for _, stem in TRAIN_ORDER[name] for line in _corpus_lines(stem, lang)]
        assert (raw / f"train.{lang}").read_text().splitlines() == expected
    assert (raw / "test.en").read_text().splitlines() == [
        'Gutach: Increased safety & "pedestrians"',
        "Two spaces",
        "x < y",
    ]
    assert (
        raw / "test.de"
    ).read_text() == 'Gutach: Mehr Sicherheit & "Fußgänger"\nZwei\nx < y > z\n'

    [call] = translation
    assert call["splits"] == {
        "train": (raw / "train.en", raw / "train.de"),
        "test": (raw / "test.en", raw / "test.de"),
    }
    assert call["texts"]["test"][1].startswith("Gutach: Mehr")  # raw/ was complete by then
    assert call["cache_dir"] == translation_cache_dir(root, name) == root / name / "cache"
    assert call["vocab_size"] == 32768
    assert call["max_tokens_per_sentence"] == MAX_TOKENS[name]
    assert (call["max_sentences_for_vocab"], call["seed"]) == (2_000_000, 0)  # the defaults
    assert "ready" in result.output
    assert sorted(p.name for p in (root / name).iterdir()) == ["cache", "raw"]  # no temp dirs

    again = _fetch(name, root, url)
    assert again.exit_code == 0 and "already prepared" in again.output and len(translation) == 1


def test_a_misaligned_corpus_is_refused_and_leaves_no_raw_text(
    server, tmp_path, monkeypatch, translation
):
    served, url = server
    _publish_wmt(monkeypatch, served, "wmt16", _wmt_archives("wmt16", de_lines=2))
    root = tmp_path / "data"
    result = _fetch("wmt16", root, url)
    assert result.exit_code == 1
    said = _said(result)
    assert "europarl-v7 is not line-aligned" in said
    assert "training/europarl-v7.de-en.en has 3 lines, training/europarl-v7.de-en.de has 2" in said
    assert not (root / "wmt16").exists() or list((root / "wmt16").iterdir()) == []
    assert translation == []


def test_a_wmt_checksum_mismatch_prepares_nothing(server, tmp_path, monkeypatch, translation):
    served, url = server
    archives = _wmt_archives("wmt17")
    _publish_wmt(monkeypatch, served, "wmt17", archives)
    _serve(served, {"test-full.tgz": archives["test-full.tgz"][:-8] + b"tampered"})
    root = tmp_path / "data"
    result = _fetch("wmt17", root, url)
    assert result.exit_code == 1
    assert "test-full.tgz" in _said(result) and "does not match" in _said(result)
    assert [p.name for p in root.iterdir()] == ["downloads"]
    assert "test-full.tgz" not in {p.name for p in (root / "downloads").iterdir()}
    assert translation == []


def test_a_missing_archive_member_is_an_error_naming_it(server, tmp_path, monkeypatch, translation):
    served, url = server
    archives = _wmt_archives("wmt16")
    archives["training-parallel-nc-v11.tgz"] = tgz_bytes({"news-commentary-v11.de-en.en": b"a\n"})
    _publish_wmt(monkeypatch, served, "wmt16", archives)
    result = _fetch("wmt16", tmp_path / "data", url)
    assert result.exit_code == 1
    assert "has no member training-parallel-nc-v11/news-commentary-v11.de-en.en" in _said(result)
    assert translation == []


def test_wmt_without_the_tokenizer_module_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "workloads.data.translation", None)  # import fails
    result = _fetch("wmt16", tmp_path / "data", "http://127.0.0.1:9")
    assert result.exit_code == 1
    assert "workloads.data.translation" in _said(result) and "pip install" in _said(result)


def test_published_text_sources_pin_the_urls_and_checksums():
    wikitext = datasets.DATASETS["wikitext2"].files
    assert [(f.url, f.algorithm, f.digest) for f in wikitext] == [
        (
            "https://wikitext.smerity.com/wikitext-2-v1.zip",
            "md5",
            "542ccefacc6c27f945fb54453812b3cd",
        )
    ]
    digests = {f.filename: (f.algorithm, f.digest[:12]) for f in datasets.DATASETS["wmt17"].files}
    assert digests == {
        "training-parallel-nc-v12.tgz": ("sha256", "2b45f30ef1d5"),
        "training-parallel-commoncrawl.tgz": ("sha256", "c7a74e2ea01a"),
        "training-parallel-europarl-v7.tgz": ("sha256", "0224c7c710c8"),
        "test-full.tgz": ("md5", "a8cd784e006f"),
    }
    nc11 = {f.filename: f for f in datasets.DATASETS["wmt16"].files}["training-parallel-nc-v11.tgz"]
    assert nc11.url == "http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz"
    assert nc11.digest[:12] == "cfe8ab047e05"
    for name, recipe in wmt.RECIPES.items():  # every archive a recipe reads is downloaded
        archives = {c.archive for c in (*recipe.train, recipe.test)}
        assert archives == {f.filename for f in datasets.DATASETS[name].files}


def test_an_unknown_data_set_lists_the_text_ones():
    result = _fetch("ptb", Path("unused"), "http://127.0.0.1:9")
    assert result.exit_code == 2 and "wikitext2, wmt16, wmt17" in _said(result)


def test_the_text_fetch_path_imports_no_torch():
    code = (
        "import sys, runner.datasets.fetch, runner.datasets.wmt, workloads.data.wikitext; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
