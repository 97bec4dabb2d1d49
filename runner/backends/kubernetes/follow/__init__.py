"""Following a run: watches, job and pod states, which pods are the job's, log following."""
