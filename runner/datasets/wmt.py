"""WMT English-German for `runner data fetch wmt16|wmt17`: the MLPerf references' corpora, taken
from the verified archives into line-aligned text, then tokenized once.

- wmt16 (GNMT, MLPerf rnn_translator/download_dataset.sh): Europarl v7, Common Crawl and News
  Commentary v11, concatenated in that order. The reference downloads Europarl v7 as
  statmt.org/europarl/v7/de-en.tgz, for which no checksum is published; the same corpus comes
  here from WMT13's training-parallel-europarl-v7.tgz, whose SHA-256 is pinned (and which
  wmt17 needs anyway, so fetching both downloads it once).
- wmt17 (Transformer, MLPerf v0.6 translation/data_download.py, itself tensor2tensor's
  translate_ende `_ENDE_TRAIN_DATASETS` of the time): News Commentary v12, Common Crawl,
  Europarl v7. Neither lists rapid-2016 (t2t added it later, for WMT18, as a separate list).
- Test set of both: newstest2014 en-de, the full 3,003 sentences, as sacreBLEU's `wmt14/full`
  reads it (the BLEU targets are sacreBLEU scores): the `<seg>` lines of
  newstest2014-deen-src.en.sgm and -ref.de.sgm, XML entities unescaped, whitespace collapsed.

Layout under the data root: `<name>/raw/{train,test}.{en,de}` (one sentence a line, line i of
the .en file translating line i of the .de file; lines end in "\n" only, so read them with
newline="\n": a stray "\r" in a sentence must not split it), then `<name>/cache/`, which
workloads/data/translation.py builds (a 32,768-piece subword vocabulary, sentences over the
reference's length limit dropped) and the training processes read. Each archive is read once,
streaming; a corpus whose English and German sides differ in line count is refused, because
concatenating it would shift every later pair. raw/ appears atomically (built in a temporary
directory, then renamed), so an interrupted fetch resumes at tokenization; delete it once the
cache exists to reclaim the space.
"""

from __future__ import annotations

import importlib
import io
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any
from xml.sax.saxutils import unescape

from runner.datasets.catalog import DataSource
from runner.errors import RunnerError
from workloads.data import WMT_SUBDIRS, DataError, translation_cache_dir

CHUNK_BYTES = 1 << 20
# (what, done, total or None, unit), as runner.datasets.fetch.Progress.
Progress = Callable[[str, int, int | None, str], None]
# t2t's translate_ende_wmt32k (the MLPerf Transformer's data) asks for 2**15 subwords; GNMT's
# reference learns 32,000 BPE merges. One 32k vocabulary size for both.
VOCAB_SIZE = 32_768
_SEG = re.compile(r"\s*<seg[^>]*>(.*)</seg>")
_ENTITIES = {"&quot;": '"', "&apos;": "'"}  # unescape() itself does &amp; &lt; &gt;
_CORRUPT = "the archive is corrupt: delete it and fetch again"


@dataclass(frozen=True)
class ParallelCorpus:
    """The English and German sides of a corpus: members of one published archive."""

    name: str
    archive: str  # the archive's file name in <root>/downloads
    en: str
    de: str


@dataclass(frozen=True)
class Recipe:
    train: tuple[ParallelCorpus, ...]  # concatenated in this order
    test: ParallelCorpus  # SGML (WMT's "fake SGML": one <seg> a line)
    vocab_size: int
    max_tokens_per_sentence: int


# Member names as tensor2tensor's translate_ende and tensorflow/datasets' wmt.py give them.
EUROPARL_V7 = ParallelCorpus(
    "europarl-v7",
    "training-parallel-europarl-v7.tgz",
    en="training/europarl-v7.de-en.en",
    de="training/europarl-v7.de-en.de",
)
COMMONCRAWL = ParallelCorpus(
    "commoncrawl",
    "training-parallel-commoncrawl.tgz",
    en="commoncrawl.de-en.en",
    de="commoncrawl.de-en.de",
)
NEWS_COMMENTARY_V11 = ParallelCorpus(
    "news-commentary-v11",
    "training-parallel-nc-v11.tgz",
    en="training-parallel-nc-v11/news-commentary-v11.de-en.en",
    de="training-parallel-nc-v11/news-commentary-v11.de-en.de",
)
NEWS_COMMENTARY_V12 = ParallelCorpus(
    "news-commentary-v12",
    "training-parallel-nc-v12.tgz",
    en="training/news-commentary-v12.de-en.en",
    de="training/news-commentary-v12.de-en.de",
)
# sacreBLEU's wmt14/full en-de pair (the deen files hold both directions' text).
NEWSTEST2014 = ParallelCorpus(
    "newstest2014",
    "test-full.tgz",
    en="test-full/newstest2014-deen-src.en.sgm",
    de="test-full/newstest2014-deen-ref.de.sgm",
)

RECIPES: dict[str, Recipe] = {
    # max_tokens_per_sentence: GNMT's --max-length-train default (MLPerf rnn_translator
    # train.py, counting BOS/EOS); the Transformer's max_length (MLPerf translation
    # model_params.py TransformerBaseParams, inherited by TransformerBigParams).
    "wmt16": Recipe((EUROPARL_V7, COMMONCRAWL, NEWS_COMMENTARY_V11), NEWSTEST2014, VOCAB_SIZE, 50),
    "wmt17": Recipe((NEWS_COMMENTARY_V12, COMMONCRAWL, EUROPARL_V7), NEWSTEST2014, VOCAB_SIZE, 256),
}


@dataclass(frozen=True)
class WmtCorpus:
    """The preparer of wmt16 and wmt17 (runner/datasets/catalog.py): raw/ from the archives,
    then the tokenized cache."""

    def path(self, name: str, root: Path) -> Path:
        return translation_cache_dir(root, name)

    def ready(self, name: str, root: Path) -> bool:
        return is_prepared(name, root)

    def prepare(
        self, src: DataSource, paths: list[Path], root: Path, force: bool, progress: Progress | None
    ) -> Path:
        return prepare(name=src.name, archives={p.name: p for p in paths}, root=root,
                       force=force, progress=progress)  # fmt: skip

    def temporaries(self, name: str, root: Path) -> list[Path]:
        raw = raw_dir(root, name)  # write_raw builds it beside itself
        return list(raw.parent.glob(f".{raw.name}-*"))


def raw_dir(root: Path, name: str) -> Path:
    return root / WMT_SUBDIRS[name] / "raw"


def is_prepared(name: str, root: Path) -> bool:
    return bool(_translation().is_prepared(translation_cache_dir(root, name)))


def prepare(
    name: str,
    archives: Mapping[str, Path],
    root: Path,
    force: bool = False,
    progress: Progress | None = None,
) -> Path:
    """raw/ from the verified `archives` (by file name), then the tokenized cache; returns it."""
    recipe = RECIPES[name]
    raw = raw_dir(root, name)
    if force or not raw.is_dir():  # raw/ only ever appears complete
        write_raw(recipe, archives, raw, progress)
    return tokenize(name, recipe, raw, root, progress)


def write_raw(
    recipe: Recipe, archives: Mapping[str, Path], dest: Path, progress: Progress | None = None
) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".raw-", dir=dest.parent))
    try:
        with open(tmp / "train.en", "wb") as en, open(tmp / "train.de", "wb") as de:
            for corpus in recipe.train:
                copy = {corpus.en: _appender(en, corpus.en, progress)}
                copy[corpus.de] = _appender(de, corpus.de, progress)
                lines = read_members(archives[corpus.archive], copy)
                check_aligned(archives[corpus.archive], corpus, lines[corpus.en], lines[corpus.de])
        test = recipe.test
        segments = read_members(
            archives[test.archive], {test.en: sgml_segments, test.de: sgml_segments}
        )
        check_aligned(archives[test.archive], test, len(segments[test.en]), len(segments[test.de]))
        for lang, member in (("en", test.en), ("de", test.de)):
            (tmp / f"test.{lang}").write_text("".join(s + "\n" for s in segments[member]), "utf-8")
        make_room(dest)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def make_room(dest: Path) -> None:
    """Remove what stands where a prepared directory is about to be renamed (a --force): a
    directory with what is in it; a symbolic link (a data set moved elsewhere and linked back)
    as the link alone, never what it leads to. rmtree refuses a link, and that error named
    the verified archive as the culprit, so deleting it and downloading again never helped."""
    if dest.is_symlink():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)


def read_members(archive: Path, handlers: Mapping[str, Callable[[IO[bytes]], Any]]) -> dict:
    """Stream the .tgz `archive` once, calling handlers[member](its file) for each member named;
    returns what the handlers return. A member missing from the archive is an error."""
    found: dict[str, Any] = {}
    try:
        with tarfile.open(archive, "r|gz") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name in handlers and member.isfile():
                    found[name] = handlers[name](tar.extractfile(member))  # type: ignore[arg-type]
                    if len(found) == len(handlers):
                        break
    except OSError as err:
        if err.errno is not None:  # writing raw/ (a full disk): fetch() names the disk
            raise
        raise RunnerError(f"{archive}: extracting failed ({err}); {_CORRUPT}") from None
    except (tarfile.TarError, EOFError, zlib.error) as err:
        raise RunnerError(f"{archive}: extracting failed ({err}); {_CORRUPT}") from None
    except UnicodeDecodeError as err:
        raise RunnerError(f"{archive}: not UTF-8 text ({err}); delete it and fetch again") from None
    missing = [m for m in handlers if m not in found]
    if missing:
        raise RunnerError(
            f"{archive}: has no member {missing[0]}; it is not the published archive. "
            "Delete it and fetch again"
        )
    return found


def check_aligned(archive: Path, corpus: ParallelCorpus, en: int, de: int) -> None:
    """Line i of the English side must translate line i of the German side."""
    if en == de == 0:
        raise RunnerError(f"{archive}: {corpus.name} is empty; delete the archive and fetch again")
    if en != de:
        raise RunnerError(
            f"{archive}: {corpus.name} is not line-aligned ({corpus.en} has {en} lines, "
            f"{corpus.de} has {de}); pairing it would shift every later sentence. "
            "Delete the archive and fetch again"
        )


def _appender(out: IO[bytes], what: str, progress: Progress | None) -> Callable[[IO[bytes]], int]:
    def on_lines(lines: int) -> None:
        if progress is not None:
            progress(what, lines, None, "lines")

    return lambda member: append_lines(member, out, on_lines)


def append_lines(
    src: IO[bytes], out: IO[bytes], on_lines: Callable[[int], None] | None = None
) -> int:
    """Copy `src` to `out`; returns its line count. A last line without a newline gets one,
    so that the next file appended starts on a line of its own."""
    lines, last = 0, b"\n"
    while chunk := src.read(CHUNK_BYTES):
        out.write(chunk)
        lines += chunk.count(b"\n")
        last = chunk[-1:]
        if on_lines is not None:
            on_lines(lines)
    if last != b"\n":
        out.write(b"\n")
        lines += 1
    return lines


def sgml_segments(src: IO[bytes]) -> list[str]:
    """The text of each `<seg id=...>text</seg>` line, as sacreBLEU extracts WMT's SGML, plus
    unescaping the XML entities. WMT's sets have not used entities since 2009 (sacreBLEU's
    author, mjpost/sacrebleu#15), so for newstest2014 the lines are sacreBLEU's."""
    segments = []
    for line in io.StringIO(src.read().decode("utf-8"), newline=None):  # as open() splits
        if match := _SEG.match(line):
            segments.append(re.sub(r"\s+", " ", unescape(match.group(1), _ENTITIES).strip()))
    return segments


def tokenize(
    name: str, recipe: Recipe, raw: Path, root: Path, progress: Progress | None = None
) -> Path:
    def on_progress(what: str, done: int) -> None:
        if progress is not None:
            progress(what, done, None, "sentences")

    splits = {split: (raw / f"{split}.en", raw / f"{split}.de") for split in ("train", "test")}
    try:
        return _translation().prepare_parallel(
            splits,
            translation_cache_dir(root, name),
            vocab_size=recipe.vocab_size,
            max_tokens_per_sentence=recipe.max_tokens_per_sentence,
            on_progress=on_progress,
        )
    except DataError as err:
        raise RunnerError(
            f"{err}; delete {raw} and fetch again (runner data fetch {name})"
        ) from None


def _translation() -> ModuleType:
    """workloads.data.translation, imported only when a WMT data set is asked for."""
    try:
        return importlib.import_module("workloads.data.translation")
    except ImportError as err:
        raise RunnerError(
            f"tokenizing WMT needs workloads.data.translation and its dependencies ({err}); "
            "pip install 'stackbench[workloads]'"
        ) from None
