"""WikiText-2's reader on small files in its layout: what it refuses, and where it says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.data import DataError
from workloads.data.wikitext import EOS, load_wikitext


def _write(directory: Path, train: str, valid: str = "a b\n", test: str = "b a\n") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        (directory / f"wiki.{name}.tokens").write_bytes(text.encode("utf-8"))
    return directory


def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path):
    corpus = load_wikitext(_write(tmp_path / "wikitext-2", "\ufeffa b\nb a\n"))
    assert corpus.vocab == ("a", "b", EOS)


def test_an_unknown_word_is_placed_on_its_line_even_after_a_literal_eos_word(tmp_path):
    directory = _write(tmp_path / "wikitext-2", "a b\n", valid="a <eos> b\nb\na zzz\n")
    with pytest.raises(DataError, match=r"wiki\.valid\.tokens:3: word 'zzz'"):
        load_wikitext(directory)


@pytest.mark.parametrize("empty", ["train", "valid", "test"])
def test_an_empty_file_is_named_itself(tmp_path, empty):
    texts = {"train": "a b\n", "valid": "a\n", "test": "b\n"} | {empty: ""}
    directory = _write(tmp_path / "wikitext-2", **texts)
    with pytest.raises(DataError, match=rf"wiki\.{empty}\.tokens: empty"):
        load_wikitext(directory)


def test_a_split_that_is_a_directory_is_named_unreadable(tmp_path):
    directory = _write(tmp_path / "wikitext-2", "a b\n")
    (directory / "wiki.valid.tokens").unlink()
    (directory / "wiki.valid.tokens").mkdir()
    with pytest.raises(DataError, match=r"wiki\.valid\.tokens: unreadable .*runner data fetch"):
        load_wikitext(directory)
