"""The closed division's data check: present, complete, and the canonical split sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datagen import write_cifar10
from workloads.data import CIFAR10_FILES, CIFAR10_SUBDIR, WIKITEXT2_SUBDIR, epsilon_cache_dir
from workloads.data.canonical import (
    CIFAR10_IMAGE_BYTES,
    CIFAR10_IMAGES_PER_FILE,
    EPSILON_ROWS,
    WIKITEXT2_TOKENS,
    missing,
    problem,
)


def _sized(path: Path, size: int) -> None:
    """A file of `size` bytes that takes no disk (only sizes are checked)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def _canonical_cifar(root: Path) -> None:
    for name in CIFAR10_FILES:
        _sized(root / CIFAR10_SUBDIR / name, CIFAR10_IMAGES_PER_FILE * CIFAR10_IMAGE_BYTES + 9)


def _epsilon_cache(root: Path, rows: dict[str, int], width: int = 2000) -> None:
    cache = epsilon_cache_dir(root)
    splits = {split: {"rows": n, "source": f"{split}.bz2"} for split, n in rows.items()}
    meta = {"format": "stackbench-libsvm-dense-v1", "num_features": width, "splits": splits}
    _sized(cache / "meta.json", 0)
    (cache / "meta.json").write_text(json.dumps(meta))
    for split, n in rows.items():
        _sized(cache / f"{split}.x.f32", n * width * 4)
        _sized(cache / f"{split}.y.i8", n)


def _text_of(tokens: int) -> str:
    """Lines of 99 words (100 tokens with their <eos>), then one holding the rest."""
    full, rest = divmod(tokens, 100)
    lines = [" ".join(["w"] * 99)] * full + ([" ".join(["w"] * (rest - 1))] if rest else [])
    return "\n".join(lines) + "\n"


def test_canonical_cifar10_sizes_pass(tmp_path):
    _canonical_cifar(tmp_path)
    assert problem(tmp_path, "cifar10") is None


def test_a_cifar_directory_of_64_images_a_file_is_not_cifar10(tmp_path):
    write_cifar10(tmp_path, per_train_batch=64, num_test=64)
    said = problem(tmp_path, "cifar10")
    assert said is not None and "data_batch_1 holds fewer than CIFAR-10's 10,000 images" in said
    assert f"runner data fetch cifar10 --dir {tmp_path} --force" in said


def test_a_missing_cifar_batch_names_the_file_and_the_fetch_command(tmp_path):
    _canonical_cifar(tmp_path)
    (tmp_path / CIFAR10_SUBDIR / "test_batch").unlink()
    said = problem(tmp_path, "cifar10")
    assert said == (
        f"{tmp_path / CIFAR10_SUBDIR / 'test_batch'} is missing; "
        f"run `runner data fetch cifar10 --dir {tmp_path}`"
    )


def test_epsilon_passes_with_its_canonical_rows_and_files(tmp_path):
    _epsilon_cache(tmp_path, EPSILON_ROWS)
    assert problem(tmp_path, "epsilon") is None


@pytest.mark.parametrize(
    ("rows", "width"), [({"train": 400, "test": 100}, 2000), (EPSILON_ROWS, 1999)]
)
def test_an_epsilon_cache_of_other_sizes_is_not_canonical(tmp_path, rows, width):
    _epsilon_cache(tmp_path, rows, width)
    said = problem(tmp_path, "epsilon")
    assert said is not None and "not the canonical split" in said


def test_a_truncated_epsilon_file_is_named(tmp_path):
    _epsilon_cache(tmp_path, EPSILON_ROWS)
    _sized(epsilon_cache_dir(tmp_path) / "test.y.i8", 99_999)
    said = problem(tmp_path, "epsilon")
    assert said is not None and said.startswith(f"{epsilon_cache_dir(tmp_path) / 'test.y.i8'}")


def test_a_damaged_epsilon_meta_file_is_reported_not_raised(tmp_path):
    _epsilon_cache(tmp_path, EPSILON_ROWS)
    (epsilon_cache_dir(tmp_path) / "meta.json").write_text('{"splits": [1, 2]')
    said = problem(tmp_path, "epsilon")
    assert said is not None and "meta.json: unreadable" in said
    (epsilon_cache_dir(tmp_path) / "meta.json").write_text("[" * 100_000)  # no RecursionError
    said = problem(tmp_path, "epsilon")
    assert said is not None and "meta.json: unreadable (ValueError: nested too deeply)" in said


def test_wikitext2_token_counts_decide(tmp_path):
    directory = tmp_path / WIKITEXT2_SUBDIR
    directory.mkdir()
    for name, tokens in WIKITEXT2_TOKENS.items():
        (directory / name).write_text(_text_of(tokens))
    assert problem(tmp_path, "wikitext2") is None
    valid = directory / "wiki.valid.tokens"
    valid.write_text(valid.read_text() + "one more\n")
    said = problem(tmp_path, "wikitext2")
    assert said is not None and "217,649 tokens, WikiText-2's has 217,646" in said


def _wmt_meta(root: Path, text: str) -> None:
    path = root / "wmt17" / "cache" / "meta.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)


def test_a_wmt_cache_with_the_loaders_meta_passes(tmp_path):
    counts = {"sentences": 3, "src_tokens": 12, "tgt_tokens": 14}
    splits = {"train": counts, "test": counts}
    _wmt_meta(tmp_path, json.dumps({"format": "stackbench-parallel-v1", "splits": splits}))
    assert problem(tmp_path, "wmt17") is None and missing(tmp_path, "wmt17") is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("garbage", "meta.json: unreadable (JSONDecodeError"),
        ('{"format": "stackbench-parallel-v0", "splits": {"train": {}, "test": {}}}', "v0'"),
        ('{"format": "stackbench-parallel-v1", "splits": {"train": {}}}', "splits ['train']"),
        ('{"format": "stackbench-parallel-v1", "splits": ["train", "test"]}', "unreadable"),
        ("[" * 100_000, "meta.json: unreadable (ValueError: nested too deeply)"),  # hostile
    ],
)
def test_a_wmt_cache_whose_meta_the_loader_refuses_is_refused_before_the_run(tmp_path, text, said):
    # The loader refuses these once the run's processes have started; the check, before.
    _wmt_meta(tmp_path, text)
    for found in (problem(tmp_path, "wmt17"), missing(tmp_path, "wmt17")):  # both divisions
        assert found is not None and said in found, found
        assert f"runner data fetch wmt17 --dir {tmp_path} --force" in found


def test_an_epsilon_cache_of_another_format_is_refused(tmp_path):
    _epsilon_cache(tmp_path, EPSILON_ROWS)
    meta_path = epsilon_cache_dir(tmp_path) / "meta.json"
    meta_path.write_text(meta_path.read_text().replace("dense-v1", "dense-v2"))
    said = problem(tmp_path, "epsilon")
    assert said is not None and "format 'stackbench-libsvm-dense-v2'" in said


@pytest.mark.parametrize("dataset", ["cifar10", "epsilon", "wikitext2", "wmt16"])
def test_a_data_dir_that_cannot_be_looked_into_is_said_not_raised(tmp_path, dataset):
    # A name longer than the file system takes (ENAMETOOLONG; no permission reads the same
    # way to a user who is not root): pathlib's is_file() raises it, which was a traceback
    # before `runner submit` started anything.
    root = tmp_path / ("d" * 300)
    for check in (problem, missing):
        said = check(root, dataset)
        assert said is not None and "cannot be read (File name too long)" in said, said
        assert f"runner data fetch {dataset} --dir" in said


def test_digits_is_always_there_and_an_unknown_data_set_is_named(tmp_path):
    assert problem(tmp_path, "digits") is None
    assert problem(tmp_path, "imagenet") == "no data set 'imagenet'"


def test_the_check_imports_neither_torch_nor_numpy(tmp_path):
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from workloads.data.canonical import problem\n"
        f"problem(Path({str(tmp_path)!r}), 'cifar10')\n"
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _cifar_run(data_dir: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """workloads.train on `data_dir` as a local run starts a rank: directly, with torchrun's
    variables (torchrun itself prints a trace of its own for any rank that fails)."""
    import socket

    from runner.job.benchmarks import BENCHMARKS

    config = BENCHMARKS["resnet20-cifar10"].config.replace(
        data_dir=str(data_dir), max_epochs=2, warmup_epochs=1.0, lr_milestones=(),
        compile_model=False,
    )  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    cmd = [sys.executable, "-m", "workloads.train", "--config", config.to_json(),
           "--run-id", "test", "--output-dir", str(out), *args]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("open_division", "said"),
    [(False, "the closed division trains on the canonical data set only: "),
     (True, "data_batch_1")],
)  # fmt: skip
def test_a_rank_that_finds_its_data_wrong_says_so_in_one_line_without_a_trace(
    tmp_path, open_division, said
):
    # On a cluster a rank's own check is the only one of the pod's volume: its line (which
    # the runner takes as the run's reason) names the fix, and no traceback buries it.
    write_cifar10(tmp_path / "data", per_train_batch=32, num_test=40)
    if open_division:  # generated data is fine there: damage a batch the loader reads
        batch = tmp_path / "data" / CIFAR10_SUBDIR / CIFAR10_FILES[0]
        batch.write_bytes(batch.read_bytes()[:100])
    args = ("--open-division",) if open_division else ()
    done = _cifar_run(tmp_path / "data", tmp_path / "out", *args)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    [line] = [ln for ln in output.splitlines() if "stackbench: " in ln]
    assert said in line and "runner data fetch cifar10" in line
    assert "Traceback" not in output
