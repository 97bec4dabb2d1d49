"""A run with plugins on a cluster: its pods run the training image, so before anything is
submitted the image must be known to carry each plugin the run uses, of the same source hash
(contract/imageplugins.py: a stack's output for its own image, or `--image-plugins FILE` for
another). Then the job's workers load each plugin by the module the image installs it as
(not the submitting machine's path), and check its hash again when they start
(workloads/training/launch.py, --expect-plugin): a file edited after the list was written is refused
in the pod too, in one line.
"""

from __future__ import annotations

import dataclasses

from contract.imageplugins import ImagePlugin
from runner.errors import RunnerError
from runner.job.spec import JobSpec


def on_image(spec: JobSpec, carried: tuple[ImagePlugin, ...] | None, where: str) -> JobSpec:
    """`spec` with each plugin loaded as the image installs it; RunnerError (one line, with
    the fix) when the image is not known to carry one of them, or carries other code."""
    if not spec.plugins:
        return spec
    if carried is None:
        names = ", ".join(p.label for p in spec.plugins)
        raise RunnerError(
            f"this run uses code from outside stackbench ({names}), and nothing says that the "
            f"training image of {where} carries it: give --image-plugins FILE (the image's "
            "plugins.json) with --image, submit with the stack's own image, or run it --local"
        )
    by_hash = {p.source_sha256: p for p in carried}
    missing = [p for p in spec.plugins if p.source_sha256 not in by_hash]
    if missing:
        have = ", ".join(f"{p.name} (sha256 {p.source_sha256[:12]})" for p in carried) or "none"
        raise RunnerError(
            f"the training image of {where} does not carry plugin {missing[0].label} "
            f"(it carries: {have}); build the image with it (stack config plugins, then "
            "`pulumi up`), or run it --local"
        )
    plugins = tuple(
        dataclasses.replace(p, load=by_hash[p.source_sha256].module) for p in spec.plugins
    )
    return dataclasses.replace(spec, plugins=plugins)
