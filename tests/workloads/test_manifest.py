"""manifest.json's environment record."""

from __future__ import annotations

import pytest
import torch

from contract.network import ENV, NetworkRecord
from workloads.telemetry import manifest


def test_the_manifest_records_the_network_the_launcher_describes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = NetworkRecord(description="10mbit per worker", link="10mbit", measured_mbit_s=9.5)
    monkeypatch.setenv(ENV, record.to_env())
    built = manifest.build("run-1", 2, "gloo", torch.device("cpu"), seed=0)
    assert built.network == record.to_dict()


def test_a_run_launched_without_a_network_record_says_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert manifest.build("run-1", 1, "gloo", torch.device("cpu"), seed=0).network is None
