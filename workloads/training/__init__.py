"""The training run: how a worker starts and ends, its epochs and evaluations, and what
guards them.

launch.py (the entry of every workload process: arguments, plugins, config, and the one line
a failure ends with), run.py (a training run from init to its summary, epoch by epoch),
loop.py (one epoch and one evaluation, timed), divergence.py (a non-finite loss or weight
ends the run), over_ranks.py (the run's reductions over its ranks). The command is
workloads/train.py (`python -m workloads.train`).
"""
