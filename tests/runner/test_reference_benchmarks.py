import pytest

from runner.errors import SpecError
from runner.job.benchmarks import BENCHMARKS, FREE_KEYS
from runner.job.spec import Placement, open_division_keys, resolve


@pytest.mark.parametrize(("workers", "per_worker"), [(1, 256), (2, 128), (4, 64), (8, 32)])
def test_vgg11_study_splits_its_global_batch_of_256_over_the_workers(workers, per_worker):
    spec = resolve("vgg11-cifar10", placement=Placement(procs_per_node=workers))
    assert spec.config.data.batch_size == per_worker and spec.division == "closed"


def test_vgg11_study_refuses_a_worker_count_that_does_not_divide_256():
    with pytest.raises(SpecError, match="divides") as err:
        resolve("vgg11-cifar10", placement=Placement(procs_per_node=3))
    assert err.value.param == "--workers"


# Every benchmark's resolved values, key by key, as docs/benchmarks.md specifies them (and,
# where it names none, this suite's documented choice): a changed default anywhere shows here.
RUN_DEFAULTS = {
    "time_budget_s": None,
    "dist_timeout_s": 300.0,
    "seed": 0,
    "eval_every_epochs": 1,
    "stop_at_target": True,
}
EXECUTION_DEFAULTS = {
    "memory_format": "contiguous", "compile_model": False, "precision": "auto",
    "max_cpu_threads": None,
}  # fmt: skip
# No benchmark adapts by default: every policy and monitor is open division.
ADAPTIVE_DEFAULTS = {
    "policy": (), "monitor": False, "monitor_interval_steps": 10, "noise_ema_decay": 0.9,
    "min_global_batch": None, "max_global_batch": None, "batch_growth": 2.0,
    "batch_lr_rule": "linear", "batch_cooldown_steps": 0, "sync_low": 1e-5, "sync_high": 1e-4,
    "sync_min_period": 2, "sync_max_period": 64, "heartbeat_s": 0.5, "dead_after_s": 5.0,
}  # fmt: skip
SGD = {"optimizer": "sgd", "nesterov": False}
SPECS = {
    "cnn-digits": {
        "model": "cnn-digits", "dataset": "digits", "batch_size": 32,
        **SGD, "momentum": 0.9, "weight_decay": 1e-4,
        "lr_schedule": "multistep", "lr": 0.05, "lr_scaling": "linear", "lr_scale_table": (),
        "warmup_epochs": 5.0, "lr_milestones": (), "lr_gamma": 0.1,
        "strategy": "ddp", **EXECUTION_DEFAULTS, **RUN_DEFAULTS, "max_epochs": 30,
        "target_value": 0.95, "target_train_loss": None,
    },
    "resnet20-cifar10": {  # 1a
        "model": "resnet-cifar", "depth": 20, "variant": "m1",
        "dataset": "cifar10", "batch_size": 32, "data_dir": None,
        **SGD, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4,
        "lr_schedule": "multistep", "lr": 0.1 / 256 * 32, "lr_scaling": "linear",
        "lr_scale_table": (), "warmup_epochs": 5.0, "lr_milestones": (82, 109), "lr_gamma": 0.1,
        "strategy": "ddp", **EXECUTION_DEFAULTS, "memory_format": "channels_last",
        "compile_model": True,  # execution controls, cached kernels
        # (workloads/runtime/compiling.py)
        **RUN_DEFAULTS, "max_epochs": 164, "target_value": 0.80, "target_train_loss": None,
    },
    "logreg-epsilon": {  # 2a
        "model": "logreg", "l2_rate": 2.5e-6, "dataset": "epsilon", "batch_size": 100,
        "data_dir": None, **SGD, "momentum": 0.0, "weight_decay": 0.0,
        "lr_schedule": "inverse-sqrt", "lr": 200.0, "lr_scaling": "table",
        "lr_scale_table": (1.0, 2.0, 3.0, 3.5, 4.0),
        # An exact strategy, as MLBench's CentralizedSGD: one flat all-reduce.
        "strategy": "allreduce", **EXECUTION_DEFAULTS,
        "max_cpu_threads": 1,  # an execution control: threads only cost a model this small
        **RUN_DEFAULTS, "max_epochs": 10,
        "target_value": 0.89, "target_train_loss": 0.2828,
    },
    "vgg11-cifar10": {  # CS744
        "model": "vgg11-bn", "dataset": "cifar10", "batch_size": 256, "data_dir": None,
        **SGD, "momentum": 0.9, "weight_decay": 1e-4,
        "lr_schedule": "multistep", "lr": 0.1, "lr_scaling": "none", "lr_scale_table": (),
        "warmup_epochs": 0.0, "lr_milestones": (), "lr_gamma": 0.1,
        "strategy": "ddp", **EXECUTION_DEFAULTS, **RUN_DEFAULTS, "max_epochs": 1,
        "stop_at_target": False, "target_value": 0.40, "target_train_loss": None,
    },
    "lstm-wikitext2": {  # 3a
        "model": "awd-lstm", "embed_dim": 400, "hidden_dim": 1150, "num_layers": 3,
        "dropout": 0.4, "dropout_hidden": 0.2, "dropout_input": 0.65, "dropout_embedding": 0.1,
        "weight_drop": 0.5, "dataset": "wikitext2", "batch_size": 20, "data_dir": None,
        "bptt": 70, "grad_clip_norm": 0.25, "asgd_nonmono": 5,
        **SGD, "momentum": 0.0, "weight_decay": 1.2e-6,
        "lr_schedule": "multistep", "lr": 15.0, "lr_scaling": "sqrt", "lr_scale_table": (),
        "warmup_epochs": 0.0, "lr_milestones": (), "lr_gamma": 0.1,
        "strategy": "ddp", **EXECUTION_DEFAULTS, **RUN_DEFAULTS, "max_epochs": 750,
        "target_value": 70.0, "target_train_loss": None,
    },
    "gnmt-wmt16": {  # 4a
        "model": "gnmt", "hidden_dim": 1024, "num_layers": 4, "dropout": 0.2,
        "dataset": "wmt16", "batch_size": 128, "batch_unit": "samples", "global_batch": 2048,
        "data_dir": None, "max_seq_len": 50,
        "grad_clip_norm": 5.0, "label_smoothing": 0.1, "beam_size": 5, "length_penalty": 0.6,
        "length_penalty_form": "gnmt", "decode_extra_len": 50,
        "optimizer": "adam", "weight_decay": 0.0, "adam_betas": (0.9, 0.999), "adam_eps": 1e-8,
        "lr_schedule": "warmup-step-decay", "lr": 2e-3, "lr_scaling": "none",
        "lr_scale_table": (), "warmup_steps": 200, "lr_gamma": 0.5, "lr_decay_start": 0.4,
        "lr_decay_count": 4,
        "strategy": "ddp", **EXECUTION_DEFAULTS, **RUN_DEFAULTS, "max_epochs": 6,
        "target_value": 24.0, "target_train_loss": None,
    },
    "transformer-wmt17": {  # 4b
        "model": "transformer", "d_model": 1024, "ffn_dim": 4096, "num_heads": 16,
        "num_layers": 6, "dropout": 0.1,
        "dataset": "wmt17", "batch_size": 8192, "batch_unit": "tokens", "global_batch": 2**17,
        "data_dir": None, "max_seq_len": 256,
        "grad_clip_norm": None, "label_smoothing": 0.1, "beam_size": 4, "length_penalty": 0.6,
        "length_penalty_form": "gnmt", "decode_extra_len": 50,
        "optimizer": "adam", "weight_decay": 0.0, "adam_betas": (0.9, 0.98), "adam_eps": 1e-9,
        "lr_schedule": "warmup-inverse-sqrt", "lr": 1.976e-3, "lr_scaling": "none",
        "lr_scale_table": (), "warmup_steps": 1000,
        "strategy": "ddp", **EXECUTION_DEFAULTS, **RUN_DEFAULTS, "max_epochs": 10,
        "target_value": 25.0, "target_train_loss": None,
    },
    "allreduce-micro": {  # 0a
        "min_elements": 1, "max_elements": 10**8, "sizes_per_decade": 1,
        "dtypes": ("float32", "float16", "bfloat16"), "num_iters": 20, "num_warmup_iters": 5,
        "max_time_per_size_s": 5.0, "time_budget_s": None, "dist_timeout_s": 300.0,
    },
}  # fmt: skip


def test_every_benchmark_is_pinned_here():
    assert set(SPECS) == set(BENCHMARKS)


@pytest.mark.parametrize("name", list(SPECS))
def test_each_benchmark_resolves_to_its_specified_values(name):
    flat = resolve(name, placement=Placement()).config.flat()
    spec = SPECS[name] if name == "allreduce-micro" else SPECS[name] | ADAPTIVE_DEFAULTS
    assert set(flat) == set(spec)
    for key, value in spec.items():  # floats up to rounding (0.1 / 256 * 32)
        expected = pytest.approx(value) if isinstance(value, float) else value
        assert flat[key] == expected, key


# What a closed-division run may change, per benchmark: MLPerf's batch size and LR schedule
# parameters (plus, for the Adam tasks, betas and warm-up steps; BENCHMARKS.md). A key here
# that changes the model or the algorithm (weight_decay, dropout, momentum...) would let an
# open-division run pass for closed.
TUNABLES = {
    "cnn-digits": {"batch_size", "lr", "warmup_epochs", "lr_milestones", "lr_gamma"},
    "resnet20-cifar10": {"batch_size", "lr", "warmup_epochs", "lr_milestones", "lr_gamma"},
    "logreg-epsilon": {"batch_size", "lr", "lr_scale_table"},
    "vgg11-cifar10": set(),
    "lstm-wikitext2": {"batch_size", "lr", "warmup_epochs", "lr_milestones", "lr_gamma"},
    "gnmt-wmt16": {
        "batch_size", "global_batch", "lr", "warmup_steps", "adam_betas", "lr_gamma",
        "lr_decay_start", "lr_decay_count",
    },
    "transformer-wmt17": {"batch_size", "global_batch", "lr", "warmup_steps", "adam_betas"},
}  # fmt: skip


@pytest.mark.parametrize("name", list(TUNABLES))
def test_each_benchmarks_tunables_are_exactly_these(name):
    assert BENCHMARKS[name].tunables == TUNABLES[name]


def test_the_micro_benchmark_has_every_key_tunable():
    assert BENCHMARKS["allreduce-micro"].tunables == set(SPECS["allreduce-micro"])


@pytest.mark.parametrize("name", list(TUNABLES))
def test_every_other_key_of_a_training_benchmark_makes_its_run_open(name):
    bench = BENCHMARKS[name]
    fixed = set(bench.config.flat_keys()) - bench.tunables - FREE_KEYS - {"strategy"}
    assert {"model", "optimizer", "weight_decay"} <= fixed
    for key in sorted(fixed - set(ADAPTIVE_DEFAULTS)):
        assert open_division_keys(bench, {key: "x"}, bench.config) == (key,), key


@pytest.mark.parametrize("policy", ["batch", "sync"])
def test_a_policy_on_one_worker_is_refused_naming_the_fix(policy):
    # It decides from how the workers' gradients differ: on one it never acted, and the run
    # paid for the monitors and was open division for nothing.
    sets = [f"policy={policy}"] + (["strategy=adaptive-sync"] if policy == "sync" else [])
    with pytest.raises(SpecError, match=f"policy={policy} .* needs 2 or more workers: --workers 2"):
        resolve("cnn-digits", sets, Placement(procs_per_node=1))
    assert resolve("cnn-digits", sets, Placement(procs_per_node=2)).division == "open"
    assert resolve("cnn-digits", ["monitor=true"], Placement(procs_per_node=1))  # it watches


@pytest.mark.parametrize("name", ["cnn-digits", "resnet20-cifar10", "vgg11-cifar10"])
def test_adaptive_keys_make_a_run_open_only_when_a_policy_or_the_monitor_is_on(name):
    # compile_model=false: each batch the policy picks would otherwise compile in the clock.
    on = resolve(name, ["policy=batch", "batch_growth=4", "compile_model=false"],
                 Placement(procs_per_node=2))  # fmt: skip
    assert on.division == "open" and on.open_keys == ("batch_growth", "policy")
    watched = resolve(name, ["monitor=true"], Placement())
    assert watched.division == "open" and watched.open_keys == ("monitor",)
    off = resolve(name, ["policy=none", "batch_growth=4"], Placement())
    assert off.division == "closed" and off.open_keys == ()


@pytest.mark.parametrize(
    ("bench", "override", "division"),
    [
        ("resnet20-cifar10", "depth=56", "open"),  # another model
        ("resnet20-cifar10", "variant=m2", "open"),
        ("resnet20-cifar10", "model=vgg11-bn", "open"),
        ("resnet20-cifar10", "weight_decay=0", "open"),
        ("resnet20-cifar10", "lr=0.025", "closed"),  # a schedule tunable
        ("resnet20-cifar10", "memory_format=channels_last", "closed"),  # same math, faster
        ("resnet20-cifar10", "compile_model=true", "closed"),
        ("logreg-epsilon", "lr_scale_table=1,2,3", "closed"),
        ("logreg-epsilon", "l2_rate=0", "open"),
        ("lstm-wikitext2", "bptt=35", "open"),  # BPTT 70 is the spec's algorithm, not a batch
        ("lstm-wikitext2", "batch_size=40", "closed"),
        ("vgg11-cifar10", "batch_size=64", "open"),  # the study fixes the global batch
        ("transformer-wmt17", "dropout=0.2", "open"),
        ("transformer-wmt17", "adam_betas=0.9,0.99", "closed"),
        ("gnmt-wmt16", "dataset=wmt17", "open"),
    ],
)
def test_changing_the_model_or_algorithm_makes_a_run_open_division(bench, override, division):
    assert resolve(bench, [override]).division == division


def test_an_incompatible_model_and_dataset_is_refused_at_resolve():
    with pytest.raises(SpecError, match="dataset: model resnet-cifar trains on cifar10"):
        resolve("resnet20-cifar10", ["dataset=epsilon"])
