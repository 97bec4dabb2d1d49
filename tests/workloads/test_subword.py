import subprocess
import sys
from pathlib import Path

import pytest

from tests.datagen import parallel_sentences, write_lines, write_parallel
from workloads.data import DataError
from workloads.data.subword import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SubwordTokenizer,
    count_lines,
    read_lines,
    sample_line_numbers,
    train_subword_model,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_parallel(tmp_path_factory.mktemp("text"), "train", num=300, seed=0)


@pytest.fixture(scope="module")
def model(corpus: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_subword_model(list(corpus), tmp_path_factory.mktemp("m") / "bpe.model", 120)


def test_round_trip_restores_every_line_with_ids_in_range_and_no_specials(corpus, model):
    tokenizer = SubwordTokenizer.load(model)
    for path in corpus:
        for line in read_lines(path):
            ids = tokenizer.encode(line)
            assert ids, line
            assert all(0 <= i < tokenizer.vocab_size for i in ids)
            assert not {PAD_ID, UNK_ID, BOS_ID, EOS_ID} & set(ids), line
            assert tokenizer.decode(ids) == line


def test_special_ids_are_fixed(model):
    tokenizer = SubwordTokenizer.load(model)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)


def test_decode_stops_at_eos_and_drops_pad_and_bos(model):
    tokenizer = SubwordTokenizer.load(model)
    ids = tokenizer.encode("The green dog.")
    other = tokenizer.encode("Katze.")
    assert tokenizer.decode([BOS_ID, *ids, EOS_ID, *other, PAD_ID]) == "The green dog."
    assert tokenizer.decode([BOS_ID, ids[0], PAD_ID, *ids[1:], EOS_ID]) == "The green dog."


def test_encode_batch_matches_encode(model):
    tokenizer = SubwordTokenizer.load(model)
    lines = parallel_sentences(20, seed=5)[1]
    assert tokenizer.encode_batch(lines) == [tokenizer.encode(line) for line in lines]


def test_a_small_corpus_gives_fewer_pieces_than_asked_not_an_error(corpus, tmp_path):
    path = train_subword_model(list(corpus), tmp_path / "big.model", vocab_size=5000)
    assert 4 < SubwordTokenizer.load(path).vocab_size < 5000


def test_training_is_reproducible_byte_for_byte_across_processes_when_sampling(corpus, tmp_path):
    # another process: sentencepiece's own sampling differed between processes, seed or not
    code = (
        "import sys; from pathlib import Path; "
        "from workloads.data.subword import train_subword_model as train; "
        "train([Path(p) for p in sys.argv[1:3]], Path(sys.argv[3]), 120, "
        "max_sentences=250, seed=3)"
    )
    other = tmp_path / "other.model"
    subprocess.run([sys.executable, "-c", code, *map(str, corpus), str(other)], check=True)
    here = train_subword_model(
        list(corpus), tmp_path / "here.model", 120, max_sentences=250, seed=3
    )
    assert here.read_bytes() == other.read_bytes()


def test_line_sampling_is_seeded_sorted_and_without_replacement():
    a = sample_line_numbers(1000, 100, seed=1)
    assert a is not None
    assert len(set(a.tolist())) == 100 and list(a) == sorted(a) and a.max() < 1000
    assert (a == sample_line_numbers(1000, 100, seed=1)).all()
    assert not (a == sample_line_numbers(1000, 100, seed=2)).all()
    assert sample_line_numbers(100, 100, seed=1) is None


def test_a_vocabulary_smaller_than_the_alphabet_fails_naming_vocab_size(corpus, tmp_path):
    with pytest.raises(DataError, match="raise vocab_size"):
        train_subword_model(list(corpus), tmp_path / "tiny.model", vocab_size=10)
    assert list(tmp_path.iterdir()) == []  # no model file, no temporary file


def test_empty_files_fail_clearly(tmp_path):
    empty = write_lines(tmp_path / "empty.en", ["", ""])
    with pytest.raises(DataError, match="no text to learn a vocabulary from"):
        train_subword_model([empty], tmp_path / "m.model", vocab_size=100)


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes(b"gut\nschlecht \xff\n")
    with pytest.raises(DataError, match=r"bad.de:2: not UTF-8"):
        train_subword_model([path], tmp_path / "m.model", vocab_size=100)


def test_loading_something_that_is_not_a_model_is_a_data_error(corpus, tmp_path):
    with pytest.raises(DataError, match="not a readable sentencepiece model"):
        SubwordTokenizer.load(corpus[0])
    with pytest.raises(DataError, match="not a readable sentencepiece model"):
        SubwordTokenizer.load(tmp_path / "missing.model")


def test_tokenizer_is_immutable(model):
    tokenizer = SubwordTokenizer.load(model)
    with pytest.raises(AttributeError):
        tokenizer.path = Path("elsewhere")  # type: ignore[misc]


def test_lines_split_at_newline_only_and_count_like_read_lines(tmp_path):
    path = tmp_path / "odd.txt"
    path.write_bytes("a\r\nb\u2028c\rd\n\nlast".encode())
    assert list(read_lines(path)) == ["a", "b\u2028c\rd", "", "last"]
    assert count_lines(path)[0] == 4


def test_importing_the_text_modules_loads_neither_sentencepiece_nor_torch():
    code = (
        "import sys, workloads.data.subword, workloads.data.translation, "
        "workloads.data.token_batching; "
        "print(sorted(m for m in ('sentencepiece', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_text_file_that_cannot_be_read_is_a_data_error_naming_it(tmp_path):
    """A directory where a text file belongs (a damaged cache): one line naming the path,
    the error a run reports, not an IsADirectoryError traceback."""
    path = tmp_path / "test.ref.txt"
    path.mkdir()
    with pytest.raises(DataError, match=f"{path}: cannot be read"):
        list(read_lines(path))
