"""Small data sets written in the canonical on-disk formats, for tests (no downloads).

- CIFAR-10: the cifar-10-python.tar.gz layout (python pickles of dicts with 'data' uint8
  [N, 3072] and 'labels'), pickled with protocol 2 as the originals are.
- epsilon: LIBSVM text ("<+1|-1> 1:v1 2:v2 ..."), plain or bzip2-compressed.
- parallel text (WMT-like): line-aligned UTF-8 files `<name>.en` / `<name>.de`.
- WikiText-2: wikitext-2-v1.zip's layout (wikitext-2/wiki.{train,valid,test}.tokens).
- WMT: .tgz archives of named members, and test sets in WMT's SGML (one <seg> a line).
The images and points are learnable (each class has its own pattern), and the translations
follow a fixed rule (word for word, reversed), so short training runs can show that the loss
goes down.
"""

from __future__ import annotations

import bz2
import io
import pickle
import tarfile
import zipfile
from pathlib import Path

import numpy as np

CIFAR_DIR = "cifar-10-batches-py"
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))


def cifar_images(num: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """`num` uint8 images [num, 3072] whose class sets a coarse colour pattern, plus noise."""
    rng = np.random.default_rng(seed)
    patterns = np.random.default_rng(1234).integers(40, 216, size=(10, 3, 4, 4))
    labels = rng.integers(0, 10, size=num)
    coarse = patterns[labels].repeat(8, axis=2).repeat(8, axis=3)  # [num, 3, 32, 32]
    noisy = coarse + rng.normal(0, 25, size=coarse.shape)
    images = np.clip(noisy, 0, 255).astype(np.uint8).reshape(num, -1)
    return images, [int(v) for v in labels]


def cifar_batch_bytes(num: int, seed: int, name: str = "batch") -> bytes:
    images, labels = cifar_images(num, seed)
    batch = {"batch_label": name, "labels": labels, "data": images, "filenames": []}
    return pickle.dumps(batch, protocol=2)


def write_cifar10(root: Path, per_train_batch: int = 20, num_test: int = 20) -> Path:
    """A CIFAR-10 directory under root (5 x per_train_batch train images); returns it."""
    directory = root / CIFAR_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(CIFAR_TRAIN_FILES):
        (directory / name).write_bytes(cifar_batch_bytes(per_train_batch, seed=i, name=name))
    (directory / "test_batch").write_bytes(cifar_batch_bytes(num_test, seed=99, name="test"))
    (directory / "batches.meta").write_bytes(pickle.dumps({"label_names": []}, protocol=2))
    return directory


def cifar_archive(per_train_batch: int = 4, num_test: int = 4) -> bytes:
    """cifar-10-python.tar.gz's layout, as bytes."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        files = {
            name: cifar_batch_bytes(per_train_batch, i) for i, name in enumerate(CIFAR_TRAIN_FILES)
        }
        files["test_batch"] = cifar_batch_bytes(num_test, 99)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{CIFAR_DIR}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def epsilon_points(num: int, num_features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two Gaussian clouds (labels +-1) shifted apart along a fixed direction; unit-norm rows
    like epsilon's. Separable from a few hundred samples even with 2,000 features."""
    rng = np.random.default_rng(seed)
    direction = np.random.default_rng(77).normal(size=num_features)
    labels = rng.choice([-1, 1], size=num)
    x = rng.normal(size=(num, num_features)) + 0.15 * labels[:, None] * direction
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), labels


def libsvm_text(x: np.ndarray, labels: np.ndarray) -> str:
    lines = []
    for row, label in zip(x, labels, strict=True):
        features = " ".join(f"{j + 1}:{v:.7g}" for j, v in enumerate(row) if v != 0.0)
        lines.append(f"{int(label):+d} {features}".rstrip())
    return "\n".join(lines) + "\n"


def write_libsvm(path: Path, x: np.ndarray, labels: np.ndarray) -> Path:
    text = libsvm_text(x, labels).encode()
    path.write_bytes(bz2.compress(text) if path.suffix == ".bz2" else text)
    return path


EpsilonPoints = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def write_epsilon(root: Path, num_train: int, num_test: int, suffix: str = ".txt") -> EpsilonPoints:
    """An epsilon data root: LIBSVM files `train<suffix>` and `test<suffix>` of
    epsilon_points, converted into the cache the loader reads. Returns the points (train x,
    train labels, test x, test labels)."""
    from workloads.data.epsilon import NUM_FEATURES, cache_dir
    from workloads.data.libsvm import convert

    x, y = epsilon_points(num_train, NUM_FEATURES, seed=0)
    tx, ty = epsilon_points(num_test, NUM_FEATURES, seed=1)
    sources = {
        "train": write_libsvm(root / f"train{suffix}", x, y),
        "test": write_libsvm(root / f"test{suffix}", tx, ty),
    }
    convert(sources, cache_dir(root), NUM_FEATURES)
    return x, y, tx, ty


# A word-for-word dictionary with German's non-ASCII letters, so tokenizers meet UTF-8.
EN_DE_WORDS = {
    "the": "die", "house": "Haus", "is": "ist", "green": "grün", "small": "klein",
    "big": "groß", "dog": "Hund", "runs": "läuft", "over": "über", "bridge": "Brücke",
    "quickly": "schnell", "and": "und", "cat": "Katze", "sleeps": "schläft", "tree": "Baum",
    "beautiful": "schön", "door": "Tür", "opens": "öffnet", "very": "sehr", "today": "heute",
}  # fmt: skip


def parallel_sentences(num: int, seed: int, max_words: int = 8) -> tuple[list[str], list[str]]:
    """`num` (English, German) sentence pairs: random words, and their German words in
    reverse order (a copy-and-reverse task), each ending with a full stop."""
    rng = np.random.default_rng(seed)
    english = list(EN_DE_WORDS)
    sources, targets = [], []
    for _ in range(num):
        words = [english[i] for i in rng.integers(0, len(english), rng.integers(1, max_words + 1))]
        sources.append(_sentence(words))
        targets.append(_sentence([EN_DE_WORDS[w] for w in reversed(words)]))
    return sources, targets


def _sentence(words: list[str]) -> str:
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_bytes("".join(line + "\n" for line in lines).encode())
    return path


def write_parallel(
    directory: Path, name: str, num: int, seed: int, max_words: int = 8
) -> tuple[Path, Path]:
    """`<directory>/<name>.en` and `.de`, line-aligned; returns (source, target)."""
    directory.mkdir(parents=True, exist_ok=True)
    sources, targets = parallel_sentences(num, seed, max_words)
    return (
        write_lines(directory / f"{name}.en", sources),
        write_lines(directory / f"{name}.de", targets),
    )


def zip_bytes(members: dict[str, bytes], directories: tuple[str, ...] = ()) -> bytes:
    """A zip archive of `members` (name -> content), with entries for `directories` first."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in directories:
            z.writestr(zipfile.ZipInfo(name.rstrip("/") + "/"), b"")
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name), data)  # ZipInfo keeps the name as given
    return out.getvalue()


def wikitext2_zip(train: str, valid: str, test: str) -> bytes:
    """wikitext-2-v1.zip's layout: a top-level wikitext-2/ holding the three token files."""
    texts = {"train": train, "valid": valid, "test": test}
    members = {f"wikitext-2/wiki.{split}.tokens": text.encode() for split, text in texts.items()}
    return zip_bytes(members, directories=("wikitext-2",))


def tgz_bytes(members: dict[str, bytes]) -> bytes:
    """A gzip-compressed tar of `members` (name -> content), in the order given."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def wmt_sgml(segments: list[str], lang: str, ref: bool, setid: str = "newstest2014") -> bytes:
    """A WMT test set file as published up to 2020: SGML-like, one <seg> a line, grouped in
    <doc>s; `segments` are written as given (escape them to test unescaping)."""
    root = "refset" if ref else "srcset"
    trglang = f' trglang="{lang}"' if ref else ""
    lines = [f'<{root} setid="{setid}" srclang="any"{trglang}>']
    for start in range(0, len(segments), 2):  # two segments a document
        lines += [f'<doc sysid="ref" docid="doc{start}" genre="news" origlang="en">', "<p>"]
        lines += [f'<seg id="{i + 1}">{seg}</seg>' for i, seg in enumerate(segments[start:][:2])]
        lines += ["</p>", "</doc>"]
    lines.append(f"</{root}>")
    return ("\n".join(lines) + "\n").encode()


def markov_lines(num: int, seed: int, vocab: int = 20) -> list[str]:
    """WikiText-style lines (space-separated tokens) from a Markov chain in which every word
    has two equally likely successors: a language model can get its per-word perplexity
    down to about 2, from about `vocab` untrained."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(vocab)]
    lines = []
    for _ in range(num):
        word = int(rng.integers(vocab))
        sentence = [word]
        for _ in range(int(rng.integers(3, 9))):
            word = (3 * word + 1 + int(rng.integers(2))) % vocab
            sentence.append(word)
        lines.append(" " + " ".join(words[w] for w in sentence) + " . ")
    return lines
