"""The stackbench runner: resolve a benchmark into a job, run it on a backend, collect results."""
