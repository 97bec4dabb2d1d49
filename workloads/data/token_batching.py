"""Batches of sentence pairs by token (or sentence) count, and optimizer updates that
accumulate them up to a global batch.

Translation batches are sized in tokens, not sentences, because the compute (and memory) of
a batch is its padded size: sentences x the longest sentence in it. So, as fairseq and the
MLPerf references do, an epoch is: shuffle, sort by length within large buckets (similar
lengths together, little padding, yet a different composition every epoch), cut each bucket
into batches whose padded size stays within the per-device budget, then shuffle the batches.

plan_updates() then deals the batches out: a round gives every rank one batch, and an
optimizer update accumulates rounds until the real target tokens (or sentences) summed over
the update reach the global batch (2^17 tokens for transformer-wmt17, 2048 sentences for
gnmt-wmt16). The loss of an update is normalised by Update.units, the same number on every
rank, so the accumulated all-reduced gradient is the mean over the whole global batch.

Everything here is a pure function of its inputs (lengths, budget, seed, epoch): every rank
computes the same batches and the same plan on its own, so no communication is needed to
agree on them. numpy only; this module does not touch token ids or devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Unit = Literal["tokens", "sentences"]
UNITS = ("tokens", "sentences")
# Sentences sorted together: large enough that a bucket's batches are of nearly uniform
# length (WMT's ~4.5M pairs make ~45 buckets), small enough that batches differ by epoch.
DEFAULT_BUCKET_SENTENCES = 100_000


def length_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    max_units: int,
    unit: Unit,
    *,
    seed: int,
    epoch: int,
    bucket_sentences: int = DEFAULT_BUCKET_SENTENCES,
) -> list[np.ndarray]:
    """One epoch's batches (int64 sentence indices), each sentence in exactly one.

    unit "tokens": a batch's padded size, len(batch) x the longest source or target
    sentence in it, is at most max_units. unit "sentences": at most max_units sentences.
    Lengths include the EOS (ParallelSplit.src_lengths / tgt_lengths).
    """
    src, tgt = _checked_lengths(src_lengths, tgt_lengths)
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    if max_units < 1 or bucket_sentences < 1:
        raise ValueError(f"max_units ({max_units}) and bucket_sentences must be at least 1")
    longest = np.maximum(src, tgt)
    if unit == "tokens" and len(longest) and longest.max() > max_units:
        raise ValueError(
            f"a sentence of {int(longest.max())} tokens does not fit a batch of {max_units} "
            "tokens; raise the batch size in tokens or filter long sentences "
            "(max_tokens_per_sentence when the data is prepared)"
        )
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(longest))
    batches: list[np.ndarray] = []
    for start in range(0, len(order), bucket_sentences):
        bucket = order[start : start + bucket_sentences]
        # lexsort is stable, so equal lengths keep the shuffled order: batches vary by epoch
        bucket = bucket[np.lexsort((src[bucket], tgt[bucket], longest[bucket]))]
        sizes: list[int] | np.ndarray
        if unit == "tokens":
            sizes = _token_batch_sizes(longest[bucket], max_units)
        else:
            sizes = np.full(-(-len(bucket) // max_units), max_units)
        batches.extend(np.split(bucket, np.cumsum(sizes)[:-1]))
    return [batches[i] for i in rng.permutation(len(batches))]


def _checked_lengths(src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    src = np.asarray(src_lengths, dtype=np.int64)
    tgt = np.asarray(tgt_lengths, dtype=np.int64)
    if src.ndim != 1 or src.shape != tgt.shape:
        raise ValueError(f"src_lengths {src.shape} and tgt_lengths {tgt.shape} must be 1-D, equal")
    if len(src) and min(src.min(), tgt.min()) < 1:
        raise ValueError("sentence lengths include the EOS, so every one is at least 1")
    return src, tgt


def _token_batch_sizes(ascending: np.ndarray, max_units: int) -> list[int]:
    """Greedy batch sizes over lengths sorted ascending: each batch takes as many sentences
    as fit, its padded size being count x its last (longest) length."""
    sizes, start = [], 0
    while start < len(ascending):
        # every later length is >= ascending[start], so no more than this many can fit
        window = ascending[start : start + max_units // int(ascending[start])]
        padded = np.arange(1, len(window) + 1) * window  # non-decreasing
        count = int(np.searchsorted(padded, max_units, side="right"))
        sizes.append(count)
        start += count
    return sizes


def batch_units(
    batches: Sequence[np.ndarray],
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    unit: Unit,
) -> list[int]:
    """What each batch contributes to the loss normaliser: its real (non-padding) target
    tokens, EOS included, or its number of sentences."""
    _, tgt = _checked_lengths(src_lengths, tgt_lengths)
    if unit == "tokens":
        return [int(tgt[batch].sum()) for batch in batches]
    if unit == "sentences":
        return [len(batch) for batch in batches]
    raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")


@dataclass(frozen=True)
class Update:
    """One optimizer update: rounds[r][rank] is the batch index rank runs in round r (every
    round has world_size entries); units is the real units of all of them together."""

    rounds: tuple[tuple[int, ...], ...]
    units: int

    @property
    def num_rounds(self) -> int:
        return len(self.rounds)


def plan_updates(
    batch_units: Sequence[int], world_size: int, global_units: int | None
) -> list[Update]:
    """Deal batches 0, 1, 2, ... out in rounds of world_size (one batch per rank) and group
    consecutive rounds into updates until an update's units reach global_units (None: one
    round per update).

    drop_last semantics: a trailing round with fewer batches than ranks, and a trailing
    update short of global_units, are not trained on this epoch (the batch order changes
    every epoch, so other sentences are left out next time). Every rank computes the same
    plan from the same inputs, so no communication is needed to agree on it.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if global_units is not None and global_units < 1:
        raise ValueError(f"global_units must be at least 1 (or None), got {global_units}")
    units = [int(u) for u in batch_units]
    if any(u < 0 for u in units):
        raise ValueError("batch units cannot be negative")
    updates, rounds, total = [], [], 0
    for first in range(0, len(units) - world_size + 1, world_size):
        rounds.append(tuple(range(first, first + world_size)))
        total += sum(units[first : first + world_size])
        if global_units is None or total >= global_units:
            updates.append(Update(tuple(rounds), total))
            rounds, total = [], 0
    return updates
