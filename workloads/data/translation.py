"""Parallel text tokenized once into a memory-mappable cache (its reader, re-exported here
for the callers that import it from this module, is translation_reader.py).

`runner data fetch wmt16|wmt17` downloads line-aligned source/target text and calls
prepare_parallel() (outside the benchmark clock, as MLPerf does); training memory-maps:

    <cache>/subword.model            the shared BPE vocabulary (workloads/data/subword.py),
                                     learned from the train split's two sides
    <cache>/<split>.src.npy          int32: every sentence's ids and an EOS, concatenated
    <cache>/<split>.src.offsets.npy  int64 [sentences + 1]: sentence i is src[o[i]:o[i + 1]]
    <cache>/<split>.tgt.npy          the same for the target side (no BOS: the decoder input
    <cache>/<split>.tgt.offsets.npy  is BOS + tgt[:-1], made by the training loop)
    <cache>/<split>.src.txt          raw source lines (not for train): what is translated
    <cache>/<split>.ref.txt          raw target lines (not for train): the BLEU references.
                                     sacreBLEU must score against the original text; decoded
                                     ids differ from it (normalisation, unknown characters)
    <cache>/meta.json                written last: format, vocabulary, counts, inputs' sha256

Training pairs with an empty side, or a side longer than max_tokens_per_sentence (EOS
included), are dropped and counted; pairs of the other splits never are, so evaluation
scores every test sentence. The cache is built in a temporary directory beside cache_dir
and renamed into place, so an interrupted run leaves nothing that looks complete. numpy
only, no torch: the runner's fetch command calls this.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from itertools import chain, islice
from pathlib import Path
from typing import Any

import numpy as np

from workloads.data import DataError
from workloads.data.subword import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SubwordTokenizer,
    count_lines,
    read_lines,
    train_subword_model,
)
from workloads.data.translation_reader import (
    DEFAULT_DATASET,
    FORMAT,
    META_FILE,
    MODEL_FILE,
    SPLIT_COUNTS,
    TRAIN_SPLIT,
    ParallelSplit,
    is_prepared,
    load_parallel,
    load_references,
    load_sources,
    read_meta,
    refetch_command,
    tokenizer,
)

__all__ = [  # the reader's names too: callers import the cache's API from this module
    "DEFAULT_DATASET", "FORMAT", "META_FILE", "MODEL_FILE", "SPLIT_COUNTS", "TRAIN_SPLIT",
    "ParallelSplit", "is_prepared", "load_parallel", "load_references", "load_sources",
    "prepare_parallel", "read_meta", "refetch_command", "tokenizer",
]  # fmt: skip

VOCABULARY_STAGE = "vocabulary"  # on_progress's first report, before the vocabulary trains
PAIRS_PER_CHUNK = 10_000
Progress = Callable[[str, int], None]  # (split or VOCABULARY_STAGE, sentence pairs read)
DropRule = Callable[[list[int], list[int]], str | None]  # reason to drop a pair, or None


def prepare_parallel(
    splits: Mapping[str, tuple[Path, Path]],
    cache_dir: Path,
    *,
    vocab_size: int,
    max_tokens_per_sentence: int | None = None,
    max_sentences_for_vocab: int = 2_000_000,
    seed: int = 0,
    on_progress: Progress | None = None,
) -> Path:
    """Tokenize each split's (source, target) text files into cache_dir (replacing any
    previous cache atomically); returns cache_dir. splits must include "train"."""
    if TRAIN_SPLIT not in splits:
        raise ValueError(f"splits must include {TRAIN_SPLIT!r} (got {', '.join(splits)})")
    if max_tokens_per_sentence is not None and max_tokens_per_sentence < 2:
        raise ValueError("max_tokens_per_sentence counts the EOS, so it must be at least 2")
    inputs = {split: _aligned_inputs(src, tgt) for split, (src, tgt) in splits.items()}
    report = on_progress or (lambda stage, pairs: None)
    cache_dir = Path(cache_dir)
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}-", dir=cache_dir.parent))
    try:
        report(VOCABULARY_STAGE, 0)
        train_subword_model(
            [Path(path) for path in splits[TRAIN_SPLIT]],
            tmp / MODEL_FILE,
            vocab_size,
            max_sentences=max_sentences_for_vocab,
            seed=seed,
        )
        tokens = SubwordTokenizer.load(tmp / MODEL_FILE)
        counts = _write_splits(splits, tokens, tmp, max_tokens_per_sentence, report)
        meta = {
            "format": FORMAT,
            "vocab_size": tokens.vocab_size,
            "vocab_size_requested": vocab_size,
            "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
            "subword_model": MODEL_FILE,
            "vocab_training": {"max_sentences": max_sentences_for_vocab, "seed": seed},
            "max_tokens_per_sentence": max_tokens_per_sentence,
            "splits": {split: {**counts[split], **inputs[split]} for split in splits},
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users of a volume
        _swap_into_place(tmp, cache_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cache_dir


def _write_splits(
    splits: Mapping[str, tuple[Path, Path]],
    tokens: SubwordTokenizer,
    out_dir: Path,
    max_tokens_per_sentence: int | None,
    report: Progress,
) -> dict[str, dict[str, Any]]:
    """Every split's token arrays; raw text too for the evaluation (non-train) splits."""
    counts = {}
    for split, (src, tgt) in splits.items():
        rule = _training_drop_rule(max_tokens_per_sentence) if split == TRAIN_SPLIT else None
        counts[split] = _write_split(split, Path(src), Path(tgt), tokens, out_dir, rule, report)
        if split != TRAIN_SPLIT:
            _copy_lines(Path(src), out_dir / f"{split}.src.txt")
            _copy_lines(Path(tgt), out_dir / f"{split}.ref.txt")
    return counts


def _aligned_inputs(src: Path, tgt: Path) -> dict[str, Any]:
    """Line counts and sha256 of a split's two files, checked equal before any work."""
    (src_lines, src_sha), (tgt_lines, tgt_sha) = count_lines(Path(src)), count_lines(Path(tgt))
    if src_lines != tgt_lines:
        raise DataError(
            f"{src} has {src_lines} lines but {tgt} has {tgt_lines}; parallel files must be "
            "line-aligned (one sentence a line, the same number of lines)"
        )
    return {
        "source": {"file": Path(src).name, "lines": src_lines, "sha256": src_sha},
        "target": {"file": Path(tgt).name, "lines": tgt_lines, "sha256": tgt_sha},
    }


def _training_drop_rule(max_tokens: int | None) -> DropRule:
    def reason(src: list[int], tgt: list[int]) -> str | None:
        if not src or not tgt:
            return "empty"
        if max_tokens is not None and max(len(src), len(tgt)) + 1 > max_tokens:  # + EOS
            return "too_long"
        return None

    return reason


def _write_split(
    split: str,
    src: Path,
    tgt: Path,
    tokens: SubwordTokenizer,
    out_dir: Path,
    drop: DropRule | None,
    report: Progress,
) -> dict[str, Any]:
    dropped: Counter[str] = Counter()
    pairs = zip(read_lines(src), read_lines(tgt), strict=True)
    done = 0
    with (
        closing(_TokenWriter(out_dir, f"{split}.src")) as src_out,
        closing(_TokenWriter(out_dir, f"{split}.tgt")) as tgt_out,
    ):
        for chunk in _chunks(pairs, PAIRS_PER_CHUNK):
            src_ids = tokens.encode_batch([s for s, _ in chunk])
            tgt_ids = tokens.encode_batch([t for _, t in chunk])
            kept = []
            for pair in zip(src_ids, tgt_ids, strict=True):
                reason = drop(*pair) if drop is not None else None
                if reason is None:
                    kept.append(pair)
                else:
                    dropped[reason] += 1
            src_out.append([s for s, _ in kept])
            tgt_out.append([t for _, t in kept])
            done += len(chunk)
            report(split, done)
        num_sentences, src_tokens = src_out.finish()
        _, tgt_tokens = tgt_out.finish()
    return {
        "sentences": num_sentences,
        "src_tokens": src_tokens,
        "tgt_tokens": tgt_tokens,
        "dropped": {"empty": dropped["empty"], "too_long": dropped["too_long"]},
    }


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


class _TokenWriter:
    """Appends sentences (their ids, then EOS) to a raw int32 file; finish() turns it into
    `<stem>.npy` and `<stem>.offsets.npy` without holding the tokens in memory."""

    def __init__(self, out_dir: Path, stem: str) -> None:
        self._out_dir, self._stem = out_dir, stem
        self._raw = out_dir / f"{stem}.raw"
        self._file = open(self._raw, "wb")  # noqa: SIM115 - closed by close()/finish()
        self._lengths: list[np.ndarray] = []

    def append(self, sentences: list[list[int]]) -> None:
        lengths = np.fromiter((len(s) + 1 for s in sentences), np.int64, len(sentences))
        flat = chain.from_iterable([*s, EOS_ID] for s in sentences)
        self._file.write(np.fromiter(flat, "<i4", int(lengths.sum())).tobytes())
        self._lengths.append(lengths)

    def finish(self) -> tuple[int, int]:
        """(sentences, tokens) written."""
        self._file.close()
        lengths = np.concatenate([np.empty(0, np.int64), *self._lengths])
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.memmap(self._raw, "<i4", mode="r") if offsets[-1] else np.empty(0, "<i4")
        np.save(self._out_dir / f"{self._stem}.npy", flat)
        np.save(self._out_dir / f"{self._stem}.offsets.npy", offsets)
        del flat  # unmaps the raw file before it is removed
        self._raw.unlink()
        return len(lengths), int(offsets[-1])

    def close(self) -> None:
        self._file.close()


def _copy_lines(source: Path, dest: Path) -> None:
    with open(dest, "w", encoding="utf-8", newline="\n") as out:
        for line in read_lines(source):
            out.write(line + "\n")


def _swap_into_place(built: Path, cache_dir: Path) -> None:
    """Rename built to cache_dir; a previous cache is moved aside first and then removed,
    so cache_dir is at every moment either the old complete cache, absent, or the new one."""
    if not cache_dir.exists():
        os.replace(built, cache_dir)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}-old-", dir=cache_dir.parent))
    try:
        os.replace(cache_dir, aside / "previous")
        os.replace(built, cache_dir)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
