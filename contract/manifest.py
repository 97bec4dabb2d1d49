"""manifest.json: the environment a run ran in, enough to tell apart two runs that should not
be compared and to rebuild the setting: code version, image, Python and package versions,
hardware, the network (contract/network.py), world size, collective backend, seed, threads,
and the plugins whose code the run used (PluginRecord: also in job.json, runner/job/spec.py).

Rank 0 builds it (workloads/telemetry/manifest.py) and writes `to_dict()`; readers get it back with
`parse_manifest`, every field's type checked (a DamagedFile names a wrong one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.files import DamagedFile
from contract.network import NetworkRecord
from contract.records import Fields
from contract.rundir import MANIFEST, SCHEMA_VERSION, check_version


@dataclass(frozen=True, kw_only=True)
class PluginRecord:
    """Code from outside stackbench that a run used (workloads/plugins/provenance.py): a run
    that has any is open division."""

    name: str  # the distribution, or the module of a plugin loaded from a path
    version: str | None  # the distribution's; None for a path
    source_sha256: str  # of its source files (names and contents), as the run found them
    origin: str  # "name==version", or the path it was loaded from
    # What `--plugin` named (workers load it again); None: an installed package, found
    # through its entry points.
    load: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "source_sha256": self.source_sha256,
                "origin": self.origin, "load": self.load}  # fmt: skip

    @property
    def label(self) -> str:
        """ "topk-example 0.1.0 (sha256 1a2b3c4d5e6f)": how listings name it."""
        version = f" {self.version}" if self.version else ""
        return f"{self.name}{version} (sha256 {self.source_sha256[:12]})"


def parse_plugin(f: Fields) -> PluginRecord:
    return PluginRecord(
        name=f.text("name"),
        version=f.optional_text("version"),
        source_sha256=f.text("source_sha256"),
        origin=f.text("origin"),
        load=f.optional_text("load"),
    )


@dataclass(frozen=True, kw_only=True)
class Manifest:
    run_id: str
    code_version: str  # a commit (with -dirty), or the installed version
    image: str | None  # the training image, on a cluster
    python: str
    packages: Mapping[str, str | None]  # name -> version (None: not installed)
    hardware: Mapping[str, Any]  # machine, cpu, cpu_count, device; gpu and its memory on CUDA
    network: Mapping[str, Any] | None  # contract/network.py's record; None: unknown
    world_size: int
    dist_backend: str
    seed: int
    torch_threads: int
    hostname: str
    plugins: tuple[PluginRecord, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "code_version": self.code_version,
            "image": self.image,
            "python": self.python,
            "packages": dict(self.packages),
            "hardware": dict(self.hardware),
            "network": dict(self.network) if self.network is not None else None,
            "world_size": self.world_size,
            "dist_backend": self.dist_backend,
            "seed": self.seed,
            "torch_threads": self.torch_threads,
            "hostname": self.hostname,
            "plugins": [p.to_dict() for p in self.plugins],
        }

    @property
    def total_threads(self) -> int:
        """Threads per worker times workers: the compute a run was given."""
        return self.torch_threads * self.world_size


def parse_manifest(data: Any, path: Path = Path(MANIFEST)) -> Manifest:
    """The record in `data` (manifest.json's JSON); DamagedFile naming what is wrong."""
    f = Fields(data, path)
    check_version(f.data, path)
    packages = f.object("packages")
    network = f.optional_object("network")
    return Manifest(
        run_id=f.text("run_id"),
        code_version=f.text("code_version"),
        image=f.optional_text("image"),
        python=f.text("python"),
        packages={k: packages.optional_text(k) for k in packages.data},
        hardware=dict(f.object("hardware").data),
        network=_network(network.data, path) if network is not None else None,
        world_size=f.integer("world_size"),
        dist_backend=f.text("dist_backend"),
        seed=f.integer("seed"),
        torch_threads=f.integer("torch_threads"),
        hostname=f.text("hostname"),
        plugins=tuple(parse_plugin(p) for p in f.objects("plugins")),  # absent before plugins
    )


def _network(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The network record, checked as contract/network.py reads it: reports and `runner runs`
    show its link and description as text, so a record of other types is damage."""
    try:
        return NetworkRecord.from_dict(data).to_dict()
    except ValueError as err:
        raise DamagedFile(path, f"field 'network': {err}") from None
