"""The training run: its epochs and evaluations, and what guards them.

loop.py (one epoch and one evaluation, timed), divergence.py (a non-finite loss or
weight ends the run), over_ranks.py (the run's reductions over its ranks).
The entry point is workloads/train.py (`python -m workloads.train`).
"""
