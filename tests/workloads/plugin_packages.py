"""Plugin packages the plugin tests write into a temporary folder: real files, imported as
a user's plugin is (workloads/plugins/loading.py), and a real dist-info folder whose entry
points importlib.metadata reads, as pip leaves one."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workloads.plugins import loading, points

# A variant of a built-in as a user's package declares one: not registered by the module
# itself, its entry point registers it (the listing tests: cards, cached replies).
VARIANT_PLUGIN = """
    import dataclasses
    from runner.job.benchmarks import CNN_DIGITS

    MINE = dataclasses.replace(CNN_DIGITS, name="mine", default_runs={runs})
"""

# A benchmark as one folder: model, data set, and the benchmark entry that registers them.
BENCHMARK_FOLDER = {
    "__init__.py": '''
        """A benchmark as one folder: a tiny MLP on Gaussian blobs."""
        from blobsbench import benchmark  # noqa: F401 (registers the model, data, benchmark)
    ''',
    "model.py": """
        from __future__ import annotations
        from dataclasses import dataclass
        from typing import Literal
        from workloads.models.base import ModelConfig
        from workloads.plugins import loading, points


        @points.MODELS.register
        @dataclass(frozen=True, kw_only=True)
        class TinyMlpConfig(ModelConfig):
            name: Literal["tiny-mlp"] = "tiny-mlp"
            datasets = ("blobs",)
            task = "classification"

            def build(self, num_classes, sample_shape):
                from torch import nn

                return nn.Sequential(nn.Linear(sample_shape[0], 16), nn.ReLU(),
                                     nn.Linear(16, num_classes))
    """,
    "data.py": '''
        from __future__ import annotations
        from dataclasses import dataclass
        from typing import Literal
        from workloads.data.config import DataConfig, LoadContext
        from workloads.plugins import loading, points

        NUM_CLASSES, WIDTH, PER_CLASS = 3, 4, 200
        # Where the blobs' centers are published, and their checksum: `runner data fetch
        # blobs` reads them from here (tests write the folder with a file:// URL they made).
        CENTERS_URL = "@CENTERS_URL@"
        CENTERS_SHA256 = "@CENTERS_SHA256@"


        @points.DATASETS.register
        @dataclass(frozen=True, kw_only=True)
        class BlobsData(DataConfig):
            """Three well-separated Gaussian blobs, made from a fixed seed (no files)."""

            name: Literal["blobs"] = "blobs"

            def load(self, ctx: LoadContext):
                import torch
                from workloads.data import Splits

                g = torch.Generator().manual_seed(7)
                centers = torch.randn(NUM_CLASSES, WIDTH, generator=g) * 4
                y = torch.arange(NUM_CLASSES).repeat_interleave(PER_CLASS)
                x = centers[y] + torch.randn(len(y), WIDTH, generator=g)
                test = torch.arange(len(y)) % 5 == 0
                return Splits(x[~test].to(ctx.device), y[~test].to(ctx.device),
                              x[test].to(ctx.device), y[test].to(ctx.device), NUM_CLASSES)

            @classmethod
            def canonical_problem(cls, name, root):
                return None  # made from a seed: always the canonical data

            @classmethod
            def fetch_source(cls, name):
                from runner.datasets.catalog import DataSource, RemoteFile
                from runner.datasets.unpack import Unpacked

                return DataSource(
                    name=name,
                    files=(RemoteFile(CENTERS_URL, "sha256", CENTERS_SHA256),),
                    checksum_origin="the folder's own (data.py)",
                    prepare=Unpacked("blobs", ("centers.txt",)),
                )
    ''',
    "benchmark.py": """
        from runner.job.benchmarks import Benchmark
        from workloads.configuration.train_config import RunConfig, TargetConfig, TrainConfig
        from workloads.optimization.optim import SgdConfig
        from workloads.plugins import loading, points
        from workloads.optimization.schedule import MultiStep
        from workloads.strategies.config import PlainStrategy
        from workloads.tasks.config import ClassificationConfig
        from blobsbench.data import BlobsData
        from blobsbench.model import TinyMlpConfig

        BLOBS_MLP = points.BENCHMARKS.register(Benchmark(
            name="blobs-mlp",
            task="image classification (a plugin's)",
            description="A tiny MLP on three Gaussian blobs.",
            config=TrainConfig(
                model=TinyMlpConfig(),
                data=BlobsData(batch_size=32),
                task=ClassificationConfig(),
                optimizer=SgdConfig(momentum=0.9),
                schedule=MultiStep(lr=0.05),
                strategy=PlainStrategy(name="allreduce"),
                run=RunConfig(max_epochs=20),
                target=TargetConfig(target_value=0.95),
            ),
            light_target=0.9,
            tunables=frozenset({"batch_size", "lr"}),
            default_workers=1,
        ))
    """,
}


def write_package(
    root: Path, name: str, modules: dict[str, str], values: dict[str, str] | None = None
) -> Path:
    """The package `name` under `root`, its modules dedented and each `@KEY@` of `values`
    filled in; returns its folder."""
    package = root / name
    package.mkdir(parents=True)
    for module, text in modules.items():
        for key, value in (values or {}).items():
            text = text.replace(f"@{key}@", value)
        (package / module).write_text(textwrap.dedent(text).lstrip())
    return package


def write_dist_info(root: Path, dist: str, version: str, entry_points: str) -> None:
    """A dist-info folder as pip writes one: METADATA and entry_points.txt."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points).lstrip())


@contextmanager
def isolated_registries(root: Path) -> Iterator[None]:
    """Whatever a test registers or imports from `root` is forgotten after it: the
    registries' entries (each loaded first, so that ours are in), sys.path, the plugins
    loaded by path, and the modules imported from under `root`."""
    for registry in points.POINTS:
        registry.entries()
    saved = [(r, dict(r._entries)) for r in points.POINTS]
    path, loaded = list(sys.path), dict(loading._LOADED)
    try:
        yield
    finally:
        for registry, entries in saved:
            registry._entries = entries
        sys.path[:] = path
        loading._LOADED.clear()
        loading._LOADED.update(loaded)
        for name, module in list(sys.modules.items()):
            where = getattr(module, "__file__", None)
            if where and Path(where).is_relative_to(root):
                del sys.modules[name]
