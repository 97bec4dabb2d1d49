"""The worker process, its process group and its device: what every workload runs on.

dist.py (the group from the torchrun environment, rank logs), stores.py (a TCPStore
bound to one address), lifetime.py (no process outlives its parent), watchdog.py (a
collective that never completes ends the process), precision.py (fp32 or bf16),
compiling.py and cachedir.py (torch.compile before the clock, its private cache).
Imports nothing of training, tasks, models or strategies.
"""
