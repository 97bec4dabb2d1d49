import copy

import pytest
import torch
import torch.nn.functional as F

from runner.job.benchmarks import BENCHMARKS
from workloads import models
from workloads.models.logreg.model import LogisticRegression
from workloads.models.resnet.model import CifarResNet
from workloads.models.vgg.model import VGG


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# He et al. 2015, table 6: 0.27 M, 0.46 M, 0.66 M, 0.85 M (option A shortcuts add nothing).
@pytest.mark.parametrize(
    ("depth", "expected"), [(20, 269_722), (32, 464_154), (44, 658_586), (56, 853_018)]
)
@pytest.mark.parametrize("variant", ["m1", "m2"])
def test_cifar_resnet_parameter_counts_match_the_paper(depth, expected, variant):
    assert num_params(CifarResNet(depth, variant)) == expected


@pytest.mark.parametrize("variant", ["m1", "m2"])
def test_cifar_resnet_maps_a_batch_of_images_to_class_logits(variant):
    out = CifarResNet(20, variant)(torch.randn(3, 3, 32, 32))
    assert out.shape == (3, 10)


def test_post_and_pre_activation_variants_compute_different_functions():
    torch.manual_seed(0)
    m1 = CifarResNet(20, "m1")
    torch.manual_seed(0)
    m2 = CifarResNet(20, "m2")
    x = torch.randn(2, 3, 32, 32)
    assert not torch.allclose(m1(x), m2(x))
    assert isinstance(m2.final_bn, torch.nn.BatchNorm2d)
    assert isinstance(m1.final_bn, torch.nn.Identity)


def test_resnet_stages_halve_resolution_and_double_width():
    model = CifarResNet(20)
    shapes = []
    model.blocks.register_forward_hook(lambda m, i, o: shapes.append(o.shape))
    model(torch.randn(1, 3, 32, 32))
    assert shapes == [(1, 64, 8, 8)]


def _out_of_place(model: CifarResNet, x: torch.Tensor) -> torch.Tensor:
    """The model's function written the plain way: new tensors everywhere, the option-A
    shortcut built with F.pad (He et al.'s definition), for comparison."""

    def shortcut(block, x):
        s = block.shortcut
        if s.stride == 1 and s.first_channel == 0:
            return x
        extra = block.conv2.out_channels - s.in_channels
        half = extra // 2
        return F.pad(x[:, :, :: s.stride, :: s.stride], (0, 0, 0, 0, half, extra - half))

    out = model.stem_bn(model.stem(x))
    out = out if model.pre_activation else F.relu(out)
    for b in model.blocks:
        if model.pre_activation:
            y = b.conv2(F.relu(b.bn2(b.conv1(F.relu(b.bn1(out))))))
            out = y + shortcut(b, out)
        else:
            y = b.bn2(b.conv2(F.relu(b.bn1(b.conv1(out)))))
            out = F.relu(y + shortcut(b, out))
    out = F.relu(model.final_bn(out)) if model.pre_activation else out
    return model.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))


@pytest.mark.parametrize("variant", ["m1", "m2"])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_cifar_resnets_in_place_step_computes_the_plain_definition(variant, memory_format):
    torch.manual_seed(0)
    model = CifarResNet(20, variant).to(memory_format=memory_format)
    plain = copy.deepcopy(model)
    x = torch.randn(4, 3, 32, 32).contiguous(memory_format=memory_format)
    y = torch.tensor([0, 3, 5, 9])
    out, expected = model(x), _out_of_place(plain, x)
    torch.testing.assert_close(out, expected)
    F.cross_entropy(out, y).backward()
    F.cross_entropy(expected, y).backward()
    for p, q in zip(model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("depth", [19, 21, 2])
def test_cifar_resnet_rejects_depths_that_are_not_6n_plus_2(depth):
    with pytest.raises(ValueError, match="6n\\+2"):
        CifarResNet(depth)


def test_vgg11_bn_has_the_study_models_parameter_count_and_output_shape():
    model = VGG()
    assert num_params(model) == 9_231_114
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) == 8
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_logistic_regression_gives_one_zero_initialized_logit_per_sample():
    model = LogisticRegression(2000)
    assert num_params(model) == 2001
    assert torch.equal(model(torch.randn(5, 2000)), torch.zeros(5))


def test_build_follows_the_registry_configs():
    resnet = models.build(BENCHMARKS["resnet20-cifar10"].config.model, 10, (3, 32, 32))
    logreg = models.build(BENCHMARKS["logreg-epsilon"].config.model, 2, (2000,))
    vgg = models.build(BENCHMARKS["vgg11-cifar10"].config.model, 10, (3, 32, 32))
    assert (num_params(resnet), num_params(logreg), num_params(vgg)) == (
        269_722,
        2001,
        9_231_114,
    )


def test_build_puts_conv_weights_in_channels_last_when_configured():
    config = BENCHMARKS["resnet20-cifar10"].config.replace(memory_format="channels_last")
    model = models.build(config.model, 10, (3, 32, 32), config.execution.memory_format)
    assert model.stem.weight.is_contiguous(memory_format=torch.channels_last)
    assert not model.stem.weight.is_contiguous()
