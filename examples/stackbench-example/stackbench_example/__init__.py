"""An example stackbench plugin, to copy: one strategy, one optimizer, one policy.

- topk.py: top-k gradient sparsification with error feedback (`--set strategy=topk`);
- lamb.py: the LAMB optimizer (`--set optimizer=lamb`);
- noise_lr.py: an adaptive policy that lowers the LR while gradients are noisy
  (`--set policy=noise-lr`).
Importing the package registers all three, as an installed package's entry points do
(pyproject.toml), so `runner submit ... --plugin examples/stackbench-example` works
without installing it.
"""

from stackbench_example import lamb, noise_lr, topk

__all__ = ["lamb", "noise_lr", "topk"]
