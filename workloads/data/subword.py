"""A shared source/target subword vocabulary (sentencepiece BPE), and plain-text line reading.

The translation tasks train one BPE model on both sides of the training corpus (English and
German share most of their alphabet, and the models tie source and target embeddings), with
fixed special ids so that models, loss and decoding can name them without the model file:

    PAD_ID = 0   padding, ignored by the loss
    UNK_ID = 1   characters outside the vocabulary (sentencepiece decodes it as " ⁇ ")
    BOS_ID = 2   the decoder's first input; never stored in the data
    EOS_ID = 3   appended to every source and target sentence

Training is reproducible: the same files, vocab_size, max_sentences and seed give a
byte-identical model file on any machine. Two sentencepiece behaviours are avoided for that:
its own sentence sampling (input_sentence_size) draws differently in every process whatever
random seed is set, so the lines are sampled here with numpy; and the model file records the
trainer's thread count, so that is a constant rather than the machine's core count.

Encoding normalises text (NFKC, runs of whitespace collapsed, sentencepiece's "nmt_nfkc"
rule), so decode(encode(s)) == s holds for normalised text, which WMT text almost always
is; references for BLEU are therefore always the raw text lines (workloads/data/
translation.py keeps them), never decoded ids. This module is not the data cache or the
loader: that is workloads/data/translation.py. sentencepiece is imported lazily, so
importing this module costs nothing.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workloads.data import DataError

if TYPE_CHECKING:
    import sentencepiece

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
# Stored in the model file, hence fixed: a core-count-dependent value would make the same
# vocabulary a different file on every machine. BPE training barely uses threads anyway.
TRAINER_THREADS = 8
READ_BLOCK_BYTES = 1 << 20


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file without their line ending ("\\n" or "\\r\\n").

    Lines are split at "\\n" only (as `wc -l` and the WMT tools count them), never at the
    other characters str.splitlines() treats as line breaks, so parallel files stay aligned.
    """
    try:
        with open(path, "rb") as f:
            for line_number, raw in enumerate(f, start=1):
                line = raw[:-1] if raw.endswith(b"\n") else raw
                if line.endswith(b"\r"):
                    line = line[:-1]
                try:
                    yield line.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise DataError(f"{path}:{line_number}: not UTF-8 text ({err})") from None
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as err:  # a directory in its place, no permission, a failing disk
        raise DataError(f"{path}: cannot be read ({err.strerror or err})") from None


def count_lines(path: Path) -> tuple[int, str]:
    """(number of lines, sha256 hex digest) of a file, in one pass; a last line without a
    trailing newline counts, as read_lines() yields it."""
    digest, lines, last = hashlib.sha256(), 0, b"\n"
    try:
        with open(path, "rb") as f:
            while block := f.read(READ_BLOCK_BYTES):
                digest.update(block)
                lines += block.count(b"\n")
                last = block[-1:]
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as err:  # a directory in its place, no permission, a failing disk
        raise DataError(f"{path}: cannot be read ({err.strerror or err})") from None
    return lines + (last != b"\n"), digest.hexdigest()


def sample_line_numbers(total_lines: int, max_sentences: int, seed: int) -> np.ndarray | None:
    """Sorted indices of the lines (numbered across all files) to train on, drawn without
    replacement; None when every line is used."""
    if total_lines <= max_sentences:
        return None
    chosen = np.random.default_rng(seed).choice(total_lines, size=max_sentences, replace=False)
    return np.sort(chosen)


def _sampled_lines(text_files: Sequence[Path], chosen: np.ndarray | None) -> Iterator[str]:
    number, next_pick = 0, 0
    for path in text_files:
        for line in read_lines(path):
            if chosen is None:
                yield line
            elif next_pick < len(chosen) and chosen[next_pick] == number:
                next_pick += 1
                yield line
            number += 1


def train_subword_model(
    text_files: list[Path],
    model_path: Path,
    vocab_size: int,
    *,
    max_sentences: int = 2_000_000,
    seed: int = 0,
) -> Path:
    """Train a BPE model on the lines of text_files (all of them, or max_sentences drawn at
    random with `seed`) and write it to model_path atomically; returns model_path.

    vocab_size is an upper bound (hard_vocab_limit=False): a small corpus yields fewer
    pieces, which SubwordTokenizer.vocab_size then reports.
    """
    if vocab_size <= len(SPECIAL_PIECES):
        raise ValueError(f"vocab_size must exceed the {len(SPECIAL_PIECES)} special pieces")
    if max_sentences < 1:
        raise ValueError(f"max_sentences must be at least 1, got {max_sentences}")
    total = sum(count_lines(path)[0] for path in text_files)
    chosen = sample_line_numbers(total, max_sentences, seed)
    model = _train_bpe(_sampled_lines(text_files, chosen), vocab_size, text_files)
    _check_usable(model, text_files)
    _write_atomic(model_path, model)
    return model_path


def _train_bpe(sentences: Iterator[str], vocab_size: int, text_files: Sequence[Path]) -> bytes:
    import sentencepiece as spm

    writer, failures = io.BytesIO(), []

    def reading() -> Iterator[str]:  # sentencepiece turns errors raised here into strings
        try:
            yield from sentences
        except DataError as err:
            failures.append(err)
            raise

    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=reading(),
            model_writer=writer,
            model_type="bpe",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            input_sentence_size=0,  # sampled above, reproducibly
            num_threads=TRAINER_THREADS,
            minloglevel=2,  # errors only; the INFO log is thousands of lines
        )
    except RuntimeError as err:
        if failures:
            raise failures[0] from None
        files = ", ".join(str(path) for path in text_files)
        if "sentences_.empty()" in str(err):
            raise DataError(f"no text to learn a vocabulary from in {files}") from None
        raise DataError(
            f"could not train a {vocab_size}-piece BPE vocabulary on {files}: {err}; "
            "raise vocab_size (it must exceed the distinct characters plus 4 special pieces)"
        ) from None
    return writer.getvalue()


def _check_usable(model: bytes, text_files: Sequence[Path]) -> None:
    processor = _processor(model_proto=model)
    files = ", ".join(str(path) for path in text_files)
    if processor.get_piece_size() <= len(SPECIAL_PIECES):
        raise DataError(f"the vocabulary learned from {files} holds no text pieces")
    _check_specials(processor, f"the vocabulary learned from {files}")


def _check_specials(processor: sentencepiece.SentencePieceProcessor, where: str) -> None:
    for piece_id, piece in SPECIAL_PIECES.items():
        if processor.id_to_piece(piece_id) != piece:
            raise DataError(
                f"{where}: id {piece_id} is {processor.id_to_piece(piece_id)!r}, not {piece!r}"
            )


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _processor(**kwargs: Any) -> sentencepiece.SentencePieceProcessor:
    import sentencepiece as spm

    return spm.SentencePieceProcessor(**kwargs)


class SubwordTokenizer:
    """A trained model: text to ids and back. Immutable; build it with load()."""

    __slots__ = ("_processor", "path")
    _processor: sentencepiece.SentencePieceProcessor
    path: Path

    def __init__(self, processor: sentencepiece.SentencePieceProcessor, path: Path) -> None:
        object.__setattr__(self, "_processor", processor)
        object.__setattr__(self, "path", path)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"SubwordTokenizer is immutable (cannot set {name})")

    @classmethod
    def load(cls, path: Path) -> SubwordTokenizer:
        path = Path(path)
        try:
            processor = _processor(model_file=str(path))
        except (OSError, RuntimeError) as err:
            raise DataError(f"{path}: not a readable sentencepiece model ({err})") from None
        _check_specials(processor, str(path))
        return cls(processor, path)

    @property
    def vocab_size(self) -> int:
        return int(self._processor.get_piece_size())

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def unk_id(self) -> int:
        return UNK_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    def encode(self, text: str) -> list[int]:
        """Subword ids of one sentence, without BOS or EOS."""
        return list(self._processor.encode(text, out_type=int))

    def encode_batch(self, texts: Sequence[str], num_threads: int = -1) -> list[list[int]]:
        """encode() of many sentences at once, on num_threads threads (-1: all cores)."""
        return self._processor.encode(list(texts), out_type=int, num_threads=num_threads)

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenized text of ids up to the first EOS, PAD and BOS dropped (a decoder's
        output can be passed as it is, numpy or torch)."""
        kept = []
        for value in ids:
            piece_id = int(value)
            if piece_id == EOS_ID:
                break
            if piece_id not in (PAD_ID, BOS_ID):
                kept.append(piece_id)
        return self._processor.decode(kept)
