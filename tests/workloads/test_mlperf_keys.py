import pytest

from contract import events
from runner.job.benchmarks import (
    BENCHMARKS,
    GNMT_WMT16,
    LOGREG_EPSILON,
    TRANSFORMER_WMT17,
    Benchmark,
)
from workloads.telemetry.mlperf_keys import decay_boundary_epochs, hyperparameters, metadata

TRANSFORMER, GNMT = TRANSFORMER_WMT17.config, GNMT_WMT16.config


def test_transformer_keys_are_the_mlperf_reference_settings():
    params = hyperparameters(TRANSFORMER, world_size=4)
    assert params == {
        events.GLOBAL_BATCH_SIZE: 2**17,  # tokens
        events.GRADIENT_ACCUMULATION_STEPS: 4,  # 2**17 / (8192 tokens x 4 workers)
        events.OPT_NAME: "adam",
        events.OPT_BASE_LR: 1.976e-3,
        events.OPT_WEIGHT_DECAY: 0.0,
        events.OPT_LR_DECAY_SCHEDULE: "warmup-inverse-sqrt",
        events.OPT_ADAM_BETA_1: 0.9,
        events.OPT_ADAM_BETA_2: 0.98,
        events.OPT_ADAM_EPSILON: 1e-9,
        events.OPT_LR_WARMUP_STEPS: 1000,
        events.LABEL_SMOOTHING: 0.1,
        events.BEAM_SIZE: 4,
        events.LENGTH_PENALTY: 0.6,
        events.MAX_SEQUENCE_LENGTH: 256,
    }
    assert metadata(TRANSFORMER) == {
        events.GLOBAL_BATCH_SIZE: {"unit": "tokens"},
        events.MAX_SEQUENCE_LENGTH: {"method": "discard"},
        events.LENGTH_PENALTY: {"form": "gnmt"},  # the reference's ((5+|Y|)/6)**alpha
    }


def test_logreg_weight_decay_is_the_one_its_optimizer_applies():
    # The L2 penalty's gradient (l2_rate * w) is the optimizer's weight decay
    # (build_optimizer): the log says so, not the configured 0 of the optimizer alone.
    params = hyperparameters(LOGREG_EPSILON.config, world_size=1)
    assert params[events.OPT_WEIGHT_DECAY] == 2.5e-6


def test_gnmt_keys_give_the_step_decay_boundaries_in_epochs():
    params = hyperparameters(GNMT, world_size=2)
    assert params[events.GRADIENT_ACCUMULATION_STEPS] == 8  # 2048 / (128 x 2)
    assert params[events.OPT_GRADIENT_CLIP_NORM] == 5.0
    assert params[events.OPT_LR_ALT_WARMUP_FUNC] is params[events.OPT_LR_ALT_DECAY_FUNC] is True
    assert (params[events.OPT_LR_DECAY_FACTOR], params[events.OPT_LR_DECAY_STEPS]) == (0.5, 4)
    # 6 epochs, first decay at 40%, then every (1 - 0.4) / 4 of training.
    assert params[events.OPT_LR_DECAY_BOUNDARY_EPOCHS] == [2.4, 3.3, 4.2, 5.1]
    assert events.OPT_ADAM_EPSILON in params and events.OPT_LR_WARMUP_EPOCHS not in params


def test_decay_boundaries_match_where_the_schedule_decays():
    from workloads.optimization.schedule import warmup_step_decay_lr

    schedule, epochs = GNMT.schedule, GNMT.run.max_epochs
    for epoch in decay_boundary_epochs(schedule, epochs):  # up to the schedule's float rounding
        before = warmup_step_decay_lr(schedule, 1.0, (epoch - 1e-6) / epochs, steps_done=10**6)
        after = warmup_step_decay_lr(schedule, 1.0, (epoch + 1e-6) / epochs, steps_done=10**6)
        assert after == pytest.approx(before * schedule.lr_gamma)


def test_accumulation_reaches_the_global_batch_when_workers_do_not_divide_it():
    config = GNMT.replace(batch_size=96)
    assert hyperparameters(config, world_size=3)[events.GRADIENT_ACCUMULATION_STEPS] == 8
    assert hyperparameters(config, world_size=64)[events.GRADIENT_ACCUMULATION_STEPS] == 1


@pytest.mark.parametrize("name", [n for n, b in BENCHMARKS.items() if isinstance(b, Benchmark)])
def test_every_training_benchmark_maps_to_json_values(name):
    import json

    config = BENCHMARKS[name].config
    params = hyperparameters(config, world_size=4)
    assert json.loads(json.dumps(params)) == params
    data = config.data
    if data.global_batch is None:  # one batch per worker per update
        assert params[events.GLOBAL_BATCH_SIZE] == data.batch_size * 4
        assert params[events.GRADIENT_ACCUMULATION_STEPS] == 1
    else:  # the translation tasks accumulate to their global batch
        assert params[events.GLOBAL_BATCH_SIZE] == data.global_batch
        steps = params[events.GRADIENT_ACCUMULATION_STEPS]
        assert steps * data.batch_size * 4 >= data.global_batch
        assert (steps - 1) * data.batch_size * 4 < data.global_batch
