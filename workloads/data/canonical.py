"""Whether a data set under a data root is present, complete and the canonical one.

`problem(root, dataset)` answers with the standard library only (no torch, no numpy) and in
well under a second, so the runner can ask before it starts anything: None when the data
set is there and its splits have the sizes docs/benchmarks.md names, else one line saying
what is wrong and the command that fixes it. A closed-division run refuses data that is not
canonical (workloads/training/run.py asks the same question before it starts); an open-division
run may train on anything its loader accepts. It checks sizes, not content: the content is
what `runner data fetch` verified against the published checksums, and what the loaders
validate as they read it.

- cifar10: the six batch files, each large enough for the 10,000 images (3,072 bytes each)
  of a canonical batch, so 50,000 training and 10,000 test images (decoding 180 MB of
  pickles would not be quick);
- epsilon: the converted cache's row counts (400,000 and 100,000) and file sizes;
- wikitext2: the tokens of each file, counted as the reader counts them (words plus one
  `<eos>` a line): 2,088,628, 217,646 and 245,569;
- wmt16, wmt17: the tokenized cache's meta.json, of its format with a train and a test
  split (no canonical sizes are checked);
- digits: always there (it ships with scikit-learn).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract import files
from workloads.data import (
    CIFAR10_FILES,
    CIFAR10_SUBDIR,
    EPSILON_CACHE_FORMAT,
    EPSILON_NUM_FEATURES,
    TRANSLATION_CACHE_FORMAT,
    WIKITEXT2_FILES,
    WIKITEXT2_SUBDIR,
    DataError,
    epsilon_cache_dir,
    translation_cache_dir,
)

CIFAR10_IMAGES_PER_FILE = 10_000  # five training batches and one test batch
CIFAR10_IMAGE_BYTES = 3 * 32 * 32
EPSILON_ROWS = {"train": 400_000, "test": 100_000}
WIKITEXT2_TOKENS = dict(zip(WIKITEXT2_FILES, (2_088_628, 217_646, 245_569), strict=True))


def problem(root: Path, dataset: str) -> str | None:
    """What keeps `dataset` under `root` from being the canonical data set, or None."""
    try:
        return _problem(root, dataset)
    except OSError as err:  # pathlib's is_file() raises all but "no such file" and the like
        return _unreadable(err, dataset, root)


def require(root: Path, dataset: str) -> None:
    """DataError unless `dataset` under `root` is the canonical data set: a closed-division
    run trains on it only, its split sizes those of docs/benchmarks.md (cheap, so a run's
    ranks check it before anything)."""
    found = problem(root, dataset)
    if found is not None:
        raise DataError(f"the closed division trains on the canonical data set only: {found}")


def _problem(root: Path, dataset: str) -> str | None:
    cls = _dataset(dataset)
    return f"no data set {dataset!r}" if cls is None else cls.canonical_problem(dataset, root)


def missing(root: Path, dataset: str) -> str | None:
    """What of `dataset` is not under `root` at all, or None: the check an open-division run
    needs (it may train on any data its loader accepts, but not on none)."""
    cls = _dataset(dataset)
    try:
        return None if cls is None else cls.missing_problem(dataset, root)
    except OSError as err:
        return _unreadable(err, dataset, root)


def _dataset(name: str) -> Any:
    """The data set's config class (each says how it is checked), or None."""
    from workloads.plugins import points

    entry = points.DATASETS.entry(name)
    return None if entry is None else entry.obj


def first_absent(root: Path, dataset: str, paths: list[Path]) -> str | None:
    """The first of `paths` that is not a file, as `missing` says it, or None."""
    absent = next((path for path in paths if not path.is_file()), None)
    return None if absent is None else _missing(absent, dataset, root)


def cifar10_paths(root: Path) -> list[Path]:
    return [root / CIFAR10_SUBDIR / name for name in CIFAR10_FILES]


def wikitext2_paths(root: Path) -> list[Path]:
    return [root / WIKITEXT2_SUBDIR / name for name in WIKITEXT2_FILES]


def cifar10(root: Path) -> str | None:
    directory = root / CIFAR10_SUBDIR
    least = CIFAR10_IMAGES_PER_FILE * CIFAR10_IMAGE_BYTES
    for name in CIFAR10_FILES:
        path = directory / name
        if not path.is_file():
            return _missing(path, "cifar10", root)
        if path.stat().st_size < least:
            return (
                f"{path} holds fewer than CIFAR-10's {CIFAR10_IMAGES_PER_FILE:,} images "
                f"({path.stat().st_size:,} bytes; they take {least:,}): not the canonical "
                f"50,000/10,000 split; {_refetch('cifar10', root)}"
            )
    return None


def epsilon(root: Path) -> str | None:
    cache = epsilon_cache_dir(root)
    meta_path = cache / "meta.json"
    if not meta_path.is_file():
        return _missing(cache, "epsilon", root)
    try:
        meta = files.loads(meta_path.read_text())  # deep nesting: ValueError
        form = meta["format"]
        width = meta["num_features"]
        rows = {split: meta["splits"][split]["rows"] for split in EPSILON_ROWS}
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{meta_path}: unreadable ({type(err).__name__}: {err}); {_refetch('epsilon', root)}"
    if form != EPSILON_CACHE_FORMAT:
        return (
            f"{meta_path}: format {form!r}, not {EPSILON_CACHE_FORMAT}; {_refetch('epsilon', root)}"
        )
    if width != EPSILON_NUM_FEATURES or rows != EPSILON_ROWS:
        return (
            f"{cache}: {rows} rows of {width} features, epsilon's are {EPSILON_ROWS} of "
            f"{EPSILON_NUM_FEATURES}: not the canonical split; {_refetch('epsilon', root)}"
        )
    for split, count in rows.items():
        for suffix, row_bytes in ((".x.f32", 4 * width), (".y.i8", 1)):
            path = cache / f"{split}{suffix}"
            if not path.is_file() or path.stat().st_size != count * row_bytes:
                return f"{path}: missing or the wrong size; {_refetch('epsilon', root)}"
    return None


def wmt(root: Path, dataset: str) -> str | None:
    """The tokenized cache's meta.json is the loader's (its format, a train and a test split):
    the loader refuses any other, but only once the run's processes have started."""
    cache = translation_cache_dir(root, dataset)
    meta_path = cache / "meta.json"
    if not meta_path.is_file():
        return _missing(cache, dataset, root)
    try:
        meta = files.loads(meta_path.read_text())  # deep nesting: ValueError
        found = (meta["format"], sorted(meta["splits"].keys() & {"train", "test"}))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return f"{meta_path}: unreadable ({type(err).__name__}: {err}); {_refetch(dataset, root)}"
    if found != (TRANSLATION_CACHE_FORMAT, ["test", "train"]):
        return (
            f"{meta_path}: format {found[0]!r} with splits {found[1]}, expected "
            f"{TRANSLATION_CACHE_FORMAT!r} with test and train; {_refetch(dataset, root)}"
        )
    return None


def wikitext2(root: Path) -> str | None:
    directory = root / WIKITEXT2_SUBDIR
    for name, canonical in WIKITEXT2_TOKENS.items():
        path = directory / name
        if not path.is_file():
            return _missing(path, "wikitext2", root)
        try:
            with open(path, encoding="utf-8-sig") as f:
                tokens = sum(len(line.split()) + 1 for line in f)
        except (OSError, UnicodeDecodeError) as err:
            return f"{path}: unreadable ({err}); {_refetch('wikitext2', root)}"
        if tokens != canonical:
            return (
                f"{path}: {tokens:,} tokens, WikiText-2's has {canonical:,}: not the "
                f"canonical data set; {_refetch('wikitext2', root)}"
            )
    return None


def _missing(path: Path, dataset: str, root: Path) -> str:
    return f"{path} is missing; run `runner data fetch {dataset} --dir {root}`"


def _unreadable(err: OSError, dataset: str, root: Path) -> str:
    """A data directory that cannot be looked into (no permission, a name too long)."""
    where = err.filename or root
    return (
        f"{where}: cannot be read ({err.strerror or err}); check the data directory "
        f"(data_dir) or run `runner data fetch {dataset} --dir DIR` into one that can"
    )


def _refetch(dataset: str, root: Path) -> str:
    return f"run `runner data fetch {dataset} --dir {root} --force`"
