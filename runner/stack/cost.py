"""What runs and stacks cost: node-hours times the hourly prices of runner/stack/prices.toml.

A stack's shape (training pool: machine type, GPUs, node counts; system pool: machine type and
size; spot or not) comes from its stacks/Pulumi.<stack>.yaml with the defaults Pulumi.yaml
declares. A shape the table lacks costs "unknown price" (None with the reason), never $0.

What is counted, and what is not:
- a run: its training nodes for the time the job existed (created to finished, which includes
  scheduling and image pulls), plus the system pool and control plane for the same time;
- a stack's lifetime: the system pool and control plane for the whole lifetime, the training
  pool's minimum nodes for the whole lifetime, and the node-hours of its runs above that (a
  lower bound: the autoscaler's scale-up and scale-down idle time is not seen);
- not counted: disks, network egress, registry and bucket storage, load balancers, taxes,
  discounts (sustained use, committed use, free tiers).
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from runner.errors import RunnerError

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class StackShape:
    stack: str
    provider: str
    region: str
    node_machine_type: str
    gpu_type: str
    gpus_per_node: int
    min_nodes: int
    max_nodes: int
    system_machine_type: str
    system_node_count: int
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
class Cost:
    """USD for one item (None: unknown price, `reason` says why) and the node-hours behind it."""

    usd: float | None
    node_hours: float
    reason: str = ""


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
    if shape.spot:
        return Price(None, unknown_reason="spot capacity: its price changes hourly")
    machine = machine_price(table, shape, shape.node_machine_type)
    if not machine.known or shape.gpus_per_node == 0:
        return machine
    row = _row(table.get("machine", []), provider=shape.provider, region=shape.region,
               machine_type=shape.node_machine_type)  # fmt: skip
    if row is not None and row.get("includes_gpus"):
        return machine
    gpu = _row(table.get("gpu", []), provider=shape.provider, region=shape.region,
               gpu_type=shape.gpu_type)  # fmt: skip
    if gpu is None:
        return Price(None, unknown_reason=f"no price for GPU {shape.gpu_type} in {shape.region}")
    total = machine.usd_per_hour + shape.gpus_per_node * float(gpu["usd_per_gpu_hour"])  # type: ignore[operator]
    return Price(total, (*machine.sources, _source(gpu)))


def stack_prices(table: Mapping[str, Any], shape: StackShape) -> StackPrices:
    fee = _row(table.get("control_plane", []), provider=shape.provider)
    if fee is not None:
        control = Price(float(fee["usd_per_hour"]), (_source(fee),))
    else:
        control = Price(None, unknown_reason=f"no control-plane price for {shape.provider}")
    return StackPrices(
        training_node_price(table, shape),
        machine_price(table, shape, shape.system_machine_type),
        control,
    )


def _times(price: Price, node_hours: float) -> Cost:
    if price.usd_per_hour is None:
        return Cost(None, node_hours, price.unknown_reason)
    return Cost(price.usd_per_hour * node_hours, node_hours)


def run_cost(prices: StackPrices, shape: StackShape, num_nodes: int, duration_s: float) -> Cost:
    """Training nodes, system pool and control plane for the run's duration."""
    hours = duration_s / SECONDS_PER_HOUR
    return _total(prices, num_nodes * hours, shape.system_node_count * hours, hours)


def lifetime_cost(
    prices: StackPrices, shape: StackShape, lifetime_s: float, run_node_hours: float
) -> Cost:
    """The stack from `pulumi up` to now (or destroy); see the module docstring for what the
    training pool's share leaves out."""
    hours = lifetime_s / SECONDS_PER_HOUR
    training_node_hours = max(shape.min_nodes * hours, run_node_hours)
    return _total(prices, training_node_hours, shape.system_node_count * hours, hours)


def _total(
    prices: StackPrices, training_node_hours: float, system_node_hours: float, hours: float
) -> Cost:
    """The three parts summed; unknown if any part is (node-hours: training plus system)."""
    parts = [
        _times(prices.training_node, training_node_hours),
        _times(prices.system_node, system_node_hours),
    ]
    node_hours = sum(p.node_hours for p in parts)
    parts.append(_times(prices.control_plane, hours))
    unknown = [p.reason for p in parts if p.usd is None]
    if unknown:
        return Cost(None, node_hours, "; ".join(dict.fromkeys(unknown)))
    return Cost(sum(p.usd for p in parts), node_hours)  # type: ignore[misc]


def run_duration_s(created_at: str, finished_at: str | None, fallback_s: float | None) -> float:
    """From job creation to its final state when both are known, else the workload's own
    init + run time (a lower bound: scheduling and image pulls are missing)."""
    if finished_at:
        start = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        end = datetime.fromisoformat(finished_at.replace("Z", "+00:00"))
        return max(0.0, (end - start).total_seconds())
    return fallback_s or 0.0


# ---- stack shapes from the stack files ---------------------------------------------------


def load_shape(stack: str, project_dir: Path) -> StackShape:
    """The shape of stacks/Pulumi.<stack>.yaml, with Pulumi.yaml's declared defaults."""
    import yaml  # the report extra; not on the runner's start-up path

    path = project_dir / "stacks" / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise RunnerError(
            f"no stack file {path}; the stacks are: {', '.join(stack_names(project_dir))}"
        )
    schema = (yaml.safe_load((project_dir / "Pulumi.yaml").read_text()) or {}).get("config", {})
    values = {k: v.get("default") for k, v in schema.items() if isinstance(v, dict)}
    for key, value in ((yaml.safe_load(path.read_text()) or {}).get("config") or {}).items():
        values[key.partition(":")[2] or key] = value
    provider = str(values["provider"])
    return StackShape(
        stack=stack,
        provider=provider,
        region=str(values.get("region") or ""),
        node_machine_type=str(values.get("nodeMachineType") or ""),
        gpu_type=str(values.get("gpuType") or ""),
        gpus_per_node=int(values.get("gpusPerNode") or 0),
        min_nodes=int(values.get("minNodes") or 0),
        max_nodes=int(values.get("maxNodes") or 1),
        system_machine_type=str(
            values.get("systemMachineType") or _system_default(provider, project_dir)
        ),
        system_node_count=int(values.get("systemNodeCount") or 0),
        spot=str(values.get("spot")).lower() == "true",
    )


def stack_names(project_dir: Path) -> list[str]:
    return sorted(
        p.name[len("Pulumi.") : -len(".yaml")]
        for p in (project_dir / "stacks").glob("Pulumi.*.yaml")
    )


def _system_default(provider: str, project_dir: Path) -> str:
    """The system pool's machine type when the stack leaves it empty: infra/config.py declares
    it (once); importing that module creates nothing (infra/__init__.py)."""
    if str(project_dir) not in sys.path:
        sys.path.insert(0, str(project_dir))
    from infra.config import SYSTEM_MACHINE

    return SYSTEM_MACHINE.get(provider, "")
