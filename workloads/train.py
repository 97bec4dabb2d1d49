"""Entry point: `python -m workloads.train --config '<json>'`, one process per rank.

Launch it with torchrun (or anything that sets the torchrun environment): the workers' command
in every backend's jobs (local, TrainJob, PyTorchJob) and the training image's entry point.
How the process starts and ends is workloads/training/launch.py; what the run does,
workloads/training/run.py.
"""

from __future__ import annotations

import sys

from workloads.configuration.train_config import TrainConfig
from workloads.training.launch import launch
from workloads.training.run import run


def main(argv: list[str] | None = None) -> int:
    # torch._dynamo (a second of imports) is not imported here: a run that compiles nothing
    # and steps with workloads/optimization/sgd.py never loads it.
    return launch(argv, TrainConfig, run)


if __name__ == "__main__":
    sys.exit(main())
