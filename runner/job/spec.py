"""JobSpec: a benchmark plus overrides plus placement, resolved and validated before submit.

The whole resolved config travels inside the job (the workload's --config argument), so every
run directory and every pod is self-describing. Resolution is a pure function; its errors are
SpecErrors naming the option to change.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from contract.manifest import PluginRecord, parse_plugin
from contract.records import Fields
from contract.rundir import JOB
from runner.errors import SpecError
from runner.job.benchmarks import BENCHMARKS, FREE_KEYS, TRAIN_MODULE, AnyBenchmark, Benchmark
from runner.job.link import parse_link
from workloads.adaptive.config import AdaptiveConfig
from workloads.configuration.micro_config import AllReduceMicroConfig
from workloads.configuration.train_config import ConfigError, TrainConfig
from workloads.plugins import loading, provenance
from workloads.strategies.config import EXACT_STRATEGIES

Device = Literal["cpu", "cuda"]
Division = Literal["closed", "open"]
DEVICES: tuple[Device, ...] = ("cpu", "cuda")
SPEC_VERSION = 1


# Far past the largest training runs (MLPerf's have thousands of accelerators), and small
# enough that whatever goes over the ranks (their logs, their pods) stays cheap: job.json is
# read back from disk, where a world size of 10**12 would be a loop that never ends.
MAX_WORLD_SIZE = 100_000


@dataclass(frozen=True)
class Placement:
    """Where the processes run: nodes x processes per node, on one kind of device, and the
    network link each worker gets (None: whatever the machine or cluster has)."""

    num_nodes: int = 1
    procs_per_node: int = 1
    device: Device = "cpu"
    link: str | None = None  # canonical rate text ("100mbit"), runner/job/link.py
    # Elastic runs (--workers MIN:MAX): the fewest workers the run goes on with; it starts
    # with world_size (MAX) workers. None: a fixed number of workers.
    min_workers: int | None = None
    # Intra-op CPU threads each worker gets (OMP_NUM_THREADS; runner/job/threads.py), the same
    # whatever the worker count in a sweep. None: the launcher's choice (a cluster's pods, and
    # runs recorded before it was).
    threads_per_worker: int | None = None

    def __post_init__(self) -> None:
        # Also read back from job.json, which may be damaged: counts are whole numbers (1.5
        # nodes sized a list of rank logs; `true` passed for 1).
        for name in ("num_nodes", "procs_per_node", "min_workers", "threads_per_worker"):
            value = getattr(self, name)
            if name in ("min_workers", "threads_per_worker") and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"placement.{name} is not a whole number: {value!r}")
        if self.num_nodes < 1:
            raise SpecError("--nodes", f"must be at least 1, got {self.num_nodes}")
        if self.procs_per_node < 1:
            raise SpecError("--workers", f"must be at least 1, got {self.procs_per_node}")
        if self.world_size > MAX_WORLD_SIZE:
            raise SpecError(
                "--workers", f"at most {MAX_WORLD_SIZE} workers in all, not {self.world_size}"
            )
        if self.min_workers is not None:
            self._check_elastic()
        if self.threads_per_worker is not None and not 1 <= self.threads_per_worker <= 1024:
            raise SpecError("--threads", f"must be 1 to 1024, not {self.threads_per_worker}")
        if self.device not in DEVICES:
            raise SpecError("--device", f"must be one of {', '.join(DEVICES)}")
        if self.link is not None:
            object.__setattr__(self, "link", parse_link(self.link).text)

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.procs_per_node

    @property
    def elastic(self) -> bool:
        return self.min_workers is not None

    @property
    def workers_text(self) -> str:
        """How --workers reads for this placement: "4", or "2:4" for an elastic run."""
        if self.min_workers is None:
            return str(self.world_size)
        return f"{self.min_workers}:{self.world_size}"

    def _check_elastic(self) -> None:
        assert self.min_workers is not None
        if not 1 <= self.min_workers <= self.world_size:
            raise SpecError("--workers", f"MIN:MAX needs 1 <= MIN <= MAX, got {self.workers_text}")
        if self.num_nodes > 1 and self.procs_per_node > 1:
            raise SpecError(
                "--per-node", "an elastic run has one worker per node (pod): drop --per-node"
            )
        if self.link is not None:
            raise SpecError("--link", "a shaped link is for a fixed --workers N, not MIN:MAX")


@dataclass(frozen=True)
class JobSpec:
    run_id: str
    benchmark: str
    config: TrainConfig | AllReduceMicroConfig  # the benchmark's kind of config
    placement: Placement
    overrides: tuple[tuple[str, str], ...] = ()  # as the user typed them, for the record
    division: Division = "closed"
    open_keys: tuple[str, ...] = ()  # the overridden keys that are not tunables
    # Code from outside stackbench the run uses (workloads/plugins/provenance.py).
    plugins: tuple[PluginRecord, ...] = ()
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_version": SPEC_VERSION,
            "run_id": self.run_id,
            "benchmark": self.benchmark,
            "division": self.division,
            "open_keys": list(self.open_keys),
            "overrides": [list(pair) for pair in self.overrides],  # ordered: later wins
            "placement": {
                "num_nodes": self.placement.num_nodes,
                "procs_per_node": self.placement.procs_per_node,
                "device": self.placement.device,
                "link": self.placement.link,
                "min_workers": self.placement.min_workers,
                "threads_per_worker": self.placement.threads_per_worker,
            },
            "config": self.config.to_dict(),
            "plugins": [p.to_dict() for p in self.plugins],
            "created_at": self.created_at,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """The spec job.json holds; TypeError, KeyError or ValueError where it is damaged
        (every text field a text: a number for created_at broke sorting every run)."""
        overrides = tuple((k, v) for k, v in data.get("overrides", ()))
        open_keys = tuple(data.get("open_keys", ()))
        texts = [data["run_id"], data["division"], data["created_at"], *open_keys]
        texts += [text for pair in overrides for text in pair]
        if not all(isinstance(text, str) for text in texts):
            raise TypeError("a text field (run_id, division, created_at, overrides, open_keys) "
                            "is not text")  # fmt: skip
        plugins = tuple(parse_plugin(f) for f in Fields(data, Path(JOB)).objects("plugins"))
        return cls(
            run_id=data["run_id"],
            benchmark=data["benchmark"],
            config=_read_config(data, plugins),
            placement=Placement(**data["placement"]),
            overrides=overrides,
            division=data["division"],
            open_keys=open_keys,
            plugins=plugins,
            created_at=data["created_at"],
        )


def _read_config(
    data: Mapping[str, Any], plugins: tuple[PluginRecord, ...]
) -> TrainConfig | AllReduceMicroConfig:
    """The job's config. Its plugins' entries must be registered already (an installed
    package's are; one loaded from a path by `runner --plugin PATH ...`): a path read from a
    file is never imported, since the file may be hostile."""
    try:
        return type(get_benchmark(data["benchmark"]).config).from_dict(data["config"])
    except (ConfigError, SpecError) as err:
        absent = [p for p in plugins if p.load is not None]
        if not absent:
            raise
        loads = " ".join(f"--plugin {p.load}" for p in absent)
        raise ValueError(
            f"it uses plugin {', '.join(p.name for p in absent)}, which is not loaded "
            f"({err}): runner {loads} COMMAND ..."
        ) from None


def get_benchmark(name: str) -> AnyBenchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise SpecError(
            "BENCHMARK", f"unknown benchmark {name!r}; choose one of: {', '.join(BENCHMARKS)}"
        ) from None


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """['lr=0.1', 'batch_size=64'] -> {'lr': '0.1', ...}; later items win, like a CLI should."""
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError("--set", f"expected key=value, got {item!r} (for example lr=0.1)")
        parsed[key.strip()] = value.strip()
    return parsed


def resolve(
    benchmark_name: str,
    overrides: Sequence[str] = (),
    placement: Placement | None = None,
    run_id: str | None = None,
    plugins: Sequence[str] = (),
) -> JobSpec:
    """Resolve and validate a job; raises SpecError naming what to change. `plugins`: what
    --plugin named (modules or paths), loaded first (PluginError where one cannot be)."""
    loaded = {loading.load(p).split(".")[0]: loading.resolved(p) for p in plugins}
    bench = get_benchmark(benchmark_name)
    placement = placement or Placement(procs_per_node=bench.default_workers)
    parsed = parse_overrides(overrides)
    try:
        config = bench.config.with_overrides(parsed)
    except ConfigError as err:
        raise SpecError("--set", _config_message(bench, err)) from None
    if isinstance(bench, Benchmark) and bench.global_batch_size and "batch_size" not in parsed:
        config = config.replace(batch_size=_split_batch(bench, placement.world_size))
    if isinstance(config, TrainConfig):
        _check_policies(config, placement)
    open_keys = open_division_keys(bench, parsed, config)
    if placement.elastic:
        _check_elastic(bench, config)
        open_keys = tuple(sorted({*open_keys, ELASTIC_KEY}))
    records = provenance.plugin_records(
        provenance.used_entries(config, bench.name), loading.loaded() | loaded
    )
    _check_plugins_used(loaded, records)
    if records:  # code from outside this repository: never closed division
        open_keys = tuple(sorted({*open_keys, *(f"plugin {r.name}" for r in records)}))
    return JobSpec(
        run_id=run_id or new_run_id(bench.name),
        benchmark=bench.name,
        config=config,
        placement=placement,
        overrides=tuple(parsed.items()),
        division="open" if open_keys else "closed",
        open_keys=open_keys,
        plugins=records,
    )


def _check_plugins_used(loaded: Mapping[str, str], records: Sequence[PluginRecord]) -> None:
    """A --plugin that the run does not select is a mistake (a typo in --set strategy=...,
    or the wrong file): say so rather than run the reference and call it the plugin's."""
    used = {r.load for r in records}
    for load in loaded.values():
        if load not in used:
            raise SpecError(
                "--plugin", f"{load} registers nothing this run uses; select its entries with "
                f"--set (`runner plugins` lists them) or submit its benchmark"
            )  # fmt: skip


def open_division_keys(
    bench: AnyBenchmark, parsed: Mapping[str, str], config: TrainConfig | AllReduceMicroConfig
) -> tuple[str, ...]:
    """The overridden keys that make a run open division: those outside the benchmark's
    tunables, run controls and execution controls, except a switch between exact strategies
    (EXACT_STRATEGIES) and the adaptive keys of a run with neither policy nor monitor
    (`--set policy=none`, a sweep's fixed baseline, stays closed)."""
    keys = {k for k in parsed if k not in bench.tunables | FREE_KEYS}
    strategies = {bench.config.flat().get("strategy"), config.flat().get("strategy")}
    if strategies <= EXACT_STRATEGIES:
        keys.discard("strategy")
    if isinstance(config, TrainConfig) and not config.adaptive.monitored:
        keys -= ADAPTIVE_KEYS  # no policy and no monitor: the adaptive keys act on nothing
    return tuple(sorted(keys))


ADAPTIVE_KEYS = frozenset(f.name for f in fields(AdaptiveConfig))


# What open_keys says of an elastic run: its worker count is no key, but it is not closed.
ELASTIC_KEY = "--workers MIN:MAX"


def _check_policies(config: TrainConfig, placement: Placement) -> None:
    """The policies decide from how the workers' gradients differ (the noise scale, their
    variance): on one worker they would never act, and the run would pay for the monitors
    and be open division for nothing."""
    acting = [p for p in config.adaptive.policy if p in ("batch", "sync")]
    if acting and placement.world_size < 2:
        raise SpecError(
            "--workers", f"policy={acting[0]} decides from how the workers' gradients differ, "
            "so it needs 2 or more workers: --workers 2"
        )  # fmt: skip


def _check_elastic(bench: AnyBenchmark, config: TrainConfig | AllReduceMicroConfig) -> None:
    if not isinstance(config, TrainConfig):
        raise SpecError("--workers", f"{bench.name} has a fixed number of workers, not MIN:MAX")
    try:
        config.check_elastic()
    except ConfigError as err:
        raise SpecError("--set", f"--workers MIN:MAX: {err}") from None


def _split_batch(bench: Benchmark, world_size: int) -> int:
    """The per-worker batch of a benchmark whose task fixes the global batch."""
    assert bench.global_batch_size is not None
    if bench.global_batch_size % world_size:
        raise SpecError(
            "--workers",
            f"{bench.name} splits a global batch of {bench.global_batch_size} over the workers; "
            f"use a worker count that divides it (1, 2, 4, 8, ...), not {world_size}",
        )
    return bench.global_batch_size // world_size


def new_run_id(benchmark: str, now: datetime | None = None) -> str:
    """`<benchmark>-<UTC time>-<6 hex>`: sortable, unique, and a valid Kubernetes name.

    Six hex digits: a sweep submits many runs per second, and with four the chance of two
    equal ids among 50 in one second was about 2 %.
    """
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"{benchmark}-{stamp}-{secrets.token_hex(3)}"


WORKLOAD_MODULE = TRAIN_MODULE  # of training benchmarks; workload_module(spec) for any


def workload_module(spec: JobSpec) -> str:
    """The module every process runs: workloads.train, or a micro-benchmark's own entry."""
    return get_benchmark(spec.benchmark).module


def workload_args(spec: JobSpec, output_dir: str, log_dir: str | None = None) -> list[str]:
    """The workload module's arguments: the whole resolved config travels in them."""
    args = ["--config", spec.config.to_json(), "--run-id", spec.run_id]
    args += ["--benchmark", spec.benchmark, "--device", spec.placement.device]
    args += ["--output-dir", output_dir]
    if spec.division == "open":
        args += ["--open-division"]
    if spec.placement.elastic:
        args += ["--elastic", spec.placement.workers_text]
    for plugin in spec.plugins:
        if plugin.load is not None:
            args += ["--plugin", plugin.load]
        # The workers check that the code they load is what the job was checked against.
        args += ["--expect-plugin", f"{plugin.name}={plugin.source_sha256}"]
    if log_dir is not None:
        args += ["--log-dir", log_dir]
    return args


def workload_argv(
    spec: JobSpec, output_dir: str, log_dir: str | None = None, python: str | None = None
) -> list[str]:
    """The command every backend runs in each process (under torchrun or an equivalent)."""
    return [
        python or sys.executable,
        "-m",
        workload_module(spec),
        *workload_args(spec, output_dir, log_dir),
    ]


def _config_message(bench: AnyBenchmark, err: ConfigError) -> str:
    """The error, with what the key takes when the error does not say it (a rule between
    keys), and whose keys an unknown key was not one of."""
    keys = bench.config.flat_keys()
    if err.key not in keys:
        return f"{bench.name}: {err}"
    if "expected" not in str(err):
        return f"{err} ({err.key} takes {bench.config.describe(err.key)})"
    return str(err)
