import pytest

from runner.errors import SpecError
from runner.job.benchmarks import BENCHMARKS
from runner.job.spec import Placement, resolve


@pytest.mark.parametrize(("workers", "per_worker"), [(1, 256), (2, 128), (4, 64), (8, 32)])
def test_vgg11_study_splits_its_global_batch_of_256_over_the_workers(workers, per_worker):
    spec = resolve("vgg11-cifar10", placement=Placement(procs_per_node=workers))
    assert spec.config.batch_size == per_worker and spec.division == "closed"


def test_vgg11_study_refuses_a_worker_count_that_does_not_divide_256():
    with pytest.raises(SpecError, match="divides") as err:
        resolve("vgg11-cifar10", placement=Placement(procs_per_node=3))
    assert err.value.param == "--workers"


def test_resnet20_is_the_1a_spec():
    c = BENCHMARKS["resnet20-cifar10"].config
    assert (c.model, c.resnet_depth, c.resnet_variant, c.dataset) == (
        "resnet-cifar", 20, "m1", "cifar10",
    )  # fmt: skip
    assert (c.batch_size, c.lr, c.lr_scaling, c.warmup_epochs) == (32, 0.1 / 256 * 32, "linear", 5)
    assert (c.lr_milestones, c.lr_gamma, c.max_epochs) == ((82, 109), 0.1, 164)
    assert (c.momentum, c.nesterov, c.weight_decay) == (0.9, True, 1e-4)
    assert (c.target_value, BENCHMARKS["resnet20-cifar10"].light_target) == (0.80, 0.70)


def test_logreg_is_the_2a_spec():
    c = BENCHMARKS["logreg-epsilon"].config
    assert (c.model, c.dataset, c.loss, c.l2_rate) == ("logreg", "epsilon", "logistic", 2.5e-6)
    assert (c.batch_size, c.lr, c.lr_schedule, c.momentum, c.weight_decay) == (
        100, 200.0, "inverse-sqrt", 0.0, 0.0,
    )  # fmt: skip
    assert (c.target_value, BENCHMARKS["logreg-epsilon"].light_target) == (0.89, 0.80)


@pytest.mark.parametrize(
    ("bench", "override", "division"),
    [
        ("resnet20-cifar10", "resnet_depth=56", "open"),  # another model
        ("resnet20-cifar10", "resnet_variant=m2", "open"),
        ("resnet20-cifar10", "lr=0.025", "closed"),  # a schedule tunable
        ("resnet20-cifar10", "memory_format=channels_last", "closed"),  # same math, faster
        ("resnet20-cifar10", "compile_model=true", "closed"),
        ("logreg-epsilon", "lr_scale_table=1,2,3", "closed"),
        ("logreg-epsilon", "l2_rate=0", "open"),
        ("vgg11-cifar10", "batch_size=64", "open"),  # the study fixes the global batch
    ],
)
def test_changing_the_model_or_algorithm_makes_a_run_open_division(bench, override, division):
    assert resolve(bench, [override]).division == division


def test_an_incompatible_model_and_dataset_is_refused_at_resolve():
    with pytest.raises(SpecError, match="trains on cifar10"):
        resolve("resnet20-cifar10", ["dataset=epsilon"])
