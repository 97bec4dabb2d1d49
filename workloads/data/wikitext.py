"""WikiText-2 (Merity et al. 2016) as word ids, read the way the AWD-LSTM reference reads it.

The published `wikitext-2-v1.zip` unpacks to `wikitext-2/wiki.{train,valid,test}.tokens`
(`runner data fetch wikitext2` puts that directory under the data root). The text is already
tokenized and words outside the training vocabulary are already `<unk>`, so reading it is:
each line split on whitespace plus an `<eos>` token (an empty line is a lone `<eos>`), as
salesforce/awd-lstm-lm's data.py does. Perplexities are only comparable with the reference's
when the token stream is the same, hence the same rule, including the empty lines.

The vocabulary is the training split's words in order of first appearance. The reference
adds valid/test words to its dictionary too, but in WikiText-2 they add none, so the ids
are the same; a valid/test word outside the training vocabulary is an error (naming file,
line and word) rather than a silently grown vocabulary, because it means the files are not
WikiText-2's. numpy only, no torch: a training process turns the arrays into tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workloads.data import WIKITEXT2_FILES, WIKITEXT2_SUBDIR, DataError

EOS = "<eos>"
TRAIN_FILE, VALID_FILE, TEST_FILE = WIKITEXT2_FILES


@dataclass(frozen=True)
class Corpus:
    """Token ids (int64) per split and the vocabulary they index."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    vocab: tuple[str, ...]

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)


def load_wikitext(directory: Path) -> Corpus:
    """The corpus in `directory` (the archive's `wikitext-2/`, under the data root)."""
    train = read_tokens(directory / TRAIN_FILE)
    vocab = build_vocab(train)
    index = {word: i for i, word in enumerate(vocab)}
    return Corpus(
        train=encode(train, index, directory / TRAIN_FILE),
        valid=encode(read_tokens(directory / VALID_FILE), index, directory / VALID_FILE),
        test=encode(read_tokens(directory / TEST_FILE), index, directory / TEST_FILE),
        vocab=vocab,
    )


def read_tokens(path: Path) -> list[str]:
    """Every line's whitespace-separated words followed by `<eos>`. A byte-order mark that
    an editor put before the first line is not part of the first word."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            tokens = [word for line in f for word in (*line.split(), EOS)]
    except FileNotFoundError:
        raise DataError(f"{path} not found; run {_fetch_command(path.parent)}") from None
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path}: not UTF-8 text ({err}); run {_fetch_command(path.parent, force=True)}"
        ) from None
    except OSError as err:  # a directory, no permission, an I/O error
        raise DataError(
            f"{path}: unreadable ({err}); run {_fetch_command(path.parent, force=True)}"
        ) from None
    if not tokens:
        raise DataError(
            f"{path}: empty (expected WikiText-2's tokenized text); "
            f"run {_fetch_command(path.parent, force=True)}"
        )
    return tokens


def build_vocab(tokens: list[str]) -> tuple[str, ...]:
    """The distinct tokens in order of first appearance."""
    return tuple(dict.fromkeys(tokens))


def encode(tokens: list[str], index: dict[str, int], path: Path) -> np.ndarray:
    """`tokens` as int64 ids; a token outside `index` is a DataError naming file:line."""
    try:
        return np.fromiter((index[t] for t in tokens), dtype=np.int64, count=len(tokens))
    except KeyError as err:
        word = err.args[0]
        line = first_line_with(path, word)
        raise DataError(
            f"{path}:{line}: word {word!r} is not in the vocabulary of {TRAIN_FILE}; "
            "WikiText-2 maps every such word to <unk>, so these are not its files; "
            f"run {_fetch_command(path.parent, force=True)}"
        ) from None


def first_line_with(path: Path, word: str) -> int:
    """The 1-based number of the first line of `path` holding `word` (0 if none does). Lines
    are counted in the file, not by `<eos>` tokens: the text may hold the word `<eos>` too."""
    with open(path, encoding="utf-8-sig") as f:
        return next((n for n, line in enumerate(f, start=1) if word in line.split()), 0)


def _fetch_command(directory: Path, force: bool = False) -> str:
    """The command that puts WikiText-2 in `directory` (it unpacks to DIR/wikitext-2)."""
    where = directory.parent if directory.name == WIKITEXT2_SUBDIR else "DIR"
    return f"`runner data fetch wikitext2 --dir {where}{' --force' if force else ''}`"
