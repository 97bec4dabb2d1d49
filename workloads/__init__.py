"""PyTorch reference workloads of stackbench; entry point `python -m workloads.train`.

One folder per part (docs/design.md, "The workloads package"): configuration/ (no torch),
training/, tasks/, adaptive/, strategies/, models/, data/, telemetry/, optimization/,
runtime/, plugins/. Importing this package imports no torch: the runner reads
`workloads.configuration.train_config` on its start-up path. Training code lives in the
submodules that `workloads.train` loads.
"""
