"""The configuration language and the configs the runner hands a workload.

fields.py declares a field (type, range, parse); components.py builds configs from
components (Component, Choice, Composite); train_config.py is TrainConfig, the
composite of every component (each lives beside the code it configures);
run_config.py how a run is driven and executed; micro_config.py the all-reduce
micro-benchmark's config. Imports no torch: the runner reads it on its start-up path.
"""
