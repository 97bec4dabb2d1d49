"""Cost math: node-hours x hourly prices, stack shapes from the validated stack settings and the
program's pool rule, what a lifetime counts, unknown prices, and `runner cost` end to end."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from contract.stackconfig.pools import PoolSize
from contract.stackconfig.stackfiles import stack_names
from runner.cli import main
from runner.errors import RunnerError
from runner.results import export
from runner.results import report as reports
from runner.results.runs import load_run
from runner.stack import cost
from tests.runner.damaged_runs import unix_socket_at
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
AUTOSCALED = PoolSize(min_nodes=0, max_nodes=8, initial_nodes=0)


def shape(training_size: PoolSize = AUTOSCALED, **changes) -> cost.StackShape:
    base = cost.StackShape(
        stack="s", provider="gke", region="r",
        training=cost.Pool("n1", training_size, gpu_type="t4", gpus_per_node=2),
        system=cost.Pool("sys", PoolSize(1, 1, 1)), spot=False,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def training(**changes) -> cost.Pool:
    return dataclasses.replace(shape().training, **changes)


def test_training_node_price_adds_attached_gpus_to_the_machine():
    assert cost.training_node_price(TABLE, shape()).usd_per_hour == pytest.approx(2.0)
    built_in = shape(training=training(machine_type="a2", gpus_per_node=8))
    assert cost.training_node_price(TABLE, built_in).usd_per_hour == pytest.approx(20.0)


def test_run_cost_is_node_hours_times_prices_for_training_system_and_control_plane():
    prices = cost.stack_prices(TABLE, shape())
    c = cost.run_cost(prices, shape(), num_nodes=4, duration_s=1800)
    # 4 nodes x 0.5 h x $2 + 1 system node x 0.5 h x $0.25 + 0.5 h x $0.1
    assert c.usd == pytest.approx(4.0 + 0.125 + 0.05)
    assert c.node_hours == pytest.approx(2.5)


def test_an_autoscaled_pool_costs_its_floor_plus_each_runs_nodes_above_it():
    s = shape(PoolSize(min_nodes=1, max_nodes=8, initial_nodes=1))
    prices = cost.stack_prices(TABLE, s)
    runs = [cost.RunUse(4, 3600), cost.RunUse(1, 7200), cost.RunUse(2, 1800)]
    c = cost.lifetime_cost(prices, s, lifetime_s=10 * 3600, runs=runs)
    # floor 1 x 10 h, + (4-1) x 1 h + 0 + (2-1) x 0.5 h = 13.5 training node-h at $2
    assert c.parts[0].node_hours == pytest.approx(13.5)
    assert c.usd == pytest.approx(13.5 * 2.0 + 10 * 0.25 + 10 * 0.1)


def test_an_idle_autoscaled_pool_at_zero_says_no_training_node_is_counted():
    c = cost.lifetime_cost(cost.stack_prices(TABLE, shape()), shape(), 30 * 3600, runs=[])
    part = c.parts[0]
    assert part.node_hours == 0 and part.usd == 0
    assert "no training node is counted" in part.counted
    assert c.usd == pytest.approx(30 * 0.25 + 30 * 0.1)


def test_a_fixed_pool_is_paid_at_its_size_whatever_runs():
    s = shape(PoolSize(8, 8, 8))
    prices = cost.stack_prices(TABLE, s)
    idle = cost.lifetime_cost(prices, s, 30 * 3600, runs=[])
    busy = cost.lifetime_cost(prices, s, 30 * 3600, runs=[cost.RunUse(8, 20 * 3600)])
    assert idle.usd == busy.usd == pytest.approx(8 * 30 * 2.0 + 30 * 0.25 + 30 * 0.1)
    assert "fixed pool is paid" in idle.parts[0].counted


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"training": training(machine_type="n9")}, "no price for n9"),
        ({"training": training(gpu_type="h100")}, "no price for GPU h100"),
        ({"spot": True}, "spot"),
        ({"provider": "kind"}, "kind runs on this machine"),
    ],
)
def test_a_shape_without_a_price_is_unknown_never_zero(changes, reason):
    s = shape(**changes)
    for c in (
        cost.run_cost(cost.stack_prices(TABLE, s), s, 1, 3600),
        cost.lifetime_cost(cost.stack_prices(TABLE, s), s, 3600, runs=[]),
    ):
        assert c.usd is None
        assert reason in c.reason


def test_every_cloud_stack_in_stacks_has_a_price_with_a_source():
    table = cost.load_price_table()
    for name in stack_names(PROJECT):
        s = cost.load_shape(name, PROJECT)
        prices = cost.stack_prices(table, s)
        if s.provider == "kind":
            assert not prices.training_node.known
            continue
        for price in (prices.training_node, prices.system_node, prices.control_plane):
            assert price.known, (name, price.unknown_reason)
            assert all("https://" in src for src in price.sources)


def test_stack_shapes_come_from_the_validated_settings_and_the_pool_rule():
    gke = cost.load_shape("gke-gpu-8", PROJECT)
    assert (gke.training.machine_type, gke.training.gpu_type, gke.training.gpus_per_node) == (
        "n1-standard-8", "nvidia-tesla-t4", 1
    )  # fmt: skip
    assert gke.training.size == PoolSize(0, 8, 0)
    assert (gke.system.machine_type, gke.system.size) == ("e2-standard-4", PoolSize(1, 1, 1))
    # No cluster autoscaler on eks: the group holds all eight nodes from `pulumi up` on.
    assert cost.load_shape("eks-gpu-8", PROJECT).training.size == PoolSize(8, 8, 8)


def test_a_stack_with_an_invalid_setting_or_none_at_all_is_a_runner_error(tmp_path):
    with pytest.raises(RunnerError, match=r"no stack 'nosuch'.*stacks: eks-gpu-8"):
        cost.load_shape("nosuch", PROJECT)
    (tmp_path / "Pulumi.yaml").write_text((PROJECT / "Pulumi.yaml").read_text())
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.bad.yaml").write_text(
        "config:\n  stackbench:provider: eks\n  stackbench:region: us-east-1\n"
        "  stackbench:nodeMachineType: g4dn.xlarge\n  stackbench:gpuType: nvidia-t4\n"
        "  stackbench:gpusPerNode: '1'\n  stackbench:maxNodes: '8'\n"
        "  stackbench:minNodes: '9'\n"
    )
    with pytest.raises(RunnerError, match=r"invalid setting: stackbench:minNodes \(9\) exceeds"):
        cost.load_shape("bad", tmp_path)


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
    assert export.cost_text(c, run).startswith("$")


def invoke_cost(results: Path, *args: str):
    return CliRunner(env={"COLUMNS": "240"}).invoke(
        main, ["--results-dir", str(results), "cost", *args], catch_exceptions=False
    )


def test_cost_of_an_eks_stack_prices_its_eight_idle_gpu_nodes(tmp_path):
    out = invoke_cost(tmp_path, "--stack", "eks-gpu-8", "--hours", "30")
    assert out.exit_code == 0, out.output
    # 8 x g4dn.xlarge x 30 h + m6i.large x 30 h + the control plane x 30 h
    assert "lifetime (30 h, 270.0 node-h): $132.12" in out.output
    assert "8 nodes x 30 h (a fixed pool is paid, jobs or not): $126.24" in out.output


def test_cost_of_an_idle_gke_stack_says_it_counted_no_training_node(tmp_path):
    out = invoke_cost(tmp_path, "--stack", "gke-gpu-8", "--hours", "30")
    assert out.exit_code == 0, out.output
    assert "lifetime (30 h, 30.0 node-h): $7.02" in out.output
    assert "no training node is counted" in out.output


def test_cost_of_a_gke_stack_counts_recorded_runs_above_the_floor(tmp_path):
    make_run(tmp_path, "r", 4, 10.0, stack="gke-gpu-8", num_nodes=4,
             created_at="2026-01-01T00:00:00+00:00",
             finished_at="2026-01-01T02:00:00+00:00")  # fmt: skip
    out = invoke_cost(tmp_path, "--stack", "gke-gpu-8", "--hours", "30")
    assert "8.00 node-h of 1 recorded run(s) above it" in out.output
    # 8 node-h x $0.73 on top of the idle stack's $7.02
    assert "lifetime (30 h, 38.0 node-h): $12.86" in out.output


@pytest.mark.parametrize("since", ["garbage", "2026-01-01T02:00:00"])  # not a time; no offset
def test_a_run_whose_recorded_end_is_not_a_time_is_priced_by_its_own_run_time(tmp_path, since):
    run_dir = make_run(tmp_path, "r", 4, 10.0, stack="gke-gpu-8", num_nodes=4,
                       created_at="2026-01-01T00:00:00+00:00", finished_at=since)  # fmt: skip
    out = invoke_cost(tmp_path, "--stack", "gke-gpu-8", "--hours", "30")
    assert out.exit_code == 0, out.output
    run = load_run(run_dir)
    fallback_s = run.summary.init_time_s + run.summary.run_time_s  # type: ignore[union-attr]
    assert reports.run_duration_s(run) == fallback_s
    assert f"{4 * fallback_s / 3600:.2f} node-h of 1 recorded run(s) above it" in out.output


def test_a_run_with_a_damaged_state_is_named_and_the_others_still_priced(tmp_path):
    make_run(tmp_path, "good", 4, 10.0, stack="gke-gpu-8", num_nodes=4,
             created_at="2026-01-01T00:00:00+00:00",
             finished_at="2026-01-01T02:00:00+00:00")  # fmt: skip
    bad = make_run(tmp_path, "bad", 4, 10.0, stack="gke-gpu-8", num_nodes=4)
    (bad / "state.json").write_text('{"state": "SUCC')
    out = invoke_cost(tmp_path, "--stack", "gke-gpu-8", "--hours", "30")
    assert out.exit_code == 0, out.output
    assert "bad: left out, state.json is not valid JSON" in out.output
    assert "8.00 node-h of 1 recorded run(s) above it" in out.output
    assert "$12.86, not counting 1 damaged run(s)" in out.output


INVALID = (
    b"config:\n  stackbench:provider: eks\n  stackbench:region: us-east-1\n"
    b"  stackbench:nodeMachineType: g4dn.xlarge\n  stackbench:gpuType: nvidia-t4\n"
    b"  stackbench:gpusPerNode: '1'\n  stackbench:maxNodes: '8'\n  stackbench:minNodes: '9'\n"
)


@pytest.mark.parametrize(
    ("stack_file", "says"),
    [
        (INVALID, "invalid setting: stackbench:minNodes (9) exceeds maxNodes (8)"),
        (b"config: [1, 2\n", "Pulumi.bad.yaml is not valid YAML, line 2"),
        (b"config:\n  stackbench:provider: \xff\n", "cannot read the settings of stack 'bad'"),
        (b"- a list\n", "Pulumi.bad.yaml is not a YAML mapping"),
        (None, "no stack 'bad'"),
    ],
)
def test_a_stack_whose_settings_are_wrong_or_missing_is_bad_input(
    tmp_path, monkeypatch, stack_file, says
):
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text((PROJECT / "Pulumi.yaml").read_text())
    if stack_file is not None:
        (project / "stacks" / "Pulumi.bad.yaml").write_bytes(stack_file)
    monkeypatch.chdir(project)
    out = invoke_cost(tmp_path / "results", "--stack", "bad", "--hours", "30")
    assert out.exit_code == 2, out.output
    assert "Invalid value for --stack" in out.output and says in " ".join(out.output.split())


@pytest.mark.parametrize("hours", ["nan", "inf", "-inf", "1e308", "-1", "thirty"])
def test_hours_that_are_not_a_lifetime_are_bad_input_never_a_dollar_nan(tmp_path, hours):
    out = invoke_cost(tmp_path, "--stack", "gke-gpu-8", "--hours", hours)
    assert out.exit_code == 2, out.output
    assert "Invalid value for '--hours'" in out.output and "$" not in out.output


def test_a_run_on_a_stack_whose_file_is_not_yaml_costs_unknown_and_breaks_no_report(tmp_path):
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text((PROJECT / "Pulumi.yaml").read_text())
    (project / "stacks" / "Pulumi.bad.yaml").write_text("config: [1, 2\n")
    make_run(tmp_path, "r", 2, 10.0, stack="bad", num_nodes=2)
    (c,) = reports.cluster_costs([load_run(tmp_path / "r")], project).values()
    assert c.usd is None and "Pulumi.bad.yaml is not valid YAML" in c.reason


def test_run_ids_are_printed_as_they_are_never_as_markup(tmp_path):
    # A run id is a directory's name: `[bold]` or `:x:` in it is text, not styling or emoji.
    for run_id in ("a[bold]b", "c:x:d"):
        make_run(tmp_path, run_id, 2, 10.0, stack="gke-gpu-8", num_nodes=2)
    out = invoke_cost(tmp_path, "--stack", "gke-gpu-8")
    assert out.exit_code == 0, out.output
    assert "  a[bold]b: $" in out.output and "  c:x:d: $" in out.output


@pytest.mark.parametrize("record", ["state.json", "job.json"])
def test_a_run_whose_record_cannot_be_opened_is_left_out_and_the_others_priced(tmp_path, record):
    make_run(tmp_path, "good", 4, 10.0, stack="gke-gpu-8", num_nodes=4,
             created_at="2026-01-01T00:00:00+00:00",
             finished_at="2026-01-01T02:00:00+00:00")  # fmt: skip
    bad = make_run(tmp_path, "bad", 4, 10.0, stack="gke-gpu-8", num_nodes=4)
    with unix_socket_at(bad / record):
        out = invoke_cost(tmp_path, "--stack", "gke-gpu-8", "--hours", "30")
    assert out.exit_code == 0, out.output
    assert "8.00 node-h of 1 recorded run(s) above it" in out.output
    if record == "state.json":  # job.json unreadable: nothing says the run is this stack's
        assert "bad: left out, state.json cannot be read (No such device" in out.output
