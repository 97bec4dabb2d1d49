"""KungFu-style adaptive training: monitors inside the step, policies every rank agrees on,
and elastic workers (shared/BENCHMARKS.md, "Adaptive policies"; open division).

- config.py: the adaptive component of a TrainConfig (`--set policy=batch,sync ...`);
- noise.py: the gradient noise scale and the workers' gradient variance, pure math;
- probes.py: the local and averaged gradient norms, read inside a strategy's exchange;
- monitors.py: one all-gather per interval, a Snapshot identical on every rank;
- policy.py: knobs, proposals, the Controller that agrees on decisions (one collective);
- batch.py + sampler.py: adaptive global batch size, the LR rule, re-sharding mid-epoch;
- sync.py: exact all-reduce or model averaging, switched by the replicas' divergence;
- run.py: one run's machinery built from its config, and its events and summary;
- training.py: the classification loop's epoch and step with all of it inside;
- elastic/: workers leave and join a running group; state comes from a survivor.
"""
