"""The stackbench Pulumi program: one cluster per stack, ready to run benchmarks.

`program.py` composes the parts (the project root's `__main__.py` is the entry point Pulumi
runs); `config.py` validates the stack's settings and `stackfiles.py` reads them from the
files for callers without the Pulumi engine (`runner cost`); `pools.py` sizes the node pools
and `shapes.py` says what a job pod may use of a node; `kind.py`, `gke.py` and `eks.py` are
the cluster components (one output contract, `cluster.py`); `image.py` builds and pushes the
training image; `results.py` makes the results store and its identity; `addons.py` installs
the in-cluster add-ons and `runtime.py` the TrainJob runtime; `outputs.py` exports what
contract/stack.py declares. Importing any module here creates nothing: resources exist only
when `program.main` runs.
"""
