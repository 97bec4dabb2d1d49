"""summary.json and manifest.json as typed records: what the workload writes reads back equal,
and a field of the wrong type is a DamagedFile naming that field, never a KeyError later."""

from __future__ import annotations

import json
import re

import pytest

from contract.files import DamagedFile
from contract.manifest import parse_manifest
from contract.network import UNSHAPED_LOOPBACK
from contract.summary import MicroSummary, TrainSummary, parse_summary
from tests.runner.rundirs import env_manifest, summary

MICRO = {
    "schema_version": 1, "kind": "allreduce-micro", "run_id": "r", "benchmark": "allreduce-micro",
    "division": "closed", "status": "success", "world_size": 2, "device": "cpu",
    "backend": "gloo", "run_time_s": 1.5, "stopped_by_time_budget": False,
    "results": [{"elements": 10, "dtype": "float32", "size_bytes": 40, "num_iters": 20,
                 "time_us": 30.0, "algbw_gbps": 0.001, "busbw_gbps": 0.001}],
}  # fmt: skip


def test_a_training_summary_reads_back_as_it_was_written():
    written = summary("r", 2, 12.5, steps=100)
    record = parse_summary(json.loads(json.dumps(written)))
    assert isinstance(record, TrainSummary)
    assert record.to_dict() == written
    assert record.target_value == 0.95 and record.final is not None and record.final.epoch == 3


def test_a_micro_benchmark_summary_reads_back_as_it_was_written():
    record = parse_summary(MICRO)
    assert isinstance(record, MicroSummary) and record.results[0].busbw_gbps == 0.001
    assert record.to_dict() == MICRO


def test_an_evaluations_extra_details_are_kept():
    written = summary("r", 2, 12.5, steps=100)
    written["final"]["bleu_signature"] = "nrefs:1|case:mixed"
    record = parse_summary(written)
    assert record.to_dict()["final"]["bleu_signature"] == "nrefs:1|case:mixed"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("target", None, "field 'target' is not a JSON object"),
        ("world_size", "2", "field 'world_size' is not an integer"),
        ("run_time_s", float("nan"), "field 'run_time_s' is not a finite number"),
        ("target_reached", 1, "field 'target_reached' is not true or false"),
        ("phases_s", {"forward": "fast"}, "field 'phases_s.forward' is not a finite number"),
        ("final", {"epoch": 3}, "field 'final.value' is not a finite number"),
        # A negative time would pass for the fastest run of its cell and pull every mean.
        ("time_to_target_s", -1e6, "field 'time_to_target_s' is not a finite number of at least 0"),
        ("phases_s", {"forward": -1.0}, "field 'phases_s.forward' is not a finite number of at"),
        ("throughput_samples_per_s", -5, "'throughput_samples_per_s' is not a finite number of"),
        ("kind", "gossip", "unknown kind 'gossip'"),
        ("schema_version", 9, "upgrade stackbench"),
    ],
)
def test_a_summary_field_of_the_wrong_type_is_named(field, value, message):
    damaged = summary("r", 2, 12.5, steps=100) | {field: value}
    with pytest.raises(DamagedFile, match=re.escape(message)):
        parse_summary(damaged)


def test_fields_a_newer_writer_adds_are_ignored():
    record = parse_summary(summary("r", 2, None, steps=10) | {"something_new": [1, 2]})
    assert record.time_to_target_s is None


def test_a_manifest_reads_back_and_names_a_wrong_field():
    written = env_manifest("r", 2, network=UNSHAPED_LOOPBACK.to_dict())
    record = parse_manifest(written)
    assert record.to_dict() == written and record.total_threads == 2
    with pytest.raises(DamagedFile, match=r"field 'packages\.torch' is not text"):
        parse_manifest(written | {"packages": {"torch": 2}})
    # The network record is read as its contract says (its link is shown as text).
    with pytest.raises(DamagedFile, match=r"field 'network': field 'link' has the wrong type"):
        parse_manifest(written | {"network": {"description": "x", "link": ["1gbit"]}})
    with pytest.raises(DamagedFile, match=r"field 'network': field 'description' is not text"):
        parse_manifest(written | {"network": {"link": "1gbit"}})


ADAPTIVE = {
    "policies": ["batch", "sync"], "monitor_interval_steps": 10, "decisions": 3,
    "decisions_by_knob": {"global_batch": 2, "sync_mode": 1},
    "final": {"global_batch": 256, "sync_mode": "average"}, "b_noise": 812.5,
}  # fmt: skip


def test_an_adaptive_runs_section_reads_back_with_numbers_and_names_as_knob_values():
    record = parse_summary(summary("r", 2, 12.5, steps=100) | {"adaptive": ADAPTIVE})
    assert isinstance(record, TrainSummary) and record.adaptive is not None
    assert record.adaptive.final == {"global_batch": 256, "sync_mode": "average"}
    assert record.to_dict()["adaptive"] == ADAPTIVE


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policies": "batch"}, "field 'adaptive.policies' is not a list of names"),
        ({"decisions_by_knob": {"global_batch": 1.5}}, "'adaptive.decisions_by_knob.global_batch'"),
        ({"final": {"global_batch": [256]}}, "field 'adaptive.final.global_batch' is not a finite"),
        ({"b_noise": "big"}, "field 'adaptive.b_noise' is not a finite number"),
    ],
)
def test_a_damaged_adaptive_section_is_named(change, message):
    damaged = summary("r", 2, 12.5, steps=100) | {"adaptive": ADAPTIVE | change}
    with pytest.raises(DamagedFile, match=re.escape(message)):
        parse_summary(damaged)
