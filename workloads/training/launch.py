"""How a workload process starts and ends: `python -m workloads.train` and `python -m
workloads.micro` (the same arguments) both enter through `launch`.

In order: no process outlives its launcher (workloads/runtime/lifetime.py), the arguments, the
rank's log file, the plugins, the config; then the workload's own run. What ends a run that is
no bug of ours (a data set found missing or damaged, an elastic group that cannot go on, a
collective that never completed, a plugin that failed to load or raised) ends it here in one
line, `stackbench: ...`, which the supervisor takes as the run's reason, and an exit status
that fails the run; our own bugs keep their traceback. Not here: what a training run does
(workloads/training/run.py).
"""

from __future__ import annotations

import argparse
import gc
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from workloads.adaptive.elastic.membership import MembershipError
from workloads.configuration.components import Composite
from workloads.configuration.train_config import ConfigError, TrainConfig
from workloads.data import DataError
from workloads.plugins import loading, provenance
from workloads.plugins.registry import PluginError
from workloads.runtime import dist, lifetime, watchdog

ELASTIC_EXIT = 4  # an elastic run that cannot go on (too few workers, its writer gone)
DATA_EXIT = 1  # a failure of the run, not of its command line
PLUGIN_EXIT = 1  # a plugin that cannot load, or whose code raised
C = TypeVar("C", bound=Composite)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.train",
        description="One rank of a stackbench workload, under torchrun's environment.",
    )
    parser.add_argument("--config", required=True, help="resolved TrainConfig as JSON")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--benchmark", default=None, help="registry name (default: the model)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--output-dir", required=True, type=Path)
    parser.add_argument("--log-dir", type=Path, default=None, help="write rank-N.log here")
    parser.add_argument("--open-division", action="store_true")
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="MODULE_OR_PATH",
        help="load this plugin before reading the config (workloads/plugins/loading.py)",
    )  # fmt: skip
    parser.add_argument(
        "--expect-plugin", action="append", default=[], metavar="NAME=SHA256",
        help="the source hash of a plugin the job was checked against; another is refused",
    )  # fmt: skip
    parser.add_argument(
        "--elastic", metavar="MIN:MAX", default=None,
        help="an elastic worker: goes on while MIN of the MAX started are left "
        "(workloads/adaptive/elastic/launch.py says where it finds its group)",
    )  # fmt: skip
    return parser.parse_args(argv)


def launch(argv: list[str] | None, config_type: type[C], run_fn: Callable[..., Any]) -> int:
    """The entry of every workload module: arguments, rank log, config, then run_fn."""
    lifetime.die_with_parent()  # no worker outlives its launcher (workloads/runtime/lifetime.py)
    args = parse_args(argv)
    if args.elastic is not None and config_type is not TrainConfig:
        raise SystemExit("workloads: --elastic: only training runs have elastic workers")
    # An elastic worker's rank is known once its group forms (ElasticSession.start).
    env = None if args.elastic is not None else dist.DistEnv.from_environ()
    if args.log_dir is not None:
        dist.redirect_output(args.log_dir / f"rank-{_log_index(env)}.log")
    try:
        args.plugins_loaded = {loading.load(p).split(".")[0]: p for p in args.plugin}
    except PluginError as err:  # one line; the traceback would be the loader's, not theirs
        print(f"stackbench: {err}", flush=True)
        return PLUGIN_EXIT
    try:
        config = config_type.from_json(args.config)
    except ConfigError as err:  # e.g. written by a newer runner than this image's workloads
        raise SystemExit(f"workloads: --config: {err}") from None
    unexpected = _unexpected_plugin(config, args)
    if unexpected is not None:
        print(f"stackbench: {unexpected}", flush=True)
        return PLUGIN_EXIT
    # What the imports created lives as long as the process; frozen out of the garbage
    # collector, its few hundred thousand objects are not walked again by full collections:
    # dist.shutdown's (it frees DDP's reducer before the group goes) and the interpreter's
    # at exit, 0.2-1 s each. What the run builds stays collectable.
    gc.freeze()
    try:
        run_fn(config, env, args)
    except MembershipError as err:  # an elastic run that cannot go on: one line says why
        print(f"stackbench: {err}", flush=True)
        return ELASTIC_EXIT
    except DataError as err:  # data a rank found missing or damaged (on a cluster, the only
        # check of the pod's volume): the line names the fix; a trace would bury it
        print(f"stackbench: {err}", flush=True)
        return DATA_EXIT
    except RuntimeError as err:  # a peer that stopped answering is no bug of ours: no trace
        reason = watchdog.timeout_reason(err)
        if reason is None:
            return _plugin_fault(err)
        plugins = provenance.used_plugin_names(config, args.benchmark)
        named = f" (with plugin {', '.join(plugins)})" if plugins else ""  # its code may hang
        print(f"stackbench: {reason}{named}", flush=True)
        return watchdog.STALLED_EXIT
    except Exception as err:
        return _plugin_fault(err)
    gc.freeze()  # the process ends here: nothing left is worth walking
    return 0


def _unexpected_plugin(config: Any, args: argparse.Namespace) -> str | None:
    """Why a plugin found here is not the code the job was checked against (runner/job/
    image_plugins.py: an image whose plugin changed after its list was written), or None."""
    if not args.expect_plugin:
        return None
    used = provenance.used_entries(config, args.benchmark)
    found = {r.source_sha256: r for r in provenance.plugin_records(used, args.plugins_loaded)}
    for expected in args.expect_plugin:
        name, _, sha256 = expected.partition("=")
        if sha256 not in found:
            here = [f"sha256 {r.source_sha256[:12]}" for r in found.values() if r.name == name]
            return (
                f"plugin {name}: the job expects source sha256 {sha256[:12]}, but here it is "
                f"{here[0] if here else 'absent'}; rebuild the image or run --local"
            )
    return None


def _plugin_fault(err: Exception) -> int:
    """A plugin's code that raised: its traceback stays in the rank's log (for its author),
    and one line names the plugin and the cause (the run's reason). Our own bugs re-raise."""
    plugin = provenance.plugin_at_fault(err.__traceback__)
    if plugin is None:
        raise err
    traceback.print_exc()
    print(f"stackbench: plugin {plugin}: {type(err).__name__}: {err}", flush=True)
    return PLUGIN_EXIT


def _log_index(env: dist.DistEnv | None) -> int:
    """rank-N.log: the rank; an elastic worker's index among those started (its member id
    wN, which is its starting rank: membership.first_generation orders by name)."""
    if env is not None:
        return env.rank
    member = os.environ.get("STACKBENCH_MEMBER", "")
    return int(member[1:]) if member[:1] == "w" and member[1:].isdigit() else 0
