"""VGG-11 with batch normalization, for 32x32 CIFAR images (the CS744 data-parallel study).

Simonyan & Zisserman's configuration "A" (8 convolutions, 5 max-pools) with BatchNorm after
every convolution; on 32x32 inputs the features end at 512x1x1, so the classifier is one
linear layer (as in the study's model), not ImageNet VGG's three 4096-wide layers.
9.23 M parameters.
"""

from __future__ import annotations

import torch
from torch import nn

# Output channels of each 3x3 convolution; "M" is a 2x2 max-pool.
VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    def __init__(self, layout: tuple[int | str, ...] = VGG11, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = 3
        for item in layout:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
                continue
            assert isinstance(item, int)
            layers += [
                # A bias BatchNorm cancels, kept so the model (and the bytes every strategy
                # communicates) are the study's: 9,231,114 parameters.
                nn.Conv2d(in_channels, item, 3, padding=1),
                nn.BatchNorm2d(item),
                nn.ReLU(inplace=True),
            ]
            in_channels = item
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(in_channels, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))
