"""The stackbench Pulumi program: one cluster per stack, ready to run benchmarks.

`__main__.py` composes the parts; `config.py` validates the stack's settings; `kind.py`,
`gke.py` and `eks.py` are the cluster components (one output contract, `cluster.py`);
`image.py` builds and pushes the training image; `results.py` makes the results store and
its identity; `addons.py` installs the in-cluster add-ons; `outputs.py` names what the runner
reads. Importing any module here creates nothing: resources exist only when `__main__` runs.
"""
