"""scikit-learn's digits (1,797 8x8 grey images, 10 classes): the quickstart's real data.

The data set ships inside scikit-learn (sklearn/datasets/data/digits.csv.gz), so the
quickstart needs no download. It is read from there directly: importing scikit-learn to call
its loader pulls in scipy and costs about a second of every run's start-up, for a 70 kB
file. The test split is fixed (a fifth of each class, drawn with seed 0) so every run, on any
machine, evaluates on the same 359 images.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from workloads.data import DataError, Splits

TEST_FRACTION = 0.2
SPLIT_SEED = 0
NUM_CLASSES = 10
NUM_PIXELS = 64


def digits_file() -> Path:
    """Where the installed scikit-learn keeps the digits, found without importing it."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "the digits data set ships with scikit-learn, which is not installed: "
            "pip install -c constraints.txt -e '.[workloads]'"
        )
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"


def read_digits(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(pixels float64 [N, 64] in 0..16, labels int64 [N]) from the CSV scikit-learn ships."""
    try:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", ndmin=2)
    except (OSError, EOFError, ValueError) as err:
        raise DataError(f"{path}: not scikit-learn's digits ({err}); reinstall it") from None
    if table.shape[1] != NUM_PIXELS + 1:
        raise DataError(f"{path}: {table.shape[1]} columns, expected {NUM_PIXELS} pixels + label")
    return table[:, :NUM_PIXELS], table[:, NUM_PIXELS].astype(np.int64)


def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A boolean test mask holding round(fraction * n) of each class's n samples, at random."""
    rng = np.random.default_rng(seed)
    test = np.zeros(labels.shape[0], dtype=bool)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        test[rng.permutation(members)[: round(fraction * members.size)]] = True
    return test


def load_digits(device: torch.device) -> Splits:
    images, labels = read_digits(digits_file())
    test = stratified_split(labels, TEST_FRACTION, SPLIT_SEED)
    x_train, y_train, x_test, y_test = images[~test], labels[~test], images[test], labels[test]
    # Normalize with the training split's statistics only (no test leakage).
    mean, std = float(x_train.mean()), float(x_train.std())
    return Splits(
        train_x=_to_images(x_train, mean, std, device),
        train_y=torch.as_tensor(y_train, dtype=torch.long, device=device),
        test_x=_to_images(x_test, mean, std, device),
        test_y=torch.as_tensor(y_test, dtype=torch.long, device=device),
        num_classes=NUM_CLASSES,
    )


def _to_images(flat: np.ndarray, mean: float, std: float, device: torch.device) -> torch.Tensor:
    x = torch.as_tensor((flat - mean) / std, dtype=torch.float32, device=device)
    return x.reshape(-1, 1, 8, 8).contiguous()
