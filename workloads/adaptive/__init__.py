"""KungFu-style adaptive training: monitors inside the step, policies every rank agrees on,
and elastic workers (shared/BENCHMARKS.md, "Adaptive policies"; open division).

- noise.py: the gradient noise scale and the workers' gradient variance, pure math;
- probes.py: the local and averaged gradient norms, read inside a strategy's exchange;
- monitors.py: one all-gather per interval, a Snapshot identical on every rank;
- policy.py: knobs, proposals, the Controller that agrees on decisions (one collective);
- batch.py + sampler.py: adaptive global batch size, the LR rule, re-sharding mid-epoch;
- sync.py: exact all-reduce or model averaging, switched by the replicas' divergence;
- elastic/: workers leave and join a running group; state comes from a survivor.
Nothing here is wired into workloads/loop.py yet; each mechanism is a tested module.
"""
