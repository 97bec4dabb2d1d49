"""CIFAR-10 from the canonical python-pickle batches, and its training augmentation.

Reads `<data root>/cifar-10-batches-py/` as unpacked from cifar-10-python.tar.gz
(`runner data fetch cifar10` puts it there): data_batch_1..5 for training, test_batch for
testing. Each batch is decoded once into uint8 tensors; the training images stay uint8 on
the training device and every step augments its batch there with batched tensor ops
(He et al.: 4-pixel zero padding + random 32x32 crop, random horizontal flip, per-channel
normalization). The test images are normalized once. No per-sample Python anywhere.

The batches are pickles, which can run code when loaded; they are read with an unpickler
that resolves only the few numpy names an array needs, so a planted file cannot.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from workloads.data import CIFAR10_FILES, CIFAR10_SUBDIR, DataError, Splits

TRAIN_FILES, TEST_FILE = CIFAR10_FILES[:5], CIFAR10_FILES[5]
NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
CROP_PADDING_PX = 4

# The only globals a CIFAR batch pickle (a dict of a numpy array and lists) refers to;
# _codecs.encode appears when Python 3 pickled the array's bytes with protocol 2.
_ALLOWED_GLOBALS = {
    ("_codecs", "encode"): ("_codecs", "encode"),
    ("numpy.core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"): ("numpy", "ndarray"),
    ("numpy", "dtype"): ("numpy", "dtype"),
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        target = _ALLOWED_GLOBALS.get((module, name))
        if target is None:
            raise pickle.UnpicklingError(f"refers to {module}.{name}, not part of a CIFAR batch")
        return super().find_class(*target)


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [N, 3, 32, 32], labels int64 [N]) of one batch file; DataError if bad."""
    try:
        with open(path, "rb") as f:
            # latin1: the batches were pickled by Python 2; numpy decodes its arrays from it.
            batch = _BatchUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise DataError(f"{path}: missing; {_fetch_hint(path)}") from None
    except OSError as err:  # a directory, no permission, an I/O error
        raise DataError(f"{path}: unreadable ({err}); {_fetch_hint(path, force=True)}") from None
    # LookupError: _codecs.encode asked for a codec that does not exist. MemoryError: an
    # array whose declared shape no memory holds (numpy allocates it before any data).
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            LookupError, MemoryError) as err:  # fmt: skip
        message = f"{path}: corrupt or truncated pickle ({err}); {_fetch_hint(path, force=True)}"
        raise DataError(message) from None
    return _validated(batch, path)


def _validated(batch: Any, path: Path) -> tuple[np.ndarray, np.ndarray]:
    def bad(what: str) -> DataError:
        return DataError(f"{path}: not a CIFAR-10 batch: {what}; {_fetch_hint(path, force=True)}")

    if not isinstance(batch, dict) or "data" not in batch or "labels" not in batch:
        raise bad("expected a dict with 'data' and 'labels'")
    data = batch["data"]
    try:
        labels = np.asarray(batch["labels"])
    except (ValueError, TypeError, OverflowError):  # ragged lists and the like
        raise bad("'labels' is not a flat list of integers") from None
    row_size = int(np.prod(IMAGE_SHAPE))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise bad(f"'data' must be a 2-d uint8 array, got {type(data).__name__}")
    if data.shape[1] != row_size:
        raise bad(f"'data' rows must hold {row_size} bytes (3x32x32), got {data.shape[1]}")
    if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise bad(f"expected {data.shape[0]} integer labels, got shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise bad(f"labels must be in 0..{NUM_CLASSES - 1}")
    return data.reshape(-1, *IMAGE_SHAPE), labels.astype(np.int64)


def _fetch_hint(path: Path, force: bool = False) -> str:
    """The command that puts the batch at `path` right. A damaged batch needs --force: the
    fetch takes the six files' presence for a prepared data set and would do nothing."""
    return (
        f"run `runner data fetch cifar10 --dir {path.parent.parent}{' --force' if force else ''}`"
    )


def channel_stats(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-channel mean and standard deviation (in 0..255 units) of uint8 images
    [N, C, H, W], from per-channel histograms: no float copy of the data set."""
    hist = np.stack([np.bincount(images[:, c].ravel(), minlength=256) for c in range(3)])
    values = np.arange(256, dtype=np.float64)
    count = hist.sum(axis=1)
    mean = hist @ values / count
    var = hist @ values**2 / count - mean**2
    return mean, np.sqrt(var)


@dataclass(frozen=True)
class CifarAugment:
    """Pad + random crop + random flip + normalize, for a uint8 batch on its device."""

    mean: torch.Tensor  # [1, C, 1, 1], 0..255 units
    inv_std: torch.Tensor  # [1, C, 1, 1]
    memory_format: torch.memory_format = torch.contiguous_format

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        cropped = random_crop_flip(images, generator, CROP_PADDING_PX)
        return normalize(cropped, self.mean, self.inv_std, self.memory_format)


def random_crop_flip(
    images: torch.Tensor, generator: torch.Generator, padding: int
) -> torch.Tensor:
    """Each image zero-padded by `padding`, cropped back to its size at a uniform random
    offset and mirrored left-right with probability 1/2: two gathers for the whole batch,
    rows then columns (one gather indexing all four dimensions cost twice as much)."""
    n, c, h, w = images.shape
    device = images.device
    padded = F.pad(images, (padding, padding, padding, padding))
    offsets = torch.randint(0, 2 * padding + 1, (2, n), generator=generator, device=device)
    flip = torch.randint(0, 2, (n, 1), generator=generator, device=device).bool()
    rows = offsets[0, :, None] + torch.arange(h, device=device)  # [n, h]
    cols = offsets[1, :, None] + torch.arange(w, device=device)  # [n, w]
    cols = torch.where(flip, cols.flip(1), cols)  # a mirrored crop reads its columns reversed
    cropped_rows = padded.gather(2, rows[:, None, :, None].expand(n, c, h, w + 2 * padding))
    return cropped_rows.gather(3, cols[:, None, None, :].expand(n, c, h, w))


def normalize(
    images: torch.Tensor,
    mean: torch.Tensor,
    inv_std: torch.Tensor,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    out = images.to(dtype=torch.float32, memory_format=memory_format)  # one pass for both
    return out.sub_(mean).mul_(inv_std)


def load_cifar10(root: Path, device: torch.device, memory_format: str = "contiguous") -> Splits:
    """Train (50,000) and test (10,000) splits, decoded once and placed on `device`."""
    directory = root / CIFAR10_SUBDIR
    if not directory.is_dir():
        raise DataError(
            f"CIFAR-10 not found in {directory}; run `runner data fetch cifar10 --dir {root}`"
        )
    train = [read_batch(directory / name) for name in TRAIN_FILES]
    train_x = np.concatenate([x for x, _ in train])
    train_y = np.concatenate([y for _, y in train])
    test_x, test_y = read_batch(directory / TEST_FILE)
    mean, std = channel_stats(train_x)  # the training split's statistics only
    fmt = torch.channels_last if memory_format == "channels_last" else torch.contiguous_format
    augment = CifarAugment(
        mean=torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1),
        inv_std=torch.tensor(1.0 / std, dtype=torch.float32, device=device).view(1, -1, 1, 1),
        memory_format=fmt,
    )
    return Splits(
        train_x=torch.from_numpy(train_x).to(device),
        train_y=torch.from_numpy(train_y).to(device),
        test_x=normalize(torch.from_numpy(test_x).to(device), augment.mean, augment.inv_std, fmt),
        test_y=torch.from_numpy(test_y).to(device),
        num_classes=NUM_CLASSES,
        augment=augment,
    )
