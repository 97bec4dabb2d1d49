"""CIFAR ResNets (He et al.): depth 6n+2, three stages of n basic blocks at 16, 32, 64 channels.

Two variants, as MLBench names them:
- "m1": post-activation blocks, "Deep Residual Learning for Image Recognition" (2015), the
  CIFAR-10 section: ResNet-20 has 0.27 M parameters;
- "m2": pre-activation blocks, "Identity Mappings in Deep Residual Networks" (2016), with the
  final BatchNorm + ReLU before pooling.
Both use the paper's CIFAR shortcut (option A): identity, or, where a stage halves the
resolution and doubles the width, stride-2 subsampling padded with zero channels, so that
shortcuts add no parameters and the counts match the paper. ImageNet ResNets are not here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

STAGE_WIDTHS = (16, 32, 64)


class ShortcutA(nn.Module):
    """Option A: subsample by `stride` and zero-pad the new channels (no parameters).

    It adds itself to a block's output in place rather than building the padded tensor: the
    padded channels are zeros, so adding them changes nothing, and the subsampled input goes
    into the middle channels, where F.pad would have put it.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.in_channels = in_channels
        self.first_channel = (out_channels - in_channels) // 2

    def forward(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """`out` plus the shortcut of the block's input `x`, accumulated into `out`."""
        if self.stride == 1 and self.first_channel == 0:
            return out.add_(x)
        channels = slice(self.first_channel, self.first_channel + self.in_channels)
        out[:, channels].add_(x[:, :, :: self.stride, :: self.stride])
        return out


def conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)


class PostActBlock(nn.Module):
    """conv-BN-ReLU-conv-BN, add the shortcut, then ReLU (He et al. 2015)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = ShortcutA(in_channels, out_channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In place where autograd allows it (BatchNorm's backward does not read its output,
        # ReLU's reads its own): fewer tensors allocated and written per step.
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(self.shortcut(out, x), inplace=True)


class PreActBlock(nn.Module):
    """BN-ReLU-conv-BN-ReLU-conv, then add the shortcut; nothing after the sum (2016)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = conv3x3(in_channels, out_channels, stride)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.shortcut = ShortcutA(in_channels, out_channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.relu(self.bn1(x), inplace=True))
        out = self.conv2(F.relu(self.bn2(out), inplace=True))
        return self.shortcut(out, x)  # a convolution's backward does not read its output


class CifarResNet(nn.Module):
    def __init__(self, depth: int = 20, variant: str = "m1", num_classes: int = 10) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
        if variant not in ("m1", "m2"):
            raise ValueError(f"variant must be m1 or m2, got {variant!r}")
        blocks_per_stage = (depth - 2) // 6
        block = PostActBlock if variant == "m1" else PreActBlock
        self.pre_activation = variant == "m2"
        self.stem = conv3x3(3, STAGE_WIDTHS[0])
        # m1 normalizes the stem's output; m2 leaves that to the first block's BatchNorm.
        self.stem_bn = nn.Identity() if self.pre_activation else nn.BatchNorm2d(STAGE_WIDTHS[0])
        layers: list[nn.Module] = []
        in_channels = STAGE_WIDTHS[0]
        for stage, width in enumerate(STAGE_WIDTHS):
            for i in range(blocks_per_stage):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(block(in_channels, width, stride))
                in_channels = width
        self.blocks = nn.Sequential(*layers)
        self.final_bn = nn.BatchNorm2d(in_channels) if self.pre_activation else nn.Identity()
        self.fc = nn.Linear(in_channels, num_classes)
        _init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.stem_bn(self.stem(x))
        if not self.pre_activation:
            out = F.relu(out, inplace=True)
        out = self.blocks(out)
        if self.pre_activation:
            out = F.relu(self.final_bn(out), inplace=True)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def _init_weights(model: nn.Module) -> None:
    # He et al. initialize convolutions with their "MSRA" init (fan-out, ReLU gain).
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
