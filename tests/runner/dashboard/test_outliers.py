"""Outlier flags of a study's cell: modified z-score of time to target, and missed targets."""

from __future__ import annotations

from runner.dashboard.outliers import FAST, MISSED, SLOW, flags


def test_a_run_far_slower_than_the_others_is_flagged():
    assert flags([10.0, 10.4, 9.8, 10.1, 25.0]) == [None, None, None, None, SLOW]


def test_a_run_far_faster_than_the_others_is_flagged():
    assert flags([10.0, 10.4, 9.8, 10.1, 2.0]) == [None, None, None, None, FAST]


def test_ordinary_spread_flags_nothing():
    assert flags([10.0, 11.0, 12.0, 13.0, 14.0]) == [None] * 5


def test_fewer_than_five_converged_runs_flag_no_times():
    # With three runs the MAD is the smaller of two deviations: 72 s among 37 and 41 s would
    # score 4.7, an ordinary spread on a busy machine.
    assert flags([72.35, 36.57, 41.09]) == [None, None, None]
    assert flags([10.0, 10.1, 10.2, 30.0]) == [None] * 4


def test_when_most_runs_tie_the_mean_deviation_still_finds_the_outlier():
    assert flags([10.0, 10.0, 10.0, 10.0, 40.0]) == [None, None, None, None, SLOW]
    assert flags([10.0] * 5) == [None] * 5


def test_a_missed_target_is_flagged_when_another_run_reached_it():
    assert flags([10.0, None, 10.5, 9.9]) == [None, MISSED, None, None]
    assert flags([None, None]) == [None, None]  # no run reached it: nothing stands apart
