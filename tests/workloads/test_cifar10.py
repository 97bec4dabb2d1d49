import pickle

import numpy as np
import pytest
import torch

from tests.datagen import cifar_batch_bytes, write_cifar10
from workloads.data import DataError
from workloads.data.cifar10 import (
    channel_stats,
    load_cifar10,
    normalize,
    random_crop_flip,
    read_batch,
)

CPU = torch.device("cpu")


def test_loader_decodes_train_and_test_batches_to_uint8_and_normalized_tensors(tmp_path):
    directory = write_cifar10(tmp_path, per_train_batch=6, num_test=5)
    splits = load_cifar10(tmp_path, CPU)
    assert splits.train_x.shape == (30, 3, 32, 32) and splits.train_x.dtype == torch.uint8
    assert splits.test_x.shape == (5, 3, 32, 32) and splits.test_x.dtype == torch.float32
    assert splits.num_classes == 10 and splits.train_y.dtype == torch.long
    first, labels = read_batch(directory / "data_batch_1")
    # Batch rows are 1024 red, 1024 green, 1024 blue bytes, row-major: CHW.
    raw = pickle.loads((directory / "data_batch_1").read_bytes(), encoding="latin1")
    assert np.array_equal(first[2, 1].ravel(), raw["data"][2, 1024:2048])
    assert torch.equal(splits.train_x[:6], torch.from_numpy(first))
    assert splits.train_y[:6].tolist() == raw["labels"] == labels.tolist()


def test_training_statistics_normalize_each_channel_to_zero_mean_unit_std(tmp_path):
    write_cifar10(tmp_path, per_train_batch=8)
    splits = load_cifar10(tmp_path, CPU)
    train = normalize(splits.train_x, splits.augment.mean, splits.augment.inv_std)
    assert torch.allclose(train.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(train.std(dim=(0, 2, 3), unbiased=False), torch.ones(3), atol=1e-4)


def test_channel_stats_are_exact():
    images = np.random.default_rng(0).integers(0, 256, size=(7, 3, 5, 5), dtype=np.uint8)
    mean, std = channel_stats(images)
    assert np.allclose(mean, images.mean(axis=(0, 2, 3)))
    assert np.allclose(std, images.astype(np.float64).std(axis=(0, 2, 3)))


def test_missing_directory_names_the_fetch_command(tmp_path):
    with pytest.raises(DataError, match="runner data fetch cifar10 --dir"):
        load_cifar10(tmp_path, CPU)


def test_missing_batch_file_is_named(tmp_path):
    directory = write_cifar10(tmp_path)
    (directory / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3: missing"):
        load_cifar10(tmp_path, CPU)


def test_truncated_batch_is_reported_with_its_path(tmp_path):
    directory = write_cifar10(tmp_path)
    path = directory / "data_batch_2"
    path.write_bytes(path.read_bytes()[:-500])
    with pytest.raises(DataError, match="data_batch_2: corrupt or truncated"):
        load_cifar10(tmp_path, CPU)


def test_garbage_bytes_are_reported_as_corrupt(tmp_path):
    directory = write_cifar10(tmp_path)
    (directory / "test_batch").write_bytes(b"\x00not a pickle at all" * 10)
    with pytest.raises(DataError, match="test_batch: corrupt"):
        load_cifar10(tmp_path, CPU)


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    class Planted:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": Planted(), "labels": []}, protocol=2))
    with pytest.raises(DataError, match=r"print, not part of a CIFAR batch"):
        read_batch(path)


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}, "3072 bytes"),
        ({"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}, "uint8"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}, "2 integer labels"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, "labels must be in"),
        ({"images": []}, "'data' and 'labels'"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [[0], [1, 2]]}, "flat list of integers"),
    ],
)
def test_well_formed_pickles_with_the_wrong_content_are_refused(tmp_path, batch, message):
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DataError, match=message):
        read_batch(path)


# A pickle whose only global is the allowed _codecs.encode, called with a codec that does
# not exist (as a damaged or planted file may): LookupError inside the unpickler.
UNKNOWN_CODEC = b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x07\x00\x00\x00nocodec\x86R."


def test_a_pickle_naming_an_unknown_codec_is_corrupt(tmp_path):
    path = tmp_path / "data_batch_1"
    path.write_bytes(UNKNOWN_CODEC)
    with pytest.raises(DataError, match=r"data_batch_1: corrupt .*unknown encoding: nocodec"):
        read_batch(path)


# An array declared 2**50 bytes long (1 PiB, beyond any address space), through the allowed
# _reconstruct: numpy allocates it before any data is read, so no memory holds it.
HUGE_ARRAY = (
    b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
    b"\x8a\x07\x00\x00\x00\x00\x00\x00\x04\x85C\x01b\x87R."
)


def test_a_pickle_declaring_an_array_no_memory_holds_is_corrupt(tmp_path):
    path = tmp_path / "data_batch_1"
    path.write_bytes(HUGE_ARRAY)
    with pytest.raises(DataError, match=r"data_batch_1: corrupt .*Unable to allocate"):
        read_batch(path)


def test_a_batch_that_is_a_directory_is_named_unreadable(tmp_path):
    directory = write_cifar10(tmp_path)
    (directory / "data_batch_4").unlink()
    (directory / "data_batch_4").mkdir()
    with pytest.raises(DataError, match=r"data_batch_4: unreadable .*runner data fetch cifar10"):
        load_cifar10(tmp_path, CPU)


def _padded_crops(image: torch.Tensor, padding: int) -> list[torch.Tensor]:
    padded = torch.nn.functional.pad(image, (padding,) * 4)
    h, w = image.shape[-2:]
    crops = []
    for dy in range(2 * padding + 1):
        for dx in range(2 * padding + 1):
            crop = padded[:, dy : dy + h, dx : dx + w]
            crops += [crop, crop.flip(-1)]
    return crops


def test_every_augmented_image_is_a_padded_crop_or_its_mirror():
    images = torch.randint(1, 256, (16, 3, 8, 8), dtype=torch.uint8)
    out = random_crop_flip(images, torch.Generator().manual_seed(1), padding=2)
    assert out.shape == images.shape and out.dtype == torch.uint8
    for image, augmented in zip(images, out, strict=True):
        assert any(torch.equal(augmented, c) for c in _padded_crops(image, 2))


def test_augmentation_draws_offsets_and_flips_per_sample():
    images = torch.randint(1, 256, (1, 3, 8, 8), dtype=torch.uint8).repeat(64, 1, 1, 1)
    out = random_crop_flip(images, torch.Generator().manual_seed(2), padding=2)
    distinct = {tuple(o.flatten().tolist()) for o in out}
    assert len(distinct) > 20  # 50 possible outcomes; one shared draw would give 1
    assert any(torch.equal(o[:, :, 2:-2], images[0].flip(-1)[:, :, 2:-2]) for o in out)


def test_augmentation_is_reproducible_from_the_generator(tmp_path):
    write_cifar10(tmp_path)
    splits = load_cifar10(tmp_path, CPU)
    a = splits.augment(splits.train_x[:10], torch.Generator().manual_seed(5))
    b = splits.augment(splits.train_x[:10], torch.Generator().manual_seed(5))
    assert a.dtype == torch.float32 and torch.equal(a, b)


def test_channels_last_loading_gives_channels_last_batches(tmp_path):
    write_cifar10(tmp_path)
    splits = load_cifar10(tmp_path, CPU, memory_format="channels_last")
    batch = splits.augment(splits.train_x[:4], torch.Generator().manual_seed(0))
    assert batch.is_contiguous(memory_format=torch.channels_last)
    assert splits.test_x.is_contiguous(memory_format=torch.channels_last)


def test_generated_batches_use_the_original_pickle_layout():
    raw = pickle.loads(cifar_batch_bytes(3, 0), encoding="latin1")
    assert raw["data"].shape == (3, 3072) and raw["data"].dtype == np.uint8
