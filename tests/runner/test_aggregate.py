import math

import pytest

from runner.results import aggregate
from runner.results.aggregate import mean_phase_ms_per_step, mlperf_aggregate, speedups


def test_five_runs_drop_the_fastest_and_slowest_and_average_the_rest():
    agg = mlperf_aggregate([10.0, 1.0, 4.0, 3.0, 2.0])
    assert agg.mean_s == pytest.approx(3.0)  # mean of 2, 3, 4
    assert agg.dropped_s == (1.0, 10.0)
    assert agg.kept_s == (2.0, 3.0, 4.0)
    assert agg.std_s == pytest.approx(1.0)
    assert "MLPerf" in agg.rule


def test_one_miss_among_five_is_dropped_as_the_slowest():
    agg = mlperf_aggregate([2.0, None, 4.0, 3.0, 5.0])
    assert agg.valid
    assert agg.mean_s == pytest.approx(4.0)  # 3, 4, 5 kept; 2 and the miss dropped
    assert agg.num_converged == 4
    assert math.isinf(agg.dropped_s[1])


def test_two_misses_among_five_make_the_result_invalid():
    agg = mlperf_aggregate([2.0, None, 4.0, None, 5.0])
    assert not agg.valid
    assert "at most one" in agg.reason


def test_fewer_than_five_runs_average_all_and_drop_nothing():
    agg = mlperf_aggregate([1.0, 2.0, 6.0])
    assert agg.mean_s == pytest.approx(3.0)
    assert agg.dropped_s == ()
    assert "nothing dropped" in agg.rule


def test_fewer_than_five_runs_with_a_miss_are_invalid():
    agg = mlperf_aggregate([1.0, None, 6.0])
    assert agg.mean_s is None
    assert agg.num_converged == 2
    assert "none may be dropped" in agg.reason


def test_speedup_is_relative_to_the_fewest_workers_with_a_valid_time():
    out = {s.workers: s for s in speedups({1: None, 2: 8.0, 4: 4.0, 8: 5.0})}
    assert out[1].speedup is None
    assert out[2].speedup == pytest.approx(1.0)
    assert out[4].speedup == pytest.approx(2.0)
    assert out[4].efficiency == pytest.approx(1.0)
    assert out[8].efficiency == pytest.approx(1.6 / 4)


def test_phase_means_are_per_step_in_ms_averaged_over_runs():
    runs = [
        ({"forward": 1.0, "communication": 0.5}, 100),
        ({"forward": 3.0, "communication": 0.5}, 100),
    ]
    assert mean_phase_ms_per_step(runs) == pytest.approx({"forward": 20.0, "communication": 5.0})
    assert mean_phase_ms_per_step([({"forward": 1.0}, 0)]) == {}


def test_outliers_are_runs_far_from_their_cells_median_and_misses_are_not():
    assert aggregate.outliers({"a": 10.0, "b": 11.0, "c": 30.0}) == {"c": pytest.approx(30 / 11)}
    assert aggregate.outliers({"a": 10.0, "b": 11.0, "c": 3.0}) == {"c": pytest.approx(3 / 10)}
    assert aggregate.outliers({"a": 10.0, "b": 11.0, "c": 14.0}) == {}
    assert aggregate.outliers({"a": 10.0, "b": 40.0}) == {}  # two runs: no median to trust
    assert aggregate.outliers({"a": 10.0, "b": 11.0, "c": None, "d": 12.0}) == {}


def test_a_cell_with_two_misses_among_five_keeps_only_finite_times_to_show():
    # The misses are inf: the standard deviation of a kept tuple holding them raised an
    # AttributeError deep in statistics, which took `runner report` down with a traceback.
    for times in ([2.0, None, 4.0, None, 5.0], [2.0, None, None, None, 5.0], [None] * 6):
        agg = mlperf_aggregate(times)
        assert not agg.valid
        assert all(math.isfinite(t) for t in agg.kept_s)
        assert agg.std_s is None or math.isfinite(agg.std_s)


def test_times_whose_sum_is_past_the_float_range_still_average():
    # A damaged summary's 1e308 s: a huge mean, not an OverflowError from fsum.
    assert mlperf_aggregate([1e308, 1e308, 1e308]).mean_s == pytest.approx(1e308)
    assert mlperf_aggregate([1.0, 1e308, 1e308, 1e308, 1e308, 2e308 / 2]).mean_s == 1e308


def test_speedups_name_the_baseline_they_are_against():
    out = {s.workers: s for s in speedups({1: None, 2: 8.0, 4: 4.0})}
    assert {s.base_workers for s in out.values()} == {2}


def test_a_ratio_needs_three_runs_that_reached_the_target_in_each_arm():
    from runner.results.aggregate import ratio_interval

    ratio = ratio_interval([5.0, None, 6.0], [10.0, 11.0, 12.0])  # the miss is no time
    assert ratio.ratio is None and ratio.verdict == "too few runs"
    assert (ratio.runs_a, ratio.runs_b) == (2, 3)
    assert ratio_interval([5.0, 5.5, 6.0], [10.0, 11.0, 12.0]).verdict == "faster"
