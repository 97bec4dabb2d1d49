"""Datasets as tensors prepared once, and how each rank draws its batches from them.

`load(config, device)` returns the train/test split of the configured dataset, preprocessed
once (outside the benchmark clock, as MLPerf does) and placed on the training device, so a
step's data phase is an index and not per-sample Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workloads.config import TrainConfig

Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


@dataclass(frozen=True)
class Splits:
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    augment: Augment | None = None  # batched, on-device training augmentation

    @property
    def num_train(self) -> int:
        return int(self.train_y.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.test_y.shape[0])


def load(config: TrainConfig, device: torch.device) -> Splits:
    if config.dataset == "digits":
        from workloads.data.digits import load_digits

        return load_digits(device)
    raise ValueError(f"no loader for dataset {config.dataset!r}")
