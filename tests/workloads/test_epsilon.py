import bz2
import json
import stat

import numpy as np
import pytest
import torch

from tests.datagen import epsilon_points, libsvm_text, write_epsilon, write_libsvm
from workloads.data import DataError
from workloads.data.epsilon import cache_dir, load_epsilon
from workloads.data.libsvm import convert, open_split, read_rows
from workloads.data.sampling import shuffled_shard_order, slice_batches, static_shard

CPU = torch.device("cpu")


def _prepare(root, num_train=40, num_test=12, suffix=".bz2"):
    return write_epsilon(root, num_train, num_test, suffix)


@pytest.mark.parametrize("suffix", [".bz2", ".txt"])
def test_conversion_round_trips_plain_and_bz2_libsvm_files(tmp_path, suffix):
    x, y, tx, ty = _prepare(tmp_path, suffix=suffix)
    train_x, train_y = open_split(cache_dir(tmp_path), "train")
    test_x, test_y = open_split(cache_dir(tmp_path), "test")
    assert isinstance(train_x, np.memmap) and train_x.dtype == np.float32
    assert np.allclose(train_x, x, rtol=1e-6) and np.array_equal(train_y, y)
    assert np.allclose(test_x, tx, rtol=1e-6) and np.array_equal(test_y, ty)


def test_omitted_features_are_zero(tmp_path):
    path = tmp_path / "sparse.txt"
    path.write_text("+1 2:0.5 7:-1.5\n-1\n")
    rows = list(read_rows(path, 8))
    assert rows[0][0] == 1 and rows[0][1].tolist() == [0, 0.5, 0, 0, 0, 0, -1.5, 0]
    assert rows[1][0] == -1 and not rows[1][1].any()


def test_each_rank_holds_only_its_static_shard_shuffled_once(tmp_path):
    x, y, _, _ = _prepare(tmp_path, num_train=41)
    shards = [load_epsilon(tmp_path, CPU, rank, 2, seed=3) for rank in range(2)]
    assert [s.num_train for s in shards] == [20, 20]  # the 41st sample is never trained on
    assert all(s.train_is_rank_shard for s in shards)
    order = shuffled_shard_order(20, 1, seed=3)
    assert sorted(order.tolist()) == list(range(20)) and order.tolist() != list(range(20))
    assert torch.allclose(shards[1].train_x, torch.from_numpy(x[20:40])[order])
    signs = torch.from_numpy(y[20:40])[order]
    assert shards[1].train_y.tolist() == [1.0 if v > 0 else 0.0 for v in signs]
    assert shards[0].num_test == shards[1].num_test == 12  # each evaluates its part of all
    assert torch.equal(load_epsilon(tmp_path, CPU, 1, 2, seed=3).train_x, shards[1].train_x)


def test_static_shards_are_disjoint_and_equal():
    bounds = [static_shard(103, 4, r) for r in range(4)]
    assert bounds == [(0, 25), (25, 50), (50, 75), (75, 100)]


def test_an_epoch_takes_every_contiguous_batch_once_in_a_fresh_order_the_short_one_last():
    batches = slice_batches(25, 4, rank=0, epoch=0, seed=0)
    assert sorted((b.start, b.stop) for b in batches[:-1]) == [(i, i + 4) for i in range(0, 24, 4)]
    assert (batches[-1].start, batches[-1].stop) == (24, 25)
    starts = [b.start for b in batches]
    assert starts != [b.start for b in slice_batches(25, 4, rank=0, epoch=1, seed=0)]
    assert starts != [b.start for b in slice_batches(25, 4, rank=1, epoch=0, seed=0)]
    assert starts == [b.start for b in slice_batches(25, 4, rank=0, epoch=0, seed=0)]
    assert [(b.start, b.stop) for b in slice_batches(8, 4, 0, 0, 0)][-1] != (8, 8)  # no empty


def test_missing_cache_names_the_fetch_command(tmp_path):
    with pytest.raises(DataError, match="runner data fetch epsilon --dir"):
        load_epsilon(tmp_path, CPU)


def test_truncated_bz2_names_the_file(tmp_path):
    x, y = epsilon_points(30, 50, seed=0)
    path = write_libsvm(tmp_path / "train.bz2", x, y)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError, match=r"train\.bz2: truncated or corrupt"):
        convert({"train": path}, tmp_path / "cache", 50)
    assert not (tmp_path / "cache").exists()
    assert list(tmp_path.iterdir()) == [path]  # no half-built cache left behind


def test_plain_file_cut_mid_line_is_reported_as_truncated(tmp_path):
    x, y = epsilon_points(3, 50, seed=0)
    path = tmp_path / "train.txt"
    path.write_text(libsvm_text(x, y)[:-40])
    with pytest.raises(DataError, match=r"train\.txt:3: ends mid-line"):
        convert({"train": path}, tmp_path / "cache", 50)


def test_file_cut_at_a_line_boundary_is_caught_by_the_expected_count(tmp_path):
    x, y = epsilon_points(5, 10, seed=0)
    path = write_libsvm(tmp_path / "train.txt", x, y)
    with pytest.raises(DataError, match="5 samples, expected 6"):
        convert({"train": path}, tmp_path / "cache", 10, expected_rows={"train": 6})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("+1 1:0.5 3:abc", "malformed features"),
        ("+1 1:0.5 3", "malformed features"),
        # As many numbers as two per colon, but not as index:value fields: never read as
        # pairs that the line does not hold (1:2:3 4 is not 1:2 3:4).
        ("+1 1:2:3 4", "malformed features"),
        ("+1 1 2:3:4", "malformed features"),
        ("+1 1 :0.5", "malformed features"),
        ("+1 1: 0.5", "malformed features"),
        ("+1 :1 2", "malformed features"),
        ("2 1:0.5", "label must be"),
        ("+1 3:0.5 2:0.1", "ascend"),
        ("+1 9:0.5", "within 1..8"),
        ("+1 0:0.5", "within 1..8"),
        ("+1 1:nan", "finite"),
        ("+1 1:inf", "finite"),
        ("-1 2:-inf", "finite"),
        ("+1 1:1e400", "finite"),
        ("+1 1:1e39", "float32"),
        ("", "label must be"),
    ],
)
def test_malformed_lines_are_reported_with_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.txt"
    path.write_text(f"-1 1:0.25\n{line}\n")
    with pytest.raises(DataError, match=rf"bad\.txt:2: .*{message}"):
        list(read_rows(path, 8))


def test_damaged_cache_is_detected_before_training(tmp_path):
    _prepare(tmp_path)
    data_file = cache_dir(tmp_path) / "train.x.f32"
    data_file.write_bytes(data_file.read_bytes()[:-4])
    with pytest.raises(DataError, match=r"expected .* the cache is damaged; run `runner data"):
        load_epsilon(tmp_path, CPU)


def test_conversion_replaces_an_old_cache_atomically(tmp_path):
    _prepare(tmp_path, num_train=10)
    _prepare(tmp_path, num_train=20)
    meta = json.loads((cache_dir(tmp_path) / "meta.json").read_text())
    assert meta["splits"]["train"]["rows"] == 20
    assert sorted(p.name for p in cache_dir(tmp_path).parent.iterdir()) == ["cache"]


def test_generated_bz2_is_real_bzip2(tmp_path):
    x, y = epsilon_points(2, 4, seed=0)
    path = write_libsvm(tmp_path / "f.bz2", x, y)
    assert bz2.decompress(path.read_bytes()).decode().count("\n") == 2


def test_tab_separated_fields_parse_as_libsvm_allows(tmp_path):
    path = tmp_path / "tabs.txt"
    path.write_text("+1\t2:0.5\t7:-1.5\n-1\t1:1\n")
    rows = list(read_rows(path, 8))
    assert rows[0][0] == 1 and rows[0][1].tolist() == [0, 0.5, 0, 0, 0, 0, -1.5, 0]
    assert rows[1][0] == -1 and rows[1][1].tolist() == [1, 0, 0, 0, 0, 0, 0, 0]


def test_an_empty_source_file_is_named_and_leaves_no_cache(tmp_path):
    x, y = epsilon_points(3, 8, seed=0)
    sources = {"train": write_libsvm(tmp_path / "train.txt", x, y), "test": tmp_path / "test.txt"}
    sources["test"].write_text("")
    with pytest.raises(DataError, match=r"test\.txt: no samples"):
        convert(sources, tmp_path / "cache", 8)
    assert not (tmp_path / "cache").exists()


FORMAT = {"format": "stackbench-libsvm-dense-v1", "num_features": 8}


@pytest.mark.parametrize(
    "meta",
    [FORMAT | {"splits": {"train": {"rows": 0}}}, FORMAT | {"splits": ["train"]}, ["a", "list"]],
)
def test_a_damaged_meta_file_is_named_not_mapped(tmp_path, meta):
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / "meta.json").write_text(json.dumps(meta))
    (directory / "train.x.f32").write_bytes(b"")
    (directory / "train.y.i8").write_bytes(b"")
    with pytest.raises(DataError, match=r"cache/meta\.json"):
        open_split(directory, "train")


ONE_ROW = {"train": {"rows": 1}}


@pytest.mark.parametrize(
    "damage",
    [
        lambda meta: meta.write_bytes(b"\xff\xfe not UTF-8"),
        lambda meta: (meta.unlink(), meta.mkdir()),
        lambda meta: meta.write_text(
            json.dumps(FORMAT | {"num_features": None, "splits": ONE_ROW})
        ),
        lambda meta: meta.write_text(json.dumps({"format": FORMAT["format"], "splits": ONE_ROW})),
        lambda meta: meta.write_text("[" * 100_000),  # json's parser: a RecursionError
    ],
    ids=["not-utf8", "a-directory", "num-features-null", "num-features-missing", "nested"],
)
def test_a_meta_file_of_any_damage_is_a_data_error(tmp_path, damage):
    _prepare(tmp_path)
    damage(cache_dir(tmp_path) / "meta.json")
    with pytest.raises(DataError, match=r"cache/meta\.json: .*run `runner data fetch epsilon"):
        load_epsilon(tmp_path, CPU)


def test_a_label_byte_that_is_neither_class_is_refused(tmp_path):
    _prepare(tmp_path, num_train=40)
    labels = cache_dir(tmp_path) / "train.y.i8"
    damaged = bytearray(labels.read_bytes())
    damaged[6] = 0  # would train as class 0, as every -1 does
    labels.write_bytes(bytes(damaged))
    with pytest.raises(DataError, match=r"train\.y\.i8: row 7 has label 0, expected \+1 or -1"):
        load_epsilon(tmp_path, CPU)


def test_the_cache_is_readable_by_other_users_of_a_shared_volume(tmp_path):
    _prepare(tmp_path, num_train=10)  # built in a mkdtemp directory, which is 0700
    assert stat.S_IMODE(cache_dir(tmp_path).stat().st_mode) == 0o755
