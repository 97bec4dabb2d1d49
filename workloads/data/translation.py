"""Parallel text tokenized once into a memory-mappable cache, and the loader of that cache.

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
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any

import numpy as np

from contract import files
from workloads.data import TRANSLATION_CACHE_FORMAT, DataError
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

FORMAT = TRANSLATION_CACHE_FORMAT
META_FILE = "meta.json"
SPLIT_COUNTS = ("sentences", "src_tokens", "tgt_tokens")  # what meta.json counts per split
MODEL_FILE = "subword.model"
TRAIN_SPLIT = "train"
VOCABULARY_STAGE = "vocabulary"  # on_progress's first report, before the vocabulary trains
PAIRS_PER_CHUNK = 10_000
DEFAULT_DATASET = "wmt17"  # named in errors: `runner data fetch <dataset>` rebuilds a cache
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


def read_meta(cache_dir: Path, dataset: str = DEFAULT_DATASET) -> dict[str, Any]:
    """meta.json of a complete cache; DataError saying how to rebuild it otherwise."""
    path = Path(cache_dir) / META_FILE
    fix = refetch_command(cache_dir, dataset)
    try:
        meta = files.loads(path.read_text())  # deep nesting: ValueError too
    except FileNotFoundError:
        fetch = refetch_command(cache_dir, dataset, force=False)
        raise DataError(f"{cache_dir}: no prepared translation data; {fetch}") from None
    except (OSError, ValueError) as err:  # a directory, unreadable, not UTF-8, not JSON
        raise DataError(f"{path}: corrupt ({err}); {fix}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise DataError(f"{path}: format {found!r}, not {FORMAT}; {fix}")
    problem = _meta_problem(meta)
    if problem is not None:
        raise DataError(f"{path}: {problem}; the cache is damaged, {fix}")
    return meta


def refetch_command(cache_dir: Path, dataset: str, force: bool = True) -> str:
    """The command that rebuilds the cache in `cache_dir` (<data root>/<dataset>/cache): with
    --force when there is a meta.json, which the fetch takes for a prepared data set."""
    root = Path(cache_dir).parent.parent
    return f"run `runner data fetch {dataset} --dir {root}{' --force' if force else ''}`"


def _meta_problem(meta: dict[str, Any]) -> str | None:
    """What of meta.json's fields the readers use is missing or of the wrong kind."""
    splits = meta.get("splits")
    if not isinstance(splits, dict) or not splits:
        return "expected its splits"
    for name, info in splits.items():
        counts = [info.get(k) for k in SPLIT_COUNTS] if isinstance(info, dict) else [None]
        if not all(type(n) is int and n >= 0 for n in counts):
            return f"split {name!r}: expected its counts ({', '.join(SPLIT_COUNTS)})"
    model = meta.get("subword_model")
    # A file name inside the cache: never a path that leads out of it.
    if not isinstance(model, str) or model in ("", ".", "..") or "/" in model or "\\" in model:
        return f"subword_model {model!r}: expected a file name in the cache"
    return None


def is_prepared(cache_dir: Path) -> bool:
    """True when cache_dir holds a complete cache of this format."""
    try:
        read_meta(cache_dir)
    except DataError:
        return False
    return True


@dataclass(frozen=True)
class ParallelSplit:
    """One split's sentence pairs as flat int32 token arrays (memory maps) and offsets.
    Every sentence ends with EOS, so every length is at least 1."""

    src: np.ndarray
    src_offsets: np.ndarray
    tgt: np.ndarray
    tgt_offsets: np.ndarray

    @property
    def num_sentences(self) -> int:
        return len(self.src_offsets) - 1

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(source ids, target ids) of sentence pair i, EOS included (read-only views)."""
        s, t = self.src_offsets, self.tgt_offsets
        return self.src[s[i] : s[i + 1]], self.tgt[t[i] : t[i + 1]]

    def padded(
        self, indices: np.ndarray | list[int], pad_id: int = PAD_ID
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(src [B, S], src_lengths [B], tgt [B, T], tgt_lengths [B]) of the pairs at
        indices, int64, padded on the right with pad_id to the longest of the batch."""
        rows = np.asarray(indices, dtype=np.int64)
        src, src_lengths = _gather_padded(self.src, self.src_offsets, rows, pad_id)
        tgt, tgt_lengths = _gather_padded(self.tgt, self.tgt_offsets, rows, pad_id)
        return src, src_lengths, tgt, tgt_lengths


def _gather_padded(
    tokens: np.ndarray, offsets: np.ndarray, rows: np.ndarray, pad_id: int
) -> tuple[np.ndarray, np.ndarray]:
    starts = offsets[rows]
    lengths = offsets[rows + 1] - starts
    columns = np.arange(int(lengths.max()) if len(rows) else 0)
    inside = columns[None, :] < lengths[:, None]
    positions = np.where(inside, starts[:, None] + columns[None, :], 0)
    return np.where(inside, tokens[positions], pad_id).astype(np.int64), lengths


def load_parallel(cache_dir: Path, split: str, dataset: str = DEFAULT_DATASET) -> ParallelSplit:
    """A split of a prepared cache, memory-mapped (pages shared by the ranks of a node)."""
    cache_dir = Path(cache_dir)
    info = _split_info(read_meta(cache_dir, dataset), cache_dir, split, dataset)
    arrays = {}
    for side in ("src", "tgt"):
        flat = _load_array(cache_dir / f"{split}.{side}.npy", np.int32, dataset)
        offsets = _load_array(cache_dir / f"{split}.{side}.offsets.npy", np.int64, dataset)
        bad = (
            len(offsets) != info["sentences"] + 1
            or offsets[0] != 0
            or offsets[-1] != len(flat)
            or len(flat) != info[f"{side}_tokens"]
            or np.any(np.diff(offsets) < 1)
        )
        if bad:
            raise DataError(
                f"{cache_dir}/{split}.{side}: does not match meta.json; the cache is damaged, "
                f"{refetch_command(cache_dir, dataset)}"
            )
        arrays[side], arrays[f"{side}_offsets"] = flat, offsets
    return ParallelSplit(**arrays)


def _split_info(meta: dict, cache_dir: Path, split: str, dataset: str) -> dict[str, Any]:
    if split not in meta["splits"]:
        raise DataError(
            f"{cache_dir}: no split {split!r} (has {', '.join(meta['splits'])}); "
            f"{refetch_command(cache_dir, dataset)}"
        )
    return meta["splits"][split]


def _load_array(path: Path, dtype: type, dataset: str) -> np.ndarray:
    fix = f"the cache is damaged, {refetch_command(path.parent, dataset)}"
    try:
        array = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise DataError(f"{path}: missing; {fix}") from None
    except (ValueError, OSError) as err:
        raise DataError(f"{path}: unreadable ({err}); {fix}") from None
    if array.dtype != dtype or array.ndim != 1:
        raise DataError(
            f"{path}: {array.dtype} {array.shape}, expected 1-D {dtype.__name__}; {fix}"
        )
    return array


def load_references(cache_dir: Path, split: str, dataset: str = DEFAULT_DATASET) -> list[str]:
    """The split's raw target lines: what sacreBLEU scores translations against."""
    return _raw_lines(Path(cache_dir), split, "ref", dataset)


def load_sources(cache_dir: Path, split: str, dataset: str = DEFAULT_DATASET) -> list[str]:
    """The split's raw source lines, in the order of load_parallel's pairs."""
    return _raw_lines(Path(cache_dir), split, "src", dataset)


def _raw_lines(cache_dir: Path, split: str, kind: str, dataset: str) -> list[str]:
    info = _split_info(read_meta(cache_dir, dataset), cache_dir, split, dataset)
    if split == TRAIN_SPLIT:
        raise DataError(f"raw text is kept for evaluation splits only, not {TRAIN_SPLIT!r}")
    path = cache_dir / f"{split}.{kind}.txt"
    lines = list(read_lines(path)) if path.exists() else None
    if lines is None or len(lines) != info["sentences"]:
        found = "missing" if lines is None else f"{len(lines)} lines"
        raise DataError(
            f"{path}: {found}, expected {info['sentences']} lines; the cache is damaged, "
            f"{refetch_command(cache_dir, dataset)}"
        )
    return lines


def tokenizer(cache_dir: Path, dataset: str = DEFAULT_DATASET) -> SubwordTokenizer:
    """The cache's shared subword vocabulary."""
    meta = read_meta(cache_dir, dataset)
    return SubwordTokenizer.load(Path(cache_dir) / meta["subword_model"])
