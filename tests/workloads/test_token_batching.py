import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.data.token_batching import Update, batch_units, length_batches, plan_updates


def lengths(num: int, seed: int, longest: int = 60) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, longest + 1, num)
    tgt = np.clip(src + rng.integers(-5, 6, num), 1, longest)
    return src, tgt


def padded_size(batch: np.ndarray, src: np.ndarray, tgt: np.ndarray) -> int:
    return len(batch) * int(max(src[batch].max(), tgt[batch].max()))


def assert_each_sentence_once(batches: list[np.ndarray], num: int) -> None:
    seen = np.concatenate(batches) if batches else np.empty(0, np.int64)
    assert sorted(seen.tolist()) == list(range(num))


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 50)), max_size=300),
    spare=st.integers(0, 400),
    bucket=st.integers(1, 400),
    seed=st.integers(0, 2**32 - 1),
)
def test_token_batches_stay_within_budget_and_hold_every_sentence_once(data, spare, bucket, seed):
    src = np.array([s for s, _ in data], dtype=np.int64)
    tgt = np.array([t for _, t in data], dtype=np.int64)
    budget = 50 + spare
    batches = length_batches(
        src, tgt, budget, "tokens", seed=seed, epoch=0, bucket_sentences=bucket
    )
    assert all(len(b) and padded_size(b, src, tgt) <= budget for b in batches)
    assert_each_sentence_once(batches, len(data))


def test_batches_are_filled_greedily_within_a_sorted_bucket():
    src, tgt = np.full(100, 10), np.full(100, 10)
    batches = length_batches(src, tgt, 95, "tokens", seed=0, epoch=0)
    assert sorted(len(b) for b in batches) == [1] + [9] * 11  # 9 x 10 <= 95 < 10 x 10


def test_sorting_within_buckets_keeps_padding_small():
    src, tgt = lengths(5000, seed=1)
    batches = length_batches(src, tgt, 2000, "tokens", seed=0, epoch=0)
    real = sum(int(np.maximum(src[b], tgt[b]).sum()) for b in batches)
    padded = sum(padded_size(b, src, tgt) for b in batches)
    assert real / padded > 0.95
    unsorted = length_batches(src, tgt, 2000, "tokens", seed=0, epoch=0, bucket_sentences=1)
    assert len(unsorted) > 1.5 * len(batches)  # one-sentence buckets: no sorting, no packing


def test_batch_order_is_shuffled_not_by_length():
    src, tgt = lengths(3000, seed=5)
    batches = length_batches(src, tgt, 600, "tokens", seed=0, epoch=0)
    longest = [int(max(src[b].max(), tgt[b].max())) for b in batches]
    assert longest != sorted(longest)  # one bucket sorted by length, then its batches shuffled
    assert np.corrcoef(np.arange(len(longest)), longest)[0, 1] < 0.5


def test_batches_are_deterministic_per_seed_and_epoch_and_change_between_epochs():
    src, tgt = lengths(2000, seed=2)

    def epoch_batches(seed: int, epoch: int) -> list[list[int]]:
        batches = length_batches(src, tgt, 500, "tokens", seed=seed, epoch=epoch)
        return [b.tolist() for b in batches]

    assert epoch_batches(0, 3) == epoch_batches(0, 3)
    assert epoch_batches(0, 3) != epoch_batches(0, 4)
    assert epoch_batches(0, 3) != epoch_batches(1, 3)
    first = {tuple(sorted(b)) for b in epoch_batches(0, 3)}
    assert first != {tuple(sorted(b)) for b in epoch_batches(0, 4)}  # contents, not just order


def test_a_sentence_longer_than_the_budget_names_both_numbers():
    src, tgt = np.array([3, 4, 30]), np.array([3, 41, 2])
    with pytest.raises(ValueError, match=r"a sentence of 41 tokens .* batch of 40 tokens"):
        length_batches(src, tgt, 40, "tokens", seed=0, epoch=0)


def test_sentence_batches_hold_at_most_max_units_and_every_sentence_once():
    src, tgt = lengths(1001, seed=3)
    batches = length_batches(src, tgt, 64, "sentences", seed=0, epoch=0, bucket_sentences=300)
    assert max(len(b) for b in batches) == 64
    assert sum(len(b) < 64 for b in batches) <= 4  # one short batch per bucket at most
    assert_each_sentence_once(batches, 1001)


def test_bad_lengths_and_units_are_value_errors():
    with pytest.raises(ValueError, match="at least 1"):
        length_batches(np.array([0, 2]), np.array([1, 2]), 10, "tokens", seed=0, epoch=0)
    with pytest.raises(ValueError, match="must be 1-D, equal"):
        length_batches(np.array([1, 2]), np.array([1]), 10, "tokens", seed=0, epoch=0)
    with pytest.raises(ValueError, match="unit must be one of tokens, sentences"):
        length_batches(np.array([1]), np.array([1]), 10, "words", seed=0, epoch=0)  # type: ignore[arg-type]
    assert length_batches(np.array([]), np.array([]), 10, "tokens", seed=0, epoch=0) == []


def test_batch_units_count_real_target_tokens_or_sentences():
    src, tgt = np.array([5, 1, 7]), np.array([2, 3, 4])
    batches = [np.array([0, 2]), np.array([1])]
    assert batch_units(batches, src, tgt, "tokens") == [6, 3]
    assert batch_units(batches, src, tgt, "sentences") == [2, 1]


def test_updates_reach_the_global_batch_with_one_batch_per_rank_per_round():
    units = [10, 20, 5, 5, 30, 1, 8, 8, 40, 2, 2, 2, 7]
    updates = plan_updates(units, world_size=2, global_units=40)
    assert updates == [
        Update(rounds=((0, 1), (2, 3)), units=40),
        Update(rounds=((4, 5), (6, 7)), units=47),
        Update(rounds=((8, 9),), units=42),
    ]  # batches 10-11 (4 units, short of 40) and 12 (no partner) are dropped
    for update in updates:
        assert update.units >= 40
        assert update.units == sum(units[i] for r in update.rounds for i in r)
        assert all(len(r) == 2 for r in update.rounds)


def test_without_a_global_batch_every_complete_round_is_an_update():
    updates = plan_updates([3, 4, 5, 6, 7], world_size=2, global_units=None)
    assert [u.rounds for u in updates] == [((0, 1),), ((2, 3),)]
    assert [u.units for u in updates] == [7, 11]
    assert [u.num_rounds for u in updates] == [1, 1]


@pytest.mark.parametrize(
    "unit, per_rank, global_units", [("tokens", 600, 4000), ("sentences", 16, 96)]
)
def test_every_rank_computes_the_same_plan_on_its_own(unit, per_rank, global_units):
    src, tgt = lengths(3000, seed=4)
    world_size = 3

    def rank_plan(rank: int) -> tuple[list[Update], list[np.ndarray]]:
        # what each rank does by itself: no communication, only the shared seed and epoch;
        # its global random state differs, which the plan must not depend on
        np.random.seed(rank)
        random.seed(rank)
        batches = length_batches(src, tgt, per_rank, unit, seed=7, epoch=2)  # type: ignore[arg-type]
        units = batch_units(batches, src, tgt, unit)  # type: ignore[arg-type]
        return plan_updates(units, world_size, global_units), batches

    plans = [rank_plan(rank) for rank in range(world_size)]
    first_updates, first_batches = plans[0]
    for updates, batches in plans[1:]:
        assert updates == first_updates
        assert all((a == b).all() for a, b in zip(batches, first_batches, strict=True))
    assert first_updates and all(u.units >= global_units for u in first_updates)
    used = [i for u in first_updates for r in u.rounds for i in r]
    assert used == list(range(len(used)))  # each batch once, in order
    # only the tail is dropped: less than one update plus one incomplete round
    assert (
        len(first_batches) - len(used)
        < world_size + max(u.num_rounds for u in first_updates) * world_size
    )


def test_plan_arguments_are_checked():
    with pytest.raises(ValueError, match="world_size"):
        plan_updates([1, 2], world_size=0, global_units=None)
    with pytest.raises(ValueError, match="global_units"):
        plan_updates([1, 2], world_size=1, global_units=0)
    with pytest.raises(ValueError, match="negative"):
        plan_updates([1, -2], world_size=1, global_units=None)
