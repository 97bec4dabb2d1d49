"""What runs and stacks cost: node-hours times the hourly prices of runner/stack/prices.toml.

A stack's shape is its validated settings (contract/stackconfig/stackfiles.py reads
stacks/Pulumi.<stack>.yaml with Pulumi.yaml's declared defaults through the program's own
parser) sized by the program's own pool rule (contract/stackconfig/pools.py), so what is
priced is what `pulumi up` makes. A shape the table lacks costs "unknown price" (None with
the reason), never $0.

What is counted, and what is not:
- a run: its training nodes for the time the job existed (created to finished, which includes
  scheduling and image pulls), plus the system pool and control plane for the same time;
- a stack's lifetime: the system pool and control plane for the whole lifetime; a fixed
  training pool (eks, kind) at its size for the whole lifetime, jobs or not; an autoscaled
  one (gke) at its floor for the whole lifetime plus each recorded run's nodes above the floor
  for the run's duration (a lower bound: the autoscaler's scale-up and its idle time before
  scale-down are not seen). `Cost.parts` says what each part counted;
- not counted: disks, network egress, registry and bucket storage, load balancers, taxes,
  discounts (sustained use, committed use, free tiers).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from contract.stackconfig.config import StackConfig
from contract.stackconfig.pools import PoolSize, system_pool, training_pool
from runner.stack import settings

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Pool:
    machine_type: str
    size: PoolSize
    gpu_type: str = ""
    gpus_per_node: int = 0

    def describe(self) -> str:
        gpus = f" + {self.gpus_per_node} x {self.gpu_type}" if self.gpus_per_node else ""
        return f"{self.machine_type}{gpus}, {self.size.describe()}"


@dataclass(frozen=True)
class StackShape:
    """What a stack runs, from its validated settings and the program's pool rule."""

    stack: str
    provider: str
    region: str
    training: Pool
    system: Pool
    spot: bool


@dataclass(frozen=True)
class Price:
    """An hourly price, or None with why it is unknown; `sources` say where each part is from."""

    usd_per_hour: float | None
    sources: tuple[str, ...] = ()
    unknown_reason: str = ""

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None


@dataclass(frozen=True)
class StackPrices:
    training_node: Price  # one node of the training pool, GPUs included
    system_node: Price
    control_plane: Price


@dataclass(frozen=True)
class Part:
    """One priced part of a cost: what it is, how its node-hours were counted, its USD (None:
    unknown price, `unknown_reason` says why)."""

    what: str
    counted: str
    node_hours: float
    usd: float | None
    unknown_reason: str = ""


@dataclass(frozen=True)
class Cost:
    """USD for one item (None: unknown price, `reason` says why), the node-hours behind it and
    the parts it sums."""

    usd: float | None
    node_hours: float
    reason: str = ""
    parts: tuple[Part, ...] = ()


@dataclass(frozen=True)
class RunUse:
    """What one run held: nodes for a duration."""

    num_nodes: int
    duration_s: float


# ---- shapes ------------------------------------------------------------------------------


KIND_NODE = "kind node (a container on this machine)"


def shape_of(cfg: StackConfig) -> StackShape:
    kind = cfg.provider == "kind"
    node, system = (
        (KIND_NODE, KIND_NODE) if kind else (cfg.node_machine_type, cfg.system_machine_type)
    )
    return StackShape(
        stack=cfg.stack,
        provider=cfg.provider,
        region=cfg.region,
        training=Pool(node, training_pool(cfg), cfg.gpu_type, cfg.gpus_per_node),
        system=Pool(system, system_pool(cfg)),
        spot=cfg.spot,
    )


def load_shape(stack: str, project_dir: Path) -> StackShape:
    """The shape of a stack in this project; settings.StackSettingsError (a RunnerError)
    naming the fix if it has none."""
    return shape_of(settings.load(project_dir, stack))


# ---- prices ------------------------------------------------------------------------------


def load_price_table(path: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    if path is None:
        text = resources.files("runner.stack").joinpath("prices.toml").read_text(encoding="utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    return tomllib.loads(text)


def _row(rows: Sequence[Mapping[str, Any]], **match: Any) -> Mapping[str, Any] | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def _source(row: Mapping[str, Any]) -> str:
    return f"{row['source']} ({row['as_of']})"


def machine_price(table: Mapping[str, Any], shape: StackShape, machine_type: str) -> Price:
    where = f"{machine_type} in {shape.provider} {shape.region}"
    if shape.provider == "kind":
        return Price(None, unknown_reason="kind runs on this machine: no cloud price")
    row = _row(table.get("machine", []), provider=shape.provider, region=shape.region,
               machine_type=machine_type)  # fmt: skip
    if row is None:
        return Price(None, unknown_reason=f"no price for {where} in runner/stack/prices.toml")
    return Price(float(row["usd_per_hour"]), (_source(row),))


def training_node_price(table: Mapping[str, Any], shape: StackShape) -> Price:
    """Machine plus attached GPUs; spot capacity is unknown (its price floats)."""
    pool = shape.training
    if shape.spot:
        return Price(None, unknown_reason="spot capacity: its price changes hourly")
    machine = machine_price(table, shape, pool.machine_type)
    if not machine.known or pool.gpus_per_node == 0:
        return machine
    row = _row(table.get("machine", []), provider=shape.provider, region=shape.region,
               machine_type=pool.machine_type)  # fmt: skip
    if row is not None and row.get("includes_gpus"):
        return machine
    gpu = _row(table.get("gpu", []), provider=shape.provider, region=shape.region,
               gpu_type=pool.gpu_type)  # fmt: skip
    if gpu is None:
        return Price(None, unknown_reason=f"no price for GPU {pool.gpu_type} in {shape.region}")
    total = machine.usd_per_hour + pool.gpus_per_node * float(gpu["usd_per_gpu_hour"])  # type: ignore[operator]
    return Price(total, (*machine.sources, _source(gpu)))


def stack_prices(table: Mapping[str, Any], shape: StackShape) -> StackPrices:
    fee = _row(table.get("control_plane", []), provider=shape.provider)
    if fee is not None:
        control = Price(float(fee["usd_per_hour"]), (_source(fee),))
    elif shape.provider == "kind":
        control = Price(None, unknown_reason="kind runs on this machine: no cloud price")
    else:
        control = Price(None, unknown_reason=f"no control-plane price for {shape.provider}")
    return StackPrices(
        training_node_price(table, shape),
        machine_price(table, shape, shape.system.machine_type),
        control,
    )


# ---- costs -------------------------------------------------------------------------------


def run_cost(prices: StackPrices, shape: StackShape, num_nodes: int, duration_s: float) -> Cost:
    """Training nodes, system pool and control plane for the run's duration."""
    hours = duration_s / SECONDS_PER_HOUR
    system = shape.system.size.max_nodes
    return _total(
        _part(prices.training_node, "training nodes", f"{num_nodes} x {hours:.3g} h",
              num_nodes * hours),
        _part(prices.system_node, "system pool", f"{system} x {hours:.3g} h", system * hours),
        _part(prices.control_plane, "control plane", f"{hours:.3g} h", 0.0, hours),
    )  # fmt: skip


def lifetime_cost(
    prices: StackPrices, shape: StackShape, lifetime_s: float, runs: Sequence[RunUse]
) -> Cost:
    """The stack from `pulumi up` to now (or destroy); see the module docstring."""
    hours = lifetime_s / SECONDS_PER_HOUR
    system = shape.system.size.max_nodes
    return _total(
        _training_lifetime(prices.training_node, shape.training, hours, runs),
        _part(prices.system_node, f"system pool ({shape.system.describe()})",
              f"{_nodes(system)} x {hours:g} h", system * hours),
        _part(prices.control_plane, "control plane", f"{hours:g} h", 0.0, hours),
    )  # fmt: skip


def _training_lifetime(price: Price, pool: Pool, hours: float, runs: Sequence[RunUse]) -> Part:
    size, what = pool.size, f"training pool ({pool.describe()})"
    if not size.autoscaled:
        counted = f"{_nodes(size.max_nodes)} x {hours:g} h (a fixed pool is paid, jobs or not)"
        return _part(price, what, counted, size.max_nodes * hours)
    floor = size.min_nodes * hours
    above = sum(max(0, r.num_nodes - size.min_nodes) * r.duration_s for r in runs)
    above /= SECONDS_PER_HOUR
    counted = (
        f"floor {_nodes(size.min_nodes)} x {hours:g} h + {above:.2f} node-h of "
        f"{len(runs)} recorded run(s) above it"
    )
    if floor + above == 0:
        counted += "; no training node is counted: the pool idles at 0 and no run is recorded"
    return _part(price, what, counted, floor + above)


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def _part(
    price: Price, what: str, counted: str, node_hours: float, hours: float | None = None
) -> Part:
    """node_hours x price (a control plane: `hours` x price, and no node-hours)."""
    billed = node_hours if hours is None else hours
    if price.usd_per_hour is None:
        return Part(what, counted, node_hours, None, price.unknown_reason)
    return Part(what, counted, node_hours, price.usd_per_hour * billed)


def _total(*parts: Part) -> Cost:
    """The parts summed; unknown if any part is."""
    node_hours = sum(p.node_hours for p in parts)
    unknown = [p.unknown_reason for p in parts if p.usd is None]
    if unknown:
        return Cost(None, node_hours, "; ".join(dict.fromkeys(unknown)), parts)
    return Cost(sum(p.usd for p in parts), node_hours, "", parts)  # type: ignore[misc]


def run_duration_s(created_at: str, finished_at: str | None, fallback_s: float | None) -> float:
    """From job creation to its final state when both are known, else the workload's own
    init + run time (a lower bound: scheduling and image pulls are missing). The times come
    from the run's records (the state's from the cluster): one that is not an ISO time with
    its offset counts as unknown."""
    start, end = _instant(created_at), _instant(finished_at)
    if start is not None and end is not None:
        return max(0.0, (end - start).total_seconds())
    return fallback_s or 0.0


def _instant(text: str | None) -> datetime | None:
    """An ISO 8601 time with its UTC offset; None if there is none or it is not one (a time
    without an offset cannot be compared with one that has it)."""
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
    return moment if moment is not None and moment.utcoffset() is not None else None
