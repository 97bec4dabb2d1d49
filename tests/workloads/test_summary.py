import pytest

from contract.summary import TrainLoss
from runner.job.benchmarks import BENCHMARKS
from workloads.telemetry.summary import (
    STEP_TIMES_KEPT,
    RunTally,
    summarize,
    train_loss_report,
    window_mean_ms,
)


def test_iteration_mean_covers_steps_2_to_40_and_leaves_out_the_first():
    times_s = [10.0] + [0.5] * 39 + [100.0] * 10  # warm-up, 39 steps in the window, later ones
    assert window_mean_ms(times_s, 2, 40) == 500.0


def test_iteration_mean_of_a_shorter_run_uses_the_steps_there_are():
    assert window_mean_ms([9.0, 0.2, 0.4], 2, 40) == pytest.approx(300.0)
    assert window_mean_ms([9.0], 2, 40) is None


def test_the_tally_keeps_the_runs_first_step_times_across_epochs():
    tally = RunTally()
    tally.add_step_times([1.0] * 60)
    tally.add_step_times([2.0] * 60)
    assert len(tally.step_times_s) == STEP_TIMES_KEPT
    assert tally.step_times_s[59:61] == [1.0, 2.0]


def test_summary_reports_the_cs744_iteration_time():
    tally = RunTally(steps=50, samples=50 * 256)
    tally.add_step_times([3.0] + [1.5] * 49)
    tally.phases["forward"] = 76.5
    summary = summarize(
        BENCHMARKS["vgg11-cifar10"].config, tally, run_id="r", benchmark="vgg11-cifar10",
        division="closed", strategy="ddp", world_size=1, device="cpu", precision="fp32",
        run_time_s=80.0,
        init_time_s=1.0,
    )  # fmt: skip
    assert summary.iteration_time_ms_2_to_40 == 1500.0
    assert summary.first_step_times_ms[:2] == (3000.0, 1500.0)


def test_throughput_and_phase_shares_come_from_the_loops_wall_time_not_the_step_timers():
    tally = RunTally(steps=11, samples=11 * 100, first_step_s=1.0)
    for phase, seconds in {"data": 1.0, "forward": 3.0, "backward": 4.0, "optimizer": 1.0}.items():
        tally.phases[phase] = seconds  # 9 s of step phases, the first step's 1 s included
    tally.close_loop(train_wall_s=10.0)  # 1 s of the loop went between steps
    summary = summarize(
        BENCHMARKS["cnn-digits"].config, tally, run_id="r", benchmark="cnn-digits",
        division="closed", strategy="local", world_size=1, device="cpu", precision="fp32",
        run_time_s=12.0, init_time_s=1.0,
    )  # fmt: skip
    assert summary.phases_s["other"] == pytest.approx(1.0)
    assert summary.train_time_s == pytest.approx(10.0)
    assert summary.phase_shares["other"] == pytest.approx(0.1)
    assert sum(summary.phase_shares.values()) == pytest.approx(1.0)
    # 10 steady steps of 100 samples in the 9 s after the warm-up step, not in 8 s of timers.
    assert summary.throughput_samples_per_s == pytest.approx(1000 / 9.0)
    assert summary.step_time_ms == pytest.approx(900.0)


@pytest.mark.parametrize("steps", [0, 1])
def test_a_run_without_a_steady_step_reports_no_throughput_not_zero(steps):
    """A run that diverged in its first epoch tallied no step; the loop's wall time is all
    `other`, which is no rate of 0 samples/s."""
    tally = RunTally(steps=steps, samples=steps * 64, first_step_s=0.05 * steps)
    tally.close_loop(train_wall_s=0.2)
    summary = summarize(
        BENCHMARKS["cnn-digits"].config, tally, run_id="r", benchmark="cnn-digits",
        division="closed", strategy="ddp", world_size=2, device="cpu", precision="fp32",
        run_time_s=0.2, init_time_s=1.0,
    )  # fmt: skip
    assert summary.throughput_samples_per_s is None and summary.step_time_ms is None


def test_train_loss_target_is_reported_at_the_first_epoch_that_meets_it():
    losses = [
        {"epoch": 1, "value": 0.5, "time_s": 10.0},
        {"epoch": 2, "value": 0.28, "time_s": 20.0},
        {"epoch": 3, "value": 0.27, "time_s": 30.0},
    ]
    report = train_loss_report(losses, 0.2828)
    assert report == TrainLoss(final=0.27, target=0.2828, time_to_target_s=20.0, target_epoch=2)


def test_train_loss_without_a_target_reports_the_final_value_only():
    report = train_loss_report([{"epoch": 1, "value": 0.4, "time_s": 1.0}], None)
    assert report.final == 0.4 and report.time_to_target_s is None
