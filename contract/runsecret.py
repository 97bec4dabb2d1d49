"""A run's secret: the key that signs an elastic group's records (workloads/adaptive/elastic/
signing.py), and how a launcher hands it to the run's workers.

The launcher makes a random secret per run and gives it to the workers only through their
environment (SECRET_ENV): locally the supervisor sets it when it starts each worker; on
Kubernetes the runner keeps it in a Secret of the run's own (`secret_name`, under SECRET_KEY)
that the worker containers read with `valueFrom.secretKeyRef`. It is never written to the run
directory, job.json, a manifest or a log. Not here: signing (signing.py) and creating the
Secret (runner/backends/kubernetes/runsecret.py).
"""

from __future__ import annotations

import secrets

SECRET_ENV = "STACKBENCH_RUN_SECRET"
SECRET_KEY = "run-secret"  # the key of the secret in a cluster run's Secret
SECRET_SUFFIX = "-run-secret"  # a run id (a DNS label) plus this is a valid Secret name


def new_secret() -> str:
    """A run's secret: 32 random bytes, hex (what SECRET_ENV holds)."""
    return secrets.token_hex(32)


def secret_name(run_id: str) -> str:
    """The name of the Secret that holds the run `run_id`'s secret on a cluster."""
    return f"{run_id}{SECRET_SUFFIX}"
