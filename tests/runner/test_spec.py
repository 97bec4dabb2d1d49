import json
import re
from datetime import UTC, datetime

import pytest

from runner.errors import SpecError
from runner.job.benchmarks import BENCHMARKS, CNN_DIGITS
from runner.job.spec import JobSpec, Placement, new_run_id, parse_overrides, resolve, workload_argv


def test_resolve_applies_overrides_with_their_field_types():
    spec = resolve("cnn-digits", ["lr=0.2", "batch_size=16", "nesterov=true", "lr_milestones=3,6"])
    assert spec.config.schedule.lr == 0.2
    assert spec.config.data.batch_size == 16
    assert spec.config.optimizer.nesterov is True
    assert spec.config.schedule.lr_milestones == (3, 6)
    assert spec.config.model == CNN_DIGITS.config.model  # untouched keys keep the defaults


def test_resolve_uses_the_benchmarks_default_workers():
    assert resolve("cnn-digits").placement.world_size == CNN_DIGITS.default_workers


def test_unknown_benchmark_lists_the_valid_names():
    with pytest.raises(SpecError) as err:
        resolve("resnet-imaginary")
    assert err.value.param == "BENCHMARK"
    for name in BENCHMARKS:
        assert name in str(err.value)


def test_unknown_set_key_lists_the_benchmarks_keys_and_only_those():
    with pytest.raises(SpecError) as err:
        resolve("cnn-digits", ["learning_rate=0.1"])
    assert err.value.param == "--set"
    message = str(err.value)
    assert message.startswith("cnn-digits: learning_rate: unknown key; valid keys: model [")
    assert all(key in message for key in CNN_DIGITS.config.flat_keys())
    assert "beam_size" not in message and "resnet" not in message


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("lr=fast", "expected a finite number"),
        ("batch_size=3.5", "expected an integer"),
        ("nesterov=maybe", "expected true or false"),
        ("strategy=carrier-pigeon", "expected one of ddp, allreduce"),
        ("lr_milestones=a,b", "expected a comma-separated list of integers"),
    ],
)
def test_wrong_value_type_says_what_is_expected(item, expected):
    with pytest.raises(SpecError) as err:
        resolve("cnn-digits", [item])
    assert expected in str(err.value)
    assert item.split("=")[0] in str(err.value)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("batch_size=0", "batch_size: expected an integer in [1, 16777216], got 0"),
        ("lr=nan", "lr: expected a finite number in (0, 1000], got nan"),
        ("lr=inf", "lr: expected a finite number in (0, 1000], got inf"),
        ("lr=-1", "lr: expected a finite number in (0, 1000], got -1.0"),
        ("lr=1e6", "lr: expected a finite number in (0, 1000], got 1000000.0"),
        ("momentum=1.5", "momentum: expected a finite number in [0, 1), got 1.5"),
    ],
)
def test_invalid_value_names_the_key_and_its_valid_range(item, message):
    with pytest.raises(SpecError) as err:
        resolve("cnn-digits", [item])
    assert str(err.value) == message


def test_a_rule_between_keys_also_says_what_the_key_takes():
    with pytest.raises(SpecError) as err:
        resolve("cnn-digits", ["nesterov=true", "momentum=0"])
    assert str(err.value) == (
        "nesterov: Nesterov momentum needs momentum > 0 (nesterov takes true or false)"
    )


@pytest.mark.parametrize("item", ["lr", "=3", ""])
def test_malformed_set_item_shows_the_expected_form(item):
    with pytest.raises(SpecError, match="expected key=value"):
        parse_overrides([item])


def test_tunable_overrides_stay_closed_division():
    spec = resolve("cnn-digits", ["lr=0.1", "batch_size=64"])
    assert spec.division == "closed"
    assert spec.open_keys == ()


def test_non_tunable_override_makes_the_run_open_division_and_names_the_key():
    spec = resolve("cnn-digits", ["momentum=0.5", "lr=0.1"])
    assert spec.division == "open"
    assert spec.open_keys == ("momentum",)


def test_run_controls_such_as_the_seed_do_not_change_the_division():
    assert resolve("cnn-digits", ["seed=7", "max_epochs=3"]).division == "closed"


def test_later_set_items_win():
    assert resolve("cnn-digits", ["lr=0.1", "lr=0.3"]).config.schedule.lr == 0.3


def test_placement_rejects_zero_workers_naming_the_option():
    with pytest.raises(SpecError) as err:
        Placement(procs_per_node=0)
    assert err.value.param == "--workers"


def test_jobspec_round_trips_through_json():
    spec = resolve("cnn-digits", ["momentum=0.5", "lr_milestones=2,4"])
    assert JobSpec.from_dict(json.loads(spec.to_json())) == spec


def test_run_ids_are_sortable_kubernetes_names_with_a_random_suffix():
    now = datetime(2026, 11, 21, 10, 30, 5, tzinfo=UTC)
    first, second = new_run_id("transformer-wmt17", now), new_run_id("transformer-wmt17", now)
    assert first != second  # same second, different runs (1 in 16 million to collide)
    for run_id in (first, second):
        assert re.fullmatch(r"transformer-wmt17-20261121-103005-[0-9a-f]{6}", run_id)
        assert len(run_id) <= 63


def test_workload_argv_carries_the_whole_resolved_config():
    spec = resolve("cnn-digits", ["momentum=0.5"])
    argv = workload_argv(spec, output_dir="/out", python="python")
    assert argv[:3] == ["python", "-m", "workloads.train"]
    config = json.loads(argv[argv.index("--config") + 1])
    assert config == spec.config.to_dict()
    assert "--open-division" in argv
    assert argv[argv.index("--output-dir") + 1] == "/out"


def test_switching_between_exact_strategies_keeps_the_run_closed():
    spec = resolve("cnn-digits", ["strategy=gather-scatter"])
    assert (spec.division, spec.open_keys) == ("closed", ())


def test_a_compressing_strategy_makes_the_run_open_division():
    spec = resolve("cnn-digits", ["strategy=powersgd", "powersgd_rank=2"])
    assert spec.division == "open"
    assert spec.open_keys == ("powersgd_rank", "strategy")


def test_strategy_option_for_another_strategy_is_rejected_naming_its_strategy():
    with pytest.raises(SpecError, match=r"powersgd_rank: unknown key: it belongs to strategy="):
        resolve("cnn-digits", ["powersgd_rank=4"])


def test_allreduce_micro_runs_its_own_workload_module_with_its_config():
    spec = resolve("allreduce-micro", ["max_elements=1000", "dtypes=float32,bfloat16"])
    argv = workload_argv(spec, output_dir="/out", python="python")
    assert argv[:3] == ["python", "-m", "workloads.micro"]
    config = json.loads(argv[argv.index("--config") + 1])
    assert config["measure"]["dtypes"] == ["float32", "bfloat16"]
    assert spec.division == "closed"
    assert JobSpec.from_dict(json.loads(spec.to_json())) == spec


def test_a_micro_benchmark_has_run_limits_and_a_wrong_key_lists_its_own_keys():
    spec = resolve("allreduce-micro", ["time_budget_s=60"])
    assert spec.config.run.time_budget_s == 60.0 and spec.division == "closed"
    with pytest.raises(SpecError) as err:
        resolve("allreduce-micro", ["lr=0.1"])
    assert str(err.value).startswith(
        "allreduce-micro: lr: unknown key; valid keys: measure [min_elements, max_elements"
    )


def test_free_keys_are_the_run_and_execution_components_fields_and_data_dir():
    from dataclasses import fields

    from runner.job.benchmarks import FREE_KEYS
    from workloads.configuration.train_config import ExecutionConfig, RunConfig

    components = {f.name for cls in (RunConfig, ExecutionConfig) for f in fields(cls)}
    assert components | {"data_dir"} == FREE_KEYS
    spec = resolve("resnet20-cifar10", [f"{k}={v}" for k, v in {
        "seed": 3, "max_epochs": 20, "time_budget_s": 60, "eval_every_epochs": 2,
        "stop_at_target": "false", "dist_timeout_s": 60, "data_dir": "/d",
        "memory_format": "contiguous", "compile_model": "true", "precision": "fp32",
    }.items()])  # fmt: skip
    assert spec.division == "closed"
