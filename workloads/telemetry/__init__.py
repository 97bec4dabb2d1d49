"""What a run measures and records.

timing.py (the step's phases, compute apart from communication), mllog.py (the
MLPerf-style event log), mlperf_keys.py (a config as MLPerf hyperparameter events),
summary.py (summary.json's record from what the loop measured), manifest.py (the
environment a run ran in).
"""
