"""The state broadcast a joiner takes: any nesting of dicts, lists, tuples, tensors of several
dtypes and plain values, rebuilt on a rank that had nothing (2 gloo ranks), and no pickle."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from tests.distributed import run_ranks
from workloads.adaptive.elastic.transfer import broadcast_state, join, specs, split


def _source_state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.98))
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),  # int keys, tuples, 0-d step tensors
        "cursor": (2, 120),
        "knobs": {"global_batch": 48, "sync_mode": "exact", "lr_factor": 1.5, "none": None},
        "mask": torch.tensor([True, False]),
    }


def _broadcast(rank: int, world_size: int) -> dict[str, Any]:
    built = _source_state() if rank == 0 else None
    sent = copy.deepcopy(built)
    return {"built": sent, "received": broadcast_state(built, 0, torch.device("cpu"))}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def test_a_rank_without_state_receives_the_sources_exactly():
    source, receiver = run_ranks(_broadcast, world_size=2)
    assert receiver["built"] is None
    assert source["built"]["optimizer"]["state"]  # Adam's moments: what a joiner lacks
    assert _same(source["received"], source["built"])
    assert _same(receiver["received"], source["built"])


def test_the_skeleton_describes_every_tensor_in_order():
    tensors: list[torch.Tensor] = []
    skeleton = split({"a": torch.zeros(2, 3), "b": [torch.ones(1, dtype=torch.int64), 7]}, tensors)
    assert specs(skeleton) == [((2, 3), torch.float32), ((1,), torch.int64)]
    assert _same(
        join(skeleton, tensors),
        {"a": torch.zeros(2, 3), "b": [torch.ones(1, dtype=torch.int64), 7]},
    )


@pytest.mark.parametrize(
    "skeleton",
    [
        {"tensor": [[2], "torch.complex64"]},
        {"tensor": [[-1], "torch.float32"]},
        {"pickle": "x"},
        {"value": {"nested": "object"}},
        [1, 2],
    ],
)
def test_a_malformed_skeleton_is_refused(skeleton):
    with pytest.raises(ValueError):
        specs(skeleton)


def test_objects_that_are_not_state_are_refused_at_the_source():
    with pytest.raises(TypeError):
        split({"f": lambda: 0}, [])
