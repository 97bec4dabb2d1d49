import dataclasses
import json
import math
import os
import typing

import pytest

from runner.job.benchmarks import BENCHMARKS, CNN_DIGITS
from workloads.configuration.components import Component
from workloads.configuration.fields import BOUNDS, field_types, parse_value
from workloads.configuration.micro_config import MeasurementConfig
from workloads.configuration.train_config import (
    ConfigError,
    ExecutionConfig,
    RunConfig,
    RunLimits,
    TargetConfig,
    TrainConfig,
)
from workloads.optimization.schedule import LrPlan
from workloads.plugins.points import TASKS

BASE = CNN_DIGITS.config
TRAINING = {n: b.config for n, b in BENCHMARKS.items() if isinstance(b.config, TrainConfig)}


def every_component_class() -> set[type[Component]]:
    classes = {RunLimits, RunConfig, ExecutionConfig, TargetConfig, MeasurementConfig}
    classes |= {e.obj for e in TASKS.entries().values()}
    for choice in TrainConfig.CHOICES.values():
        classes |= set(choice.options)
    return classes


def holds_numbers(tp: object) -> bool:
    return tp in (int, float) or any(holds_numbers(a) for a in typing.get_args(tp))


@pytest.mark.parametrize("cls", sorted(every_component_class(), key=lambda c: c.__name__))
def test_every_number_of_every_component_declares_its_valid_range(cls):
    numbers = [f for f in dataclasses.fields(cls) if holds_numbers(field_types(cls)[f.name])]
    for f in numbers:
        assert BOUNDS in f.metadata, f"{cls.__name__}.{f.name} declares no range"


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("lr", "nan", "lr: expected a finite number in (0, 1000], got nan"),
        ("lr", "inf", "lr: expected a finite number in (0, 1000], got inf"),
        ("lr", "-1", "lr: expected a finite number in (0, 1000], got -1.0"),
        ("lr", "1e6", "lr: expected a finite number in (0, 1000], got 1000000.0"),
        ("momentum", "1.5", "momentum: expected a finite number in [0, 1), got 1.5"),
        ("batch_size", "0", "batch_size: expected an integer in [1, 16777216], got 0"),
        ("weight_decay", "-inf", "weight_decay: expected a finite number in [0, 1), got -inf"),
        ("time_budget_s", "nan", "time_budget_s: expected a finite number in (0, 2592000] or "),
        ("lr_milestones", "3,0", "lr_milestones: expected a comma-separated list of integers"),
        ("seed", "-3", "seed: expected an integer in [0, 2147483647], got -3"),
    ],
)
def test_non_finite_negative_or_absurd_numbers_are_refused_with_the_valid_range(key, text, message):
    with pytest.raises(ConfigError) as err:
        BASE.with_overrides({key: text})
    assert str(err.value).startswith(message)
    assert err.value.key == key


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"max_epochs": 0}, "max_epochs"),
        ({"lr": -0.1}, "lr"),
        ({"lr": math.nan}, "lr"),
        ({"momentum": -1.0}, "momentum"),
        ({"target_value": 1.5}, "target_value"),
        ({"momentum": 0.0, "nesterov": True}, "nesterov"),
        ({"warmup_epochs": -1.0}, "warmup_epochs"),
        ({"lr_milestones": (5, 3)}, "lr_milestones"),
        ({"lr_gamma": 0.0}, "lr_gamma"),
        ({"time_budget_s": -5.0}, "time_budget_s"),
        ({"batch_size": True}, "batch_size"),
        ({"batch_size": 3.0}, "batch_size"),
        ({"strategy": "nope"}, "strategy"),
    ],
)
def test_invalid_values_raise_an_error_naming_the_key(changes, key):
    with pytest.raises(ConfigError) as err:
        BASE.replace(**changes)
    assert err.value.key == key


def test_the_json_is_nested_by_component_with_a_version():
    data = json.loads(BASE.to_json())
    assert data["version"] == TrainConfig.VERSION == 2
    assert set(data) == {"version", "model", "data", "task", "optimizer", "schedule",
                         "strategy", "adaptive", "execution", "run", "target"}  # fmt: skip
    assert data["optimizer"] == {"name": "sgd", "momentum": 0.9, "nesterov": False,
                                 "weight_decay": 1e-4}  # fmt: skip
    assert data["schedule"]["lr_milestones"] == []


def test_a_config_written_before_the_adaptive_part_reads_as_one_without_policies():
    data = json.loads(BASE.to_json())
    del data["adaptive"]
    assert TrainConfig.from_dict(data) == BASE
    assert TrainConfig.from_dict(data).adaptive.policy == ()


@pytest.mark.parametrize("name", list(TRAINING))
def test_every_benchmark_round_trips_through_json(name):
    config = TRAINING[name]
    assert TrainConfig.from_json(config.to_json()) == config


def test_json_round_trip_keeps_tuples_and_floats():
    config = BASE.replace(lr_milestones=[2, 5], time_budget_s=30)
    assert config.schedule.lr_milestones == (2, 5)  # one representation: a tuple...
    assert repr(config.run.time_budget_s) == "30.0"  # ...and a float where one is declared
    assert TrainConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    ("edit", "key", "says"),
    [
        (lambda d: d["optimizer"].update(bogus=1), "optimizer.bogus", "unknown key"),
        (lambda d: d.update(bogus={}), "bogus", "unknown part"),
        (lambda d: d.update(version=3), "version", "newer than this stackbench reads (2)"),
        (lambda d: d.pop("version"), "version", "before version 2"),
        (lambda d: d.pop("run"), "run", "missing"),
        (lambda d: d["run"].pop("max_epochs"), "run.max_epochs", "missing"),
        (lambda d: d["model"].update(name="resnet-50"), "model", "expected one of cnn-digits"),
        (lambda d: d["schedule"].update(lr="fast"), "lr", "expected a finite number"),
    ],
)
def test_from_json_refuses_what_it_cannot_read_naming_it(edit, key, says):
    data = BASE.to_dict()
    edit(data)
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict(data)
    assert err.value.key == key and says in str(err.value)


def test_from_json_refuses_text_that_is_not_a_json_object():
    with pytest.raises(ConfigError, match="not JSON"):
        TrainConfig.from_json("{")
    with pytest.raises(ConfigError, match="not JSON: nested too deeply"):  # no RecursionError
        TrainConfig.from_json("[" * 100_000)
    with pytest.raises(ConfigError, match="expected a JSON object"):
        TrainConfig.from_json("[]")


def test_flat_view_has_the_keys_set_takes_with_their_values():
    flat = BASE.flat()
    assert list(flat) == list(BASE.flat_keys())
    assert (flat["model"], flat["dataset"], flat["optimizer"], flat["strategy"]) == (
        "cnn-digits", "digits", "sgd", "ddp",
    )  # fmt: skip
    assert (flat["lr"], flat["batch_size"], flat["seed"]) == (0.05, 32, 0)


def test_optional_values_parse_none():
    assert BASE.with_overrides({"time_budget_s": "none"}).run.time_budget_s is None
    assert BASE.with_overrides({"time_budget_s": "60"}).run.time_budget_s == 60.0


def test_parse_value_reads_booleans_in_common_spellings():
    assert parse_value("k", "yes", bool) is True
    assert parse_value("k", "Off", bool) is False


def test_describe_says_the_type_and_range_from_the_declaration():
    assert BASE.describe("lr") == "a finite number in (0, 1000]"
    assert BASE.describe("batch_size") == "an integer in [1, 16777216]"
    assert BASE.describe("lr_milestones") == "a comma-separated list of integers in [1, 100000]"
    assert BASE.describe("strategy").startswith("one of ddp, allreduce,")
    assert BASE.describe("time_budget_s") == "a finite number in (0, 2592000] or none"


# ---- choices: strategy, optimizer, schedule -------------------------------------------


def test_selecting_a_strategy_makes_its_options_keys():
    config = BASE.with_overrides({"strategy": "powersgd", "powersgd_rank": "2"})
    assert (config.strategy.name, config.strategy.powersgd_rank) == ("powersgd", 2)
    assert config.strategy.powersgd_start_iter == 1000  # torch's default


def test_an_option_of_another_strategy_names_the_strategy_it_belongs_to():
    with pytest.raises(ConfigError) as err:
        BASE.with_overrides({"powersgd_rank": "4"})
    assert str(err.value).startswith(
        "powersgd_rank: unknown key: it belongs to strategy=powersgd, and this is strategy=ddp"
    )


def test_switching_between_options_of_one_strategy_keeps_the_rest():
    assert BASE.replace(strategy="gather-scatter").strategy.name == "gather-scatter"
    averaged = BASE.replace(strategy="model-averaging", averaging_period=4)
    assert averaged.replace(strategy="model-averaging").strategy.averaging_period == 4


def test_selecting_adam_drops_sgd_options_and_keeps_the_shared_weight_decay():
    config = BASE.with_overrides({"optimizer": "adam", "adam_betas": "0.9,0.98"})
    assert config.optimizer.adam_betas == (0.9, 0.98)
    assert config.optimizer.weight_decay == BASE.optimizer.weight_decay
    assert "momentum" not in config.flat_keys()
    with pytest.raises(ConfigError, match="momentum: unknown key: it belongs to optimizer=sgd"):
        BASE.with_overrides({"optimizer": "adam", "momentum": "0.5"})


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"optimizer": "adam", "adam_betas": (0.9,)}, "adam_betas"),
        ({"optimizer": "adam", "adam_betas": (0.9, 1.0)}, "adam_betas"),
        ({"optimizer": "adam", "adam_eps": 0.0}, "adam_eps"),
        ({"strategy": "powersgd", "powersgd_start_iter": 1}, "powersgd_start_iter"),
        ({"strategy": "powersgd", "powersgd_rank": 0}, "powersgd_rank"),
        ({"strategy": "model-averaging", "averaging_period": 0}, "averaging_period"),
    ],
)
def test_strategy_and_optimizer_options_are_validated_with_the_key(changes, key):
    with pytest.raises(ConfigError) as err:
        BASE.replace(**changes)
    assert err.value.key == key


def test_a_schedule_with_a_required_key_says_to_set_it():
    with pytest.raises(ConfigError) as err:
        BASE.with_overrides({"lr_schedule": "warmup-inverse-sqrt"})
    assert err.value.key == "warmup_steps"
    assert "lr_schedule=warmup-inverse-sqrt needs it: add --set warmup_steps=" in str(err.value)
    config = BASE.with_overrides({"lr_schedule": "warmup-inverse-sqrt", "warmup_steps": "10"})
    assert (config.schedule.lr, config.schedule.lr_scaling) == (0.05, "linear")  # kept
    assert "warmup_epochs" not in config.flat_keys()


# ---- the rules of each benchmark's components -----------------------------------------


@pytest.mark.parametrize(
    ("benchmark", "changes", "key"),
    [
        ("transformer-wmt17", {"target_value": 120.0}, "target_value"),
        ("lstm-wikitext2", {"target_value": 0.5}, "target_value"),
        ("transformer-wmt17", {"num_heads": 15}, "num_heads"),
        ("transformer-wmt17", {"ffn_dim": 0}, "ffn_dim"),
        ("transformer-wmt17", {"bptt": 35}, "bptt"),
        ("transformer-wmt17", {"hidden_dim": 512}, "hidden_dim"),
        ("transformer-wmt17", {"global_batch": 4096}, "global_batch"),
        ("transformer-wmt17", {"label_smoothing": 1.0}, "label_smoothing"),
        ("transformer-wmt17", {"warmup_steps": 0}, "warmup_steps"),
        ("transformer-wmt17", {"warmup_epochs": 1.0}, "warmup_epochs"),
        ("transformer-wmt17", {"memory_format": "channels_last"}, "memory_format"),
        ("transformer-wmt17", {"compile_model": True}, "compile_model"),
        ("transformer-wmt17", {"dropout": math.inf}, "dropout"),
        ("lstm-wikitext2", {"batch_unit": "tokens"}, "batch_unit"),
        ("lstm-wikitext2", {"beam_size": 4}, "beam_size"),
        ("gnmt-wmt16", {"lr_decay_start": 1.0}, "lr_decay_start"),
        ("gnmt-wmt16", {"grad_clip_norm": 0.0}, "grad_clip_norm"),
        ("gnmt-wmt16", {"num_layers": 1}, "num_layers"),
        ("cnn-digits", {"hidden_dim": 64}, "hidden_dim"),
        ("cnn-digits", {"warmup_steps": 100}, "warmup_steps"),
        ("cnn-digits", {"label_smoothing": 0.1}, "label_smoothing"),
        ("cnn-digits", {"grad_clip_norm": 1.0}, "grad_clip_norm"),  # classification: no clip
        ("cnn-digits", {"data_dir": "/data"}, "data_dir"),  # digits ship with scikit-learn
        ("resnet20-cifar10", {"depth": 21}, "depth"),
        ("resnet20-cifar10", {"dataset": "epsilon"}, "dataset"),
        ("logreg-epsilon", {"memory_format": "channels_last"}, "memory_format"),
        ("logreg-epsilon", {"lr_scale_table": ()}, "lr_scale_table"),
    ],
)
def test_each_benchmarks_keys_are_validated_with_the_key(benchmark, changes, key):
    with pytest.raises(ConfigError) as err:
        TRAINING[benchmark].replace(**changes)
    assert err.value.key == key


def test_an_unknown_key_lists_only_that_configs_keys():
    with pytest.raises(ConfigError) as err:
        BASE.with_overrides({"learning_rate": "0.1"})
    message = str(err.value)
    assert message.startswith(
        "learning_rate: unknown key; valid keys: model [model]; data [dataset, batch_size]; "
    )
    assert all(key in message for key in BASE.flat_keys())
    for elsewhere in ("beam_size", "d_model", "bptt", "depth", "powersgd_rank", "adam_eps"):
        assert elsewhere not in message


def test_a_misspelt_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match=r"unknown key \(did you mean momentum\?\)"):
        BASE.with_overrides({"momentun": "0.5"})


@pytest.mark.parametrize(
    ("benchmark", "old", "new"),
    [
        ("resnet20-cifar10", "resnet_depth", "depth"),
        ("transformer-wmt17", "hidden_dim", "d_model"),
        ("lstm-wikitext2", "lstm_weight_drop", "weight_drop"),
    ],
)
def test_a_key_renamed_since_the_flat_config_says_its_new_name(benchmark, old, new):
    with pytest.raises(ConfigError, match=rf"{old}: unknown key.* \(now called {new}\);"):
        TRAINING[benchmark].with_overrides({old: "1"})


def test_a_model_key_of_another_family_names_the_families_that_have_it():
    with pytest.raises(ConfigError) as err:
        TRAINING["transformer-wmt17"].with_overrides({"hidden_dim": "512"})
    assert "it belongs to model=awd-lstm or gnmt, and this is model=transformer" in str(err.value)


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_flat_keys_are_unique_for_every_option_of_every_choice(name):
    config = BENCHMARKS[name].config
    classes = {part: type(component) for part, component in config.parts().items()}
    assert len(config.flat_keys()) == sum(len(field_types(c)) for c in classes.values())
    for part, choice in type(config).CHOICES.items():
        for option in choice.options:  # refuses a collision with a TypeError
            swapped = classes | {part: option}
            keys = type(config).key_map(swapped)
            assert len(keys) == sum(len(field_types(c)) for c in swapped.values())


# ---- the LR plan -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "workers", "plan"),
    [
        ("resnet20-cifar10", 8, LrPlan(0.0125, "linear x 8 workers", 0.1,
                                       "ramped linearly from lr over 5 epochs")),
        ("cnn-digits", 2, LrPlan(0.05, "linear x 2 workers", 0.1,
                                 "ramped linearly from lr over 5 epochs")),
        ("logreg-epsilon", 4, LrPlan(200.0, "table x 3 at 4 workers", 600.0)),
        ("lstm-wikitext2", 4, LrPlan(15.0, "sqrt x sqrt(4 workers)", 30.0)),
        ("transformer-wmt17", 8, LrPlan(1.976e-3, "none: the same at any worker count", 1.976e-3,
                                        "linear warm-up over 1000 updates")),
    ],
)  # fmt: skip
def test_the_lr_plan_says_the_base_lr_the_rule_and_the_peak(name, workers, plan):
    got = TRAINING[name].lr_plan(workers)
    assert got == dataclasses.replace(plan, peak_lr=pytest.approx(plan.peak_lr))


def test_the_lr_plan_reads_as_one_line():
    assert str(BASE.lr_plan(2)) == (
        "lr 0.05 -> 0.1 (linear x 2 workers, ramped linearly from lr over 5 epochs)"
    )


def test_the_config_and_every_component_import_without_torch():
    import subprocess
    import sys

    modules = [
        "workloads.configuration.train_config", "workloads.configuration.micro_config",
        "workloads.models", "workloads.optimization.optim",
        "workloads.optimization.schedule", "workloads.strategies", "workloads.strategies.config",
        "workloads.tasks", "workloads.tasks.config", "workloads.data.config",
        "workloads.adaptive.config",
        *(f"workloads.models.{family}.config" for family in (
            "cnn", "resnet", "vgg", "logreg", "awd_lstm", "gnmt", "transformer",
        )),
    ]  # fmt: skip
    code = f"import sys; import {', '.join(modules)}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_workload_entry_refuses_a_config_it_cannot_read_in_one_line():
    import subprocess
    import sys

    newer = json.dumps(BASE.to_dict() | {"version": TrainConfig.VERSION + 1})
    cmd = [sys.executable, "-m", "workloads.train", "--config", newer, "--run-id", "r",
           "--output-dir", "/nonexistent"]  # fmt: skip
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29999"}  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1
    assert done.stderr == (
        "workloads: --config: version: 3 is newer than this stackbench reads (2); update "
        "stackbench to the version that wrote it\n"
    )
