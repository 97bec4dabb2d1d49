import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests.distributed import run_ranks
from tests.workloads.entry import torchrun
from workloads.configuration.micro_config import AllReduceMicroConfig, MeasurementConfig, log_sizes
from workloads.configuration.train_config import ConfigError
from workloads.micro import bus_bandwidth, measure, measurement


def test_sizes_are_log_spaced_from_min_to_max_inclusive():
    assert log_sizes(1, 10**8, 1) == [10**k for k in range(9)]
    assert log_sizes(1, 1000, 2) == [1, 3, 10, 32, 100, 316, 1000]
    assert log_sizes(5, 500, 1) == [5, 10, 100, 500]


@pytest.mark.parametrize(("world_size", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_is_nccl_tests_ring_factor(world_size, factor):
    assert bus_bandwidth(10.0, world_size) == pytest.approx(10.0 * factor)


def test_measurement_derives_bandwidths_from_bytes_and_time():
    m = measurement(1_000_000, "float16", 2, 20, 0.001, 4)
    assert m.size_bytes == 2_000_000
    assert m.time_us == pytest.approx(1000.0)
    assert m.algbw_gbps == pytest.approx(2.0)
    assert m.busbw_gbps == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("changes", "key"),
    [({"max_elements": 0}, "max_elements"),
     ({"min_elements": 9, "max_elements": 5}, "max_elements"),
     ({"dtypes": ("int8",)}, "dtypes"), ({"dtypes": ()}, "dtypes"),
     ({"max_time_per_size_s": 0.0}, "max_time_per_size_s"),
     ({"max_time_per_size_s": float("nan")}, "max_time_per_size_s"),
     ({"time_budget_s": 0.0}, "time_budget_s")],
)  # fmt: skip
def test_invalid_micro_config_names_the_key(changes, key):
    with pytest.raises(ConfigError) as err:
        AllReduceMicroConfig().replace(**changes)
    assert err.value.key == key


def test_micro_config_round_trips_through_json():
    config = AllReduceMicroConfig().replace(max_elements=1000, dtypes=("float32", "bfloat16"))
    assert AllReduceMicroConfig.from_json(config.to_json()) == config
    assert json.loads(config.to_json())["measure"]["dtypes"] == ["float32", "bfloat16"]


def _measure_small(rank: int, world_size: int) -> list[dict]:
    config = MeasurementConfig(num_iters=3, num_warmup_iters=1)
    out = []
    for dtype in ("float32", "bfloat16"):
        m = measure(config, 1000, dtype, torch.device("cpu"))
        out.append(dataclasses.asdict(m))
    return out


def test_measure_agrees_on_one_result_per_size_and_dtype_across_ranks():
    ranks = run_ranks(_measure_small, world_size=2)
    assert ranks[0] == ranks[1]  # the slowest rank's time, on every rank
    fp32, bf16 = ranks[0]
    assert (fp32["size_bytes"], bf16["size_bytes"]) == (4000, 2000)
    assert fp32["num_iters"] == 3
    assert fp32["time_us"] > 0 and fp32["busbw_gbps"] == pytest.approx(fp32["algbw_gbps"])


def micro_run(config: AllReduceMicroConfig, out: Path) -> dict:
    cmd = [
        *torchrun(out, workers=2), "-m", "workloads.micro", "--config", config.to_json(),
        "--run-id", "test", "--output-dir", str(out),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_a_micro_run_measures_every_size_and_dtype_within_no_budget_and_stops_at_one(tmp_path):
    config = AllReduceMicroConfig().replace(max_elements=100, dtypes=("float32",), num_iters=2)
    summary = micro_run(config, tmp_path / "all")
    assert [r["elements"] for r in summary["results"]] == [1, 10, 100]
    assert summary["stopped_by_time_budget"] is False
    # A budget already spent when measuring starts: nothing is measured, and it says so.
    summary = micro_run(config.replace(time_budget_s=1e-9), tmp_path / "budget")
    assert summary["results"] == [] and summary["stopped_by_time_budget"] is True
