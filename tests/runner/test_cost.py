"""Cost math: node-hours x hourly prices, stack shapes from the stack files, unknown prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.results import report as reports
from runner.results.runs import load_run
from runner.stack import cost
from tests.runner.rundirs import make_run

PROJECT = Path(__file__).resolve().parents[2]
TABLE = {
    "machine": [
        {"provider": "gke", "region": "r", "machine_type": "n1", "usd_per_hour": 1.0,
         "source": "s", "as_of": "d"},
        {"provider": "gke", "region": "r", "machine_type": "sys", "usd_per_hour": 0.25,
         "source": "s", "as_of": "d"},
        {"provider": "gke", "region": "r", "machine_type": "a2", "usd_per_hour": 20.0,
         "includes_gpus": True, "source": "s", "as_of": "d"},
    ],
    "gpu": [{"provider": "gke", "region": "r", "gpu_type": "t4", "usd_per_gpu_hour": 0.5,
             "source": "s", "as_of": "d"}],
    "control_plane": [{"provider": "gke", "usd_per_hour": 0.1, "source": "s", "as_of": "d"}],
}  # fmt: skip


def shape(**changes):
    base = dict(stack="s", provider="gke", region="r", node_machine_type="n1", gpu_type="t4",
                gpus_per_node=2, min_nodes=0, max_nodes=8, system_machine_type="sys",
                system_node_count=1, spot=False)  # fmt: skip
    return cost.StackShape(**(base | changes))


def test_training_node_price_adds_attached_gpus_to_the_machine():
    assert cost.training_node_price(TABLE, shape()).usd_per_hour == pytest.approx(2.0)
    built_in = shape(node_machine_type="a2", gpus_per_node=8)
    assert cost.training_node_price(TABLE, built_in).usd_per_hour == pytest.approx(20.0)


def test_run_cost_is_node_hours_times_prices_for_training_system_and_control_plane():
    prices = cost.stack_prices(TABLE, shape())
    c = cost.run_cost(prices, shape(), num_nodes=4, duration_s=1800)
    # 4 nodes x 0.5 h x $2 + 1 system node x 0.5 h x $0.25 + 0.5 h x $0.1
    assert c.usd == pytest.approx(4.0 + 0.125 + 0.05)
    assert c.node_hours == pytest.approx(2.5)


def test_lifetime_cost_counts_pools_for_the_lifetime_and_run_node_hours_above_the_minimum():
    prices = cost.stack_prices(TABLE, shape())
    c = cost.lifetime_cost(prices, shape(), lifetime_s=10 * 3600, run_node_hours=3.0)
    assert c.usd == pytest.approx(3.0 * 2.0 + 10 * 0.25 + 10 * 0.1)
    floor = cost.lifetime_cost(prices, shape(min_nodes=1), 10 * 3600, run_node_hours=3.0)
    assert floor.usd == pytest.approx(10 * 2.0 + 10 * 0.25 + 10 * 0.1)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"node_machine_type": "n9"}, "no price for n9"),
        ({"gpu_type": "h100"}, "no price for GPU h100"),
        ({"spot": True}, "spot"),
        ({"provider": "kind"}, "kind runs on this machine"),
    ],
)
def test_a_shape_without_a_price_is_unknown_never_zero(changes, reason):
    s = shape(**changes)
    c = cost.run_cost(cost.stack_prices(TABLE, s), s, 1, 3600)
    assert c.usd is None
    assert reason in c.reason


def test_every_cloud_stack_in_stacks_has_a_price_with_a_source():
    table = cost.load_price_table()
    for name in cost.stack_names(PROJECT):
        s = cost.load_shape(name, PROJECT)
        prices = cost.stack_prices(table, s)
        if s.provider == "kind":
            assert not prices.training_node.known
            continue
        for price in (prices.training_node, prices.system_node, prices.control_plane):
            assert price.known, (name, price.unknown_reason)
            assert all("https://" in src for src in price.sources)


def test_stack_shape_applies_pulumi_yaml_defaults_and_the_system_pool_default():
    s = cost.load_shape("gke-gpu-8", PROJECT)
    assert (s.node_machine_type, s.gpu_type, s.gpus_per_node) == (
        "n1-standard-8",
        "nvidia-tesla-t4",
        1,
    )
    assert (s.system_machine_type, s.system_node_count, s.min_nodes) == ("e2-standard-4", 1, 0)


def test_report_prices_a_stack_run_from_creation_to_its_final_state(tmp_path):
    make_run(tmp_path, "r", 2, 10.0, stack="gke-gpu-8", num_nodes=2,
             created_at="2026-01-01T00:00:00+00:00",
             finished_at="2026-01-01T01:00:00+00:00")  # fmt: skip
    run = load_run(tmp_path / "r")
    (c,) = reports.cluster_costs([run], PROJECT).values()
    s = cost.load_shape("gke-gpu-8", PROJECT)
    prices = cost.stack_prices(cost.load_price_table(), s)
    expected = 2 * prices.training_node.usd_per_hour + prices.system_node.usd_per_hour + 0.10
    assert c.usd == pytest.approx(expected)
    assert reports.cost_text(c, run).startswith("$")
