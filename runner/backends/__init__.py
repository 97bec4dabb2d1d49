"""Backends run a JobSpec somewhere: `local` (torchrun here) and `kubernetes` (Kubeflow).

Handles are URLs naming the backend: `local://<run-id>`, `k8s://<namespace>/<name>`.
"""
