import dataclasses

import pytest

from runner.job.benchmarks import BENCHMARKS, CNN_DIGITS
from workloads.config import ConfigError, TrainConfig, parse_value, with_overrides

BASE = CNN_DIGITS.config


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"max_epochs": 0}, "max_epochs"),
        ({"lr": -0.1}, "lr"),
        ({"momentum": -1.0}, "momentum"),
        ({"target_value": 1.5}, "target_value"),
        ({"momentum": 0.0, "nesterov": True}, "nesterov"),
        ({"warmup_epochs": 100.0}, "warmup_epochs"),
        ({"lr_milestones": (5, 3)}, "lr_milestones"),
        ({"lr_gamma": 0.0}, "lr_gamma"),
        ({"time_budget_s": -5.0}, "time_budget_s"),
        ({"batch_size": True}, "batch_size"),
        ({"strategy": "nope"}, "strategy"),
    ],
)
def test_invalid_values_raise_an_error_naming_the_key(changes, key):
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(BASE, **changes)
    assert err.value.key == key


def test_json_round_trip_keeps_tuples_and_floats():
    config = dataclasses.replace(BASE, lr_milestones=(2, 5), time_budget_s=30.0)
    assert TrainConfig.from_json(config.to_json()) == config


def test_from_dict_rejects_unknown_keys():
    data = BASE.to_dict() | {"bogus": 1}
    with pytest.raises(ConfigError, match="bogus"):
        TrainConfig.from_dict(data)


def test_optional_values_parse_none():
    assert with_overrides(BASE, {"time_budget_s": "none"}).time_budget_s is None
    assert with_overrides(BASE, {"time_budget_s": "60"}).time_budget_s == 60.0


def test_parse_value_reads_booleans_in_common_spellings():
    assert parse_value("k", "yes", bool) is True
    assert parse_value("k", "Off", bool) is False


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"strategy": "powersgd", "powersgd_start_iter": 1}, "powersgd_start_iter"),
        ({"strategy": "powersgd", "powersgd_rank": 0}, "powersgd_rank"),
        ({"strategy": "model-averaging", "averaging_period": 0}, "averaging_period"),
        ({"averaging_period": 4}, "averaging_period"),  # the strategy is ddp
        ({"optimizer": "adam"}, "momentum"),  # the benchmark's SGD momentum would be ignored
        ({"optimizer": "adam", "momentum": 0.0, "adam_betas": (0.9,)}, "adam_betas"),
        ({"optimizer": "adam", "momentum": 0.0, "adam_betas": (0.9, 1.0)}, "adam_betas"),
        ({"adam_eps": 1e-6}, "adam_eps"),  # the optimizer is sgd
    ],
)
def test_strategy_and_optimizer_options_are_validated_with_the_key(changes, key):
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(BASE, **changes)
    assert err.value.key == key


def test_adam_betas_parse_from_the_command_line():
    config = with_overrides(BASE, {"optimizer": "adam", "momentum": "0", "adam_betas": "0.9,0.98"})
    assert config.adam_betas == (0.9, 0.98)


@pytest.mark.parametrize(
    ("benchmark", "changes", "key"),
    [
        ("transformer-wmt17", {"target_metric": "top1_accuracy"}, "target_metric"),
        ("transformer-wmt17", {"target_value": 120.0}, "target_value"),
        ("lstm-wikitext2", {"target_value": 0.5}, "target_value"),
        ("transformer-wmt17", {"num_heads": 15}, "num_heads"),
        ("transformer-wmt17", {"ffn_dim": 0}, "ffn_dim"),
        ("transformer-wmt17", {"bptt": 35}, "bptt"),
        ("transformer-wmt17", {"global_batch": 4096}, "global_batch"),
        ("transformer-wmt17", {"label_smoothing": 1.0}, "label_smoothing"),
        ("transformer-wmt17", {"warmup_steps": 0}, "warmup_steps"),
        ("transformer-wmt17", {"warmup_epochs": 1.0}, "lr_schedule"),
        ("transformer-wmt17", {"memory_format": "channels_last"}, "memory_format"),
        ("lstm-wikitext2", {"batch_unit": "tokens"}, "batch_unit"),
        ("lstm-wikitext2", {"beam_size": 4}, "beam_size"),
        ("gnmt-wmt16", {"lr_decay_start": 1.0}, "lr_decay_start"),
        ("gnmt-wmt16", {"grad_clip_norm": 0.0}, "grad_clip_norm"),
        ("cnn-digits", {"hidden_dim": 64}, "hidden_dim"),
        ("cnn-digits", {"warmup_steps": 100}, "warmup_steps"),
        ("transformer-wmt17", {"lr_decay_count": 2}, "lr_decay_start"),
        ("cnn-digits", {"label_smoothing": 0.1}, "label_smoothing"),
    ],
)
def test_sequence_task_options_are_validated_with_the_key(benchmark, changes, key):
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(BENCHMARKS[benchmark].config, **changes)
    assert err.value.key == key


@pytest.mark.parametrize("name", ["lstm-wikitext2", "gnmt-wmt16", "transformer-wmt17"])
def test_sequence_benchmarks_round_trip_through_json(name):
    config = BENCHMARKS[name].config
    assert type(config).from_json(config.to_json()) == config
