"""A generated CIFAR-format data set for bench/adaptive_batch_study.py: no download, several
epochs of ResNet-20 on 2 CPU cores before a target, not one.

Written in the published layout (`cifar-10-batches-py/` with data_batch_1..5 and test_batch,
python pickles of {'data': uint8 [N, 3072], 'labels': [...]}, protocol 2 as the originals),
so the run reads it with the benchmark's own loader (`--set data_dir=...`) and augmentation.

What makes it a task and not a lookup: every class is `prototypes_per_class` coarse 6x6
colour patterns (upsampled to 24x24, each block `class_contrast` about mid-grey), each image
one of its class's prototypes, its contrast jittered, under pixel noise; and a fraction of
the labels (`label_noise`, train and test alike) is redrawn at random, so no model exceeds
about 1 - 0.9 x label_noise test accuracy and the late gradients are noisy, which is what
makes the gradient noise scale grow. The pattern sits inside a black 4-pixel frame, so the
benchmark's augmentation (shifts of up to 4 pixels with zero padding) adds no borders the
test images lack. The prototypes share no background on purpose: with one common background
and small class parts on it, the classes differ by small offsets on a large shared
activation, which batch statistics cancel exactly and BatchNorm's running statistics do not
(ResNet-20 scored 0.40 in eval mode and 0.83 with batch statistics on the same test images,
and swung between 0.14 and 0.80 from epoch to epoch at a constant training loss).
Not here: anything that trains.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CIFAR_SUBDIR = "cifar-10-batches-py"  # as workloads.data.CIFAR10_SUBDIR; torch-free here
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
NUM_CLASSES = 10
PATTERN_PX = 6  # a prototype's resolution before it is upsampled to 24x24
UPSAMPLE = 4
FRAME_PX = 4  # the black frame around the pattern: the augmentation's padding


@dataclass(frozen=True)
class SynthCifar:
    num_train: int = 5000  # split over the five training files
    num_test: int = 1000
    prototypes_per_class: int = 4
    class_contrast: float = 50.0  # std of a prototype's blocks about 128, in 0..255 units
    pixel_noise: float = 60.0  # std of per-pixel noise, in 0..255 units
    label_noise: float = 0.2  # the fraction of labels redrawn uniformly
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_train < len(TRAIN_FILES) or self.num_test < 1:
            raise ValueError(f"need at least {len(TRAIN_FILES)} train and 1 test image")
        if not 0.0 <= self.label_noise < 1.0:
            raise ValueError(f"label_noise must be in [0, 1), got {self.label_noise}")


def prototypes(spec: SynthCifar) -> np.ndarray:
    """[classes, prototypes, 3, 24, 24] float patterns, independent of one another."""
    rng = np.random.default_rng(spec.seed)
    shape = (NUM_CLASSES, spec.prototypes_per_class, 3, PATTERN_PX, PATTERN_PX)
    coarse = 128.0 + rng.normal(0, spec.class_contrast, size=shape)
    return coarse.repeat(UPSAMPLE, axis=3).repeat(UPSAMPLE, axis=4)


def images(spec: SynthCifar, num: int, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """`num` images (uint8 [num, 3072]) and labels (int64 [num]) from random stream `stream`
    (train and test draw from different streams of the same prototypes)."""
    protos = prototypes(spec)
    rng = np.random.default_rng([spec.seed, stream])
    labels = rng.integers(0, NUM_CLASSES, size=num)
    which = rng.integers(0, spec.prototypes_per_class, size=num)
    base = protos[labels, which]  # [num, 3, 24, 24]
    contrast = rng.uniform(0.7, 1.3, size=(num, 1, 1, 1))
    mean = base.mean(axis=(1, 2, 3), keepdims=True)
    inner = mean + contrast * (base - mean) + rng.normal(0, spec.pixel_noise, size=base.shape)
    out = np.zeros((num, 3, 32, 32))
    out[:, :, FRAME_PX:-FRAME_PX, FRAME_PX:-FRAME_PX] = inner
    flipped = rng.random(num) < spec.label_noise
    labels = np.where(flipped, rng.integers(0, NUM_CLASSES, size=num), labels)
    return np.clip(out, 0, 255).astype(np.uint8).reshape(num, -1), labels.astype(np.int64)


def write(spec: SynthCifar, root: Path) -> Path:
    """The data set under `root` (what `--set data_dir=` names); returns its directory."""
    directory = root / CIFAR_SUBDIR
    directory.mkdir(parents=True, exist_ok=True)
    per_file = np.array_split(np.arange(spec.num_train), len(TRAIN_FILES))
    for stream, (name, index) in enumerate(zip(TRAIN_FILES, per_file, strict=True)):
        _write_batch(directory / name, *images(spec, len(index), stream), name)
    _write_batch(directory / TEST_FILE, *images(spec, spec.num_test, 99), "testing batch")
    return directory


def _write_batch(path: Path, data: np.ndarray, labels: np.ndarray, name: str) -> None:
    batch = {"batch_label": name, "labels": [int(v) for v in labels], "data": data,
             "filenames": []}  # fmt: skip
    path.write_bytes(pickle.dumps(batch, protocol=2))
