import torch
import torch.distributed as dist

from tests.distributed import run_ranks


def _sum_of_ranks(rank: int, world_size: int) -> float:
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return float(t)


def test_run_ranks_returns_each_ranks_result_after_a_real_collective():
    assert run_ranks(_sum_of_ranks, world_size=2) == [1.0, 1.0]
