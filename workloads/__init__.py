"""PyTorch reference workloads of stackbench; entry point `python -m workloads.train`.

Importing this package imports no torch: the runner reads `workloads.configuration.train_config` on
its start-up path. Training code lives in the submodules that `workloads.train` loads.
"""
