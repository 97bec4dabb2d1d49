"""Extension points: every part of a run a user may bring (models, data sets, tasks,
communication strategies, optimizers, LR schedules, adaptive policies, whole benchmarks).

- registry.py: one small Registry per point (name -> entry + origin); a clash is an error.
- points.py: the points, their entry-point groups (`stackbench.models`, ...) and which of our
  modules hold the built-ins.
- loading.py: loading a plugin named on the command line (`--plugin MODULE_OR_PATH`).
- provenance.py: which plugins a run uses, and their name, version and source hash.
Torch-free: `runner plugins` and `runner benchmarks` read these on their start-up path.
"""
