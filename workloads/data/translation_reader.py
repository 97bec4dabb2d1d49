"""Reading the tokenized translation cache that translation.py prepares: its meta.json,
checked, the token arrays memory-mapped, the raw lines that evaluation translates and scores
against, and the vocabulary. The layout (translation.py says how it is built):

    <cache>/subword.model            the shared BPE vocabulary (workloads/data/subword.py)
    <cache>/<split>.src.npy          int32: every sentence's ids and an EOS, concatenated
    <cache>/<split>.src.offsets.npy  int64 [sentences + 1]: sentence i is src[o[i]:o[i + 1]]
    <cache>/<split>.tgt.npy          the same for the target side (no BOS: the decoder input
    <cache>/<split>.tgt.offsets.npy  is BOS + tgt[:-1], made by the training loop)
    <cache>/<split>.src.txt          raw source lines (not for train): what is translated
    <cache>/<split>.ref.txt          raw target lines (not for train): the BLEU references
    <cache>/meta.json                written last: format, vocabulary, counts, inputs' sha256

A cache is damaged or hostile until checked: every reader refuses what does not match
meta.json with a DataError naming the command that rebuilds it. numpy only, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contract import files
from workloads.data import TRANSLATION_CACHE_FORMAT, DataError
from workloads.data.subword import PAD_ID, SubwordTokenizer, read_lines

FORMAT = TRANSLATION_CACHE_FORMAT
META_FILE = "meta.json"
SPLIT_COUNTS = ("sentences", "src_tokens", "tgt_tokens")  # what meta.json counts per split
MODEL_FILE = "subword.model"
TRAIN_SPLIT = "train"  # the split whose raw text is not kept
DEFAULT_DATASET = "wmt17"  # named in errors: `runner data fetch <dataset>` rebuilds a cache


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
        array = np.load(path, mmap_mode="r", allow_pickle=False)  # data, never objects
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
