"""What infra, runner and workloads agree on, defined once and imported by each side.

- stack.py: the stack outputs infra exports and the runner reads (names, types, validation);
- rundir.py: the run directory: file names and the typed, versioned records in it (job,
  state, summary, manifest), their atomic writer and their damage-tolerant readers;
- events.py: the event keys of the MLPerf-style log and how a log line is parsed.

Standard library only: the runner's start-up path, the training image and the Pulumi program
all import it.
"""
