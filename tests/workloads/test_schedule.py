import math

import pytest

from runner.job.benchmarks import BENCHMARKS
from workloads.configuration.train_config import ConfigError
from workloads.optimization.schedule import inverse_sqrt_lr, table_multiplier

RESNET = BENCHMARKS["resnet20-cifar10"].config
LOGREG = BENCHMARKS["logreg-epsilon"].config
ETA = 0.1 / 256  # the 1a spec's LR per sample


@pytest.mark.parametrize(
    ("epochs_done", "expected"),
    [
        (0.0, ETA * 32),  # warm-up starts at eta * b
        (2.5, ETA * 32 * (1 + 7 / 2)),  # half-way between eta*b and eta*b*k, k = 8
        (5.0, ETA * 32 * 8),  # eta * b * k after 5 epochs
        (81.99, ETA * 32 * 8),
        (82.0, ETA * 32 * 8 * 0.1),  # x0.1 at 82
        (108.5, ETA * 32 * 8 * 0.1),
        (109.0, ETA * 32 * 8 * 0.01),  # x0.1 again at 109
        (163.9, ETA * 32 * 8 * 0.01),
    ],
)
def test_resnet20_schedule_at_key_epochs_with_8_workers(epochs_done, expected):
    assert RESNET.lr_at(8, epochs_done) == pytest.approx(expected)


def test_resnet20_schedule_on_one_worker_has_no_ramp():
    assert RESNET.lr_at(1, 0.0) == RESNET.lr_at(1, 4.9) == pytest.approx(0.0125)


def test_a_run_shorter_than_its_warm_up_ends_on_the_ramp():
    # cnn-digits ramps over 5 epochs (bench/convergence_study.md); a 1-epoch check still runs.
    digits = BENCHMARKS["cnn-digits"].config.replace(max_epochs=1)
    assert digits.schedule.warmup_epochs > digits.run.max_epochs
    assert digits.lr_at(4, 0.0) == pytest.approx(0.05)
    assert digits.lr_at(4, 1.0) == pytest.approx(0.05 + (0.2 - 0.05) / 5)  # not yet 0.2


@pytest.mark.parametrize(
    ("workers", "alpha"),
    [(1, 200), (2, 400), (4, 600), (8, 700), (16, 800), (32, 800), (64, 800)],
)
def test_logreg_alpha_follows_the_per_worker_count_table(workers, alpha):
    assert LOGREG.lr_at(workers, 0.0, steps_done=0) == pytest.approx(alpha)


@pytest.mark.parametrize(("steps_done", "factor"), [(0, 1.0), (3, 0.5), (99, 0.1), (9999, 0.01)])
def test_logreg_lr_decays_as_alpha_over_sqrt_t(steps_done, factor):
    assert LOGREG.lr_at(4, 3.7, steps_done) == pytest.approx(600 * factor)


def test_worker_counts_between_table_entries_take_the_lower_entry():
    table = (1.0, 2.0, 3.0, 3.5, 4.0)
    assert [table_multiplier(table, k) for k in (3, 5, 7, 12)] == [2.0, 3.0, 3.0, 3.5]


def test_inverse_sqrt_counts_steps_from_one():
    assert inverse_sqrt_lr(200.0, 1) == 200.0
    assert inverse_sqrt_lr(200.0, 100) == pytest.approx(200.0 / math.sqrt(100))
    with pytest.raises(ValueError, match="from 1"):
        inverse_sqrt_lr(200.0, 0)


def test_inverse_sqrt_has_no_milestones_to_set():
    with pytest.raises(ConfigError, match="lr_milestones: unknown key: it belongs to lr_schedule="):
        LOGREG.replace(lr_milestones=(3,))


def test_table_scaling_needs_a_table():
    with pytest.raises(ConfigError, match="lr_scale_table"):
        LOGREG.replace(lr_scale_table=())


TRANSFORMER = BENCHMARKS["transformer-wmt17"].config
GNMT = BENCHMARKS["gnmt-wmt16"].config
LSTM = BENCHMARKS["lstm-wikitext2"].config


@pytest.mark.parametrize(
    ("steps_done", "expected"),
    [
        (0, 1.976e-3 / 1000),  # update 1 of the 1000 warm-up updates
        (499, 1.976e-3 * 0.5),  # linear: half-way at update 500
        (999, 1.976e-3),  # the peak at the end of warm-up
        (3999, 1.976e-3 * math.sqrt(1000 / 4000)),  # inverse square root after it
    ],
)
def test_transformer_schedule_warms_up_linearly_then_decays_as_inverse_sqrt(steps_done, expected):
    assert TRANSFORMER.lr_at(1, 0.0, steps_done) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("epochs_done", "steps_done", "expected"),
    [
        (0.0, 0, 2e-3 * 0.01),  # the exponential warm-up starts at 1%
        (0.0, 100, 2e-3 * 0.1),  # half-way (in the exponent) at 10%
        (0.1, 200, 2e-3),  # then the peak...
        (0.399 * 6, 10_000, 2e-3),  # ...until 40% of training
        (0.4 * 6, 10_000, 2e-3 * 0.5),  # first x0.5 at 40%
        (0.55 * 6 + 1e-9, 10_000, 2e-3 * 0.25),  # then every (1 - 0.4) / 4 = 15%
        (0.85 * 6 + 1e-9, 10_000, 2e-3 * 0.5**4),  # the fourth and last
        (0.999 * 6, 10_000, 2e-3 * 0.5**4),
    ],
)
def test_gnmt_schedule_warms_up_exponentially_then_halves_four_times_from_40_percent(
    epochs_done, steps_done, expected
):
    assert GNMT.lr_at(1, epochs_done, steps_done) == pytest.approx(expected)


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_lstm_lr_scales_with_the_square_root_of_the_workers_and_stays_constant(workers):
    assert LSTM.lr_at(workers, 0.0) == pytest.approx(15 * math.sqrt(workers))
    assert LSTM.lr_at(workers, 700.0) == pytest.approx(15 * math.sqrt(workers))
