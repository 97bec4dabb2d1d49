import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.datagen import parallel_sentences, write_lines, write_parallel
from workloads.data import DataError
from workloads.data import translation as tr
from workloads.data.subword import EOS_ID, PAD_ID
from workloads.data.translation import (
    is_prepared,
    load_parallel,
    load_references,
    load_sources,
    prepare_parallel,
    read_meta,
    tokenizer,
)

LONG = " ".join(["beautiful bridge"] * 40) + "."
MAX_TOKENS = 64
# (source, target) lines appended to generated ones: what training drops, tests keep.
TRAIN_EXTRA = [("", "Hund."), ("Dog.", "   "), (LONG, "Brücke."), ("Cat.", "Katze.")]
TEST_EXTRA = [("", ""), (LONG, LONG), ("The  dog  runs. ", "Hund  läuft  die. ")]


def write_split(directory: Path, name: str, num: int, seed: int, extra) -> tuple[Path, Path]:
    sources, targets = parallel_sentences(num, seed)
    sources += [s for s, _ in extra]
    targets += [t for _, t in extra]
    return (
        write_lines(directory / f"{name}.en", sources),
        write_lines(directory / f"{name}.de", targets),
    )


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    directory = tmp_path_factory.mktemp("raw")
    return {
        "train": write_split(directory, "train", 400, 0, TRAIN_EXTRA),
        "test": write_split(directory, "test", 30, 1, TEST_EXTRA),
        "valid": write_parallel(directory, "valid", 5, seed=2),
    }


@pytest.fixture(scope="module")
def progress() -> list[tuple[str, int]]:
    return []


@pytest.fixture(scope="module")
def cache(raw, progress, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_parallel(
        raw,
        tmp_path_factory.mktemp("data") / "cache",
        vocab_size=150,
        max_tokens_per_sentence=MAX_TOKENS,
        on_progress=lambda stage, pairs: progress.append((stage, pairs)),
    )


def lines(path: Path) -> list[str]:
    return path.read_bytes().decode().split("\n")[:-1]


def test_counts_and_dropped_pairs_are_recorded(cache):
    splits = read_meta(cache)["splits"]
    assert splits["train"]["sentences"] == 401  # 400 + "Cat."; empty x2 and long dropped
    assert splits["train"]["dropped"] == {"empty": 2, "too_long": 1}
    assert splits["test"]["sentences"] == 30 + len(TEST_EXTRA)
    assert splits["test"]["dropped"] == {"empty": 0, "too_long": 0}
    assert splits["valid"]["sentences"] == 5
    for split in splits:
        data = load_parallel(cache, split)
        assert data.num_sentences == splits[split]["sentences"]
        assert len(data.src) == splits[split]["src_tokens"]
        assert len(data.tgt) == splits[split]["tgt_tokens"]


def test_meta_records_vocabulary_specials_and_the_inputs(cache, raw):
    meta = read_meta(cache)
    assert meta["vocab_size"] == tokenizer(cache).vocab_size <= 150
    assert meta["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    source = meta["splits"]["train"]["source"]
    assert source["file"] == "train.en"
    assert source["sha256"] == hashlib.sha256(raw["train"][0].read_bytes()).hexdigest()
    assert meta["splits"]["test"]["target"]["lines"] == 30 + len(TEST_EXTRA)


def test_every_sentence_ends_with_its_only_eos(cache):
    for split in ("train", "test"):
        data = load_parallel(cache, split)
        for i in range(data.num_sentences):
            for ids in data.pair(i):
                assert ids[-1] == EOS_ID
                assert EOS_ID not in ids[:-1]
        assert (data.src_lengths >= 1).all() and (data.tgt_lengths >= 1).all()


def test_kept_training_pairs_are_the_tokenized_lines_in_order(cache, raw):
    words = tokenizer(cache)
    kept = [
        (s, t)
        for s, t in zip(lines(raw["train"][0]), lines(raw["train"][1]), strict=True)
        if s.strip() and t.strip() and s != LONG
    ]
    data = load_parallel(cache, "train")
    assert data.num_sentences == len(kept)
    for i, (source, target) in enumerate(kept):
        src, tgt = data.pair(i)
        assert list(src[:-1]) == words.encode(source)
        assert words.decode(tgt) == target


def test_test_pairs_are_never_dropped(cache):
    data = load_parallel(cache, "test")
    empty, long = 30, 31
    assert data.src_lengths[empty] == data.tgt_lengths[empty] == 1  # EOS alone
    assert data.tgt_lengths[long] > MAX_TOKENS


def test_references_and_sources_are_the_raw_lines_not_decoded_ids(cache, raw):
    references = load_references(cache, "test")
    assert references == lines(raw["test"][1])
    assert load_sources(cache, "test") == lines(raw["test"][0])
    assert load_references(cache, "valid") == lines(raw["valid"][1])
    # decoding normalises whitespace: a reference rebuilt from ids would not be the original
    last = load_parallel(cache, "test").pair(len(references) - 1)[1]
    assert tokenizer(cache).decode(last) != references[-1] == "Hund  läuft  die. "


def test_padded_batches_pad_on_the_right_to_the_longest(cache):
    data = load_parallel(cache, "test")
    rows = [3, 30, 31]
    src, src_lengths, tgt, tgt_lengths = data.padded(rows, PAD_ID)
    assert src.dtype == tgt.dtype == np.int64
    assert src.shape == (3, data.src_lengths[rows].max())
    assert tgt.shape == (3, data.tgt_lengths[rows].max())
    assert list(src_lengths) == list(data.src_lengths[rows])
    for b, i in enumerate(rows):
        want_src, want_tgt = data.pair(i)
        assert list(src[b, : src_lengths[b]]) == list(want_src)
        assert (src[b, src_lengths[b] :] == PAD_ID).all()
        assert list(tgt[b, : tgt_lengths[b]]) == list(want_tgt)
        assert (tgt[b, tgt_lengths[b] :] == PAD_ID).all()
    assert data.padded([], PAD_ID)[0].shape == (0, 0)


def test_progress_reports_the_vocabulary_then_every_split_to_its_end(progress, cache):
    assert progress[0] == ("vocabulary", 0)
    last = dict(progress)
    assert last["train"] == 404 and last["test"] == 33 and last["valid"] == 5


def test_misaligned_files_fail_naming_both_files_and_counts_before_any_work(tmp_path):
    src = write_lines(tmp_path / "a.en", ["One.", "Two.", "Three."])
    tgt = write_lines(tmp_path / "a.de", ["Eins.", "Zwei."])
    train = write_parallel(tmp_path, "train", 20, seed=0)
    with pytest.raises(DataError, match=r"a\.en has 3 lines but .*a\.de has 2"):
        prepare_parallel({"train": train, "test": (src, tgt)}, tmp_path / "c", vocab_size=100)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a.en", "a.de", "train.en", "train.de"]
    )


def test_a_failure_midway_leaves_no_cache_and_no_temporary_directory(tmp_path, monkeypatch):
    train = write_parallel(tmp_path / "raw", "train", 50, seed=0)
    test = write_parallel(tmp_path / "raw", "test", 5, seed=1)

    def interrupted(source: Path, dest: Path) -> None:
        raise KeyboardInterrupt  # after the training split has been written

    monkeypatch.setattr(tr, "_copy_lines", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_parallel({"train": train, "test": test}, tmp_path / "c", vocab_size=100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]
    assert not is_prepared(tmp_path / "c")


def test_a_failed_rebuild_keeps_the_previous_cache_and_a_good_one_replaces_it(
    tmp_path, monkeypatch
):
    splits = {"train": write_parallel(tmp_path / "raw", "train", 50, seed=0)}
    cache = prepare_parallel(splits, tmp_path / "c", vocab_size=100, seed=0)
    before = (cache / "meta.json").read_text()
    with monkeypatch.context() as patch:
        patch.setattr(tr, "train_subword_model", lambda *a, **k: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            prepare_parallel(splits, tmp_path / "c", vocab_size=100, seed=1)
    assert (cache / "meta.json").read_text() == before
    prepare_parallel(splits, tmp_path / "c", vocab_size=100, seed=1)
    assert read_meta(cache)["vocab_training"]["seed"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "raw"]
    assert load_parallel(cache, "train").num_sentences == 50


def test_a_missing_cache_says_which_fetch_command_to_run(tmp_path):
    assert not is_prepared(tmp_path)
    with pytest.raises(DataError, match="runner data fetch wmt17"):
        load_parallel(tmp_path, "train")
    with pytest.raises(DataError, match="runner data fetch wmt16"):
        load_references(tmp_path, "test", dataset="wmt16")
    with pytest.raises(DataError, match="runner data fetch wmt16"):
        tokenizer(tmp_path, dataset="wmt16")


def test_a_damaged_cache_is_a_data_error(cache, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in cache.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    truncated = copy / "test.src.npy"
    truncated.write_bytes(truncated.read_bytes()[:-8])
    with pytest.raises(DataError, match=r"test\.src.*runner data fetch wmt17"):
        load_parallel(copy, "test")
    (copy / "valid.ref.txt").unlink()
    with pytest.raises(DataError, match=r"valid\.ref\.txt: missing"):
        load_references(copy, "valid")
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "format": "old"}))
    assert not is_prepared(copy)
    with pytest.raises(DataError, match="format 'old'"):
        load_parallel(copy, "train")


def test_a_damaged_cache_names_the_fetch_that_rebuilds_it_there(cache, tmp_path):
    # meta.json is intact, so the fetch takes the data set for prepared: only --force, into
    # the run's data directory, rebuilds it (not the default directory's).
    copy = tmp_path / "root" / "wmt16" / "cache"
    copy.mkdir(parents=True)
    for path in cache.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    (copy / "train.tgt.offsets.npy").write_bytes(b"damaged")
    assert is_prepared(copy)
    fix = f"run `runner data fetch wmt16 --dir {tmp_path / 'root'} --force`"
    with pytest.raises(DataError, match=re.escape(fix)):
        load_parallel(copy, "train", dataset="wmt16")
    (copy / "test.ref.txt").write_text("one line\n")
    with pytest.raises(DataError, match=re.escape(fix)):
        load_references(copy, "test", dataset="wmt16")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"splits": None}, "expected its splits"),
        ({"splits": {"test": {"sentences": 3}}}, r"split 'test': expected its counts"),
        ({"splits": {"test": ["a", "list"]}}, r"split 'test': expected its counts"),
        ({"subword_model": "../../outside.model"}, "subword_model .*: expected a file name"),
        ({"subword_model": None}, "subword_model None: expected a file name"),
    ],
)
def test_a_meta_file_missing_what_the_readers_use_is_a_data_error(cache, tmp_path, change, message):
    copy = tmp_path / "copy"
    copy.mkdir()
    meta = json.loads((cache / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps(meta | change))
    for read in (lambda: load_parallel(copy, "test"), lambda: tokenizer(copy)):
        with pytest.raises(DataError, match=rf"meta\.json: {message}.*runner data fetch wmt17"):
            read()


def test_a_meta_file_that_is_a_directory_is_a_data_error(tmp_path):
    (tmp_path / "meta.json").mkdir()
    with pytest.raises(DataError, match=r"meta\.json: corrupt .*runner data fetch wmt17"):
        load_parallel(tmp_path, "train")


def test_a_meta_file_nested_too_deeply_is_a_data_error(tmp_path):
    (tmp_path / "meta.json").write_text("[" * 100_000)  # hostile: json recurses per level
    with pytest.raises(DataError, match=r"meta\.json: corrupt \(nested too deeply\)"):
        load_parallel(tmp_path, "train")


def test_unknown_splits_and_training_references_are_data_errors(cache):
    with pytest.raises(DataError, match=r"no split 'dev' \(has train, test, valid\)"):
        load_parallel(cache, "dev")
    with pytest.raises(DataError, match="evaluation splits only"):
        load_references(cache, "train")


def test_arguments_are_checked_before_any_work(tmp_path):
    test = write_parallel(tmp_path, "test", 5, seed=1)
    with pytest.raises(ValueError, match="must include 'train'"):
        prepare_parallel({"test": test}, tmp_path / "c", vocab_size=100)
    with pytest.raises(ValueError, match="at least 2"):
        prepare_parallel({"train": test}, tmp_path / "c", vocab_size=100, max_tokens_per_sentence=1)
    with pytest.raises(DataError, match=r"missing\.en: no such file"):
        prepare_parallel(
            {"train": (tmp_path / "missing.en", test[1])}, tmp_path / "c", vocab_size=100
        )
    assert not (tmp_path / "c").exists()
