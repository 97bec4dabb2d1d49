"""scikit-learn's digits (1,797 8x8 grey images, 10 classes): the quickstart's real data.

It ships inside scikit-learn, so the quickstart needs no download. The test split is fixed
(20 %, stratified, seed 0) so every run, on any machine, evaluates on the same 360 images.
"""

from __future__ import annotations

import numpy as np
import torch

from workloads.data import Splits

TEST_FRACTION = 0.2
SPLIT_SEED = 0


def load_digits(device: torch.device) -> Splits:
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    images, labels = sk_load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    # Normalize with the training split's statistics only (no test leakage).
    mean, std = float(x_train.mean()), float(x_train.std())
    return Splits(
        train_x=_to_images(x_train, mean, std, device),
        train_y=torch.as_tensor(y_train, dtype=torch.long, device=device),
        test_x=_to_images(x_test, mean, std, device),
        test_y=torch.as_tensor(y_test, dtype=torch.long, device=device),
        num_classes=10,
    )


def _to_images(flat: np.ndarray, mean: float, std: float, device: torch.device) -> torch.Tensor:
    x = torch.as_tensor((flat - mean) / std, dtype=torch.float32, device=device)
    return x.reshape(-1, 1, 8, 8).contiguous()
