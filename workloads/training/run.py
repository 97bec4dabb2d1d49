"""A training run, in each rank's process: from init to the summary (docs/design.md, "Timing").

Rank 0 writes the MLPerf-style events to <output-dir>/events.jsonl and stdout, then
summary.json and manifest.json (translation tasks also keep each evaluation's output in
translations/). The clock follows MLPerf: process-group setup, model construction and the
one-time data preparation happen before run_start and are reported as init time; evaluation
is inside the clock. Its epochs are `_train`'s; one epoch's steps and one evaluation are the
task's (workloads/tasks/, over workloads/training/loop.py). Not here: how the process starts
and how a failure ends it (workloads/training/launch.py).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import torch

from contract import events
from contract.files import write_json
from contract.manifest import Manifest
from contract.rundir import EVENTS, MANIFEST, SUMMARY
from contract.summary import TrainSummary
from workloads import strategies, tasks
from workloads.adaptive import run as adaptive_run
from workloads.adaptive.elastic import session as elastic
from workloads.adaptive.elastic.launch import LaunchError
from workloads.adaptive.elastic.session import KNOB, ElasticSession
from workloads.adaptive.policy import KnobValue, Policy
from workloads.configuration.train_config import TrainConfig
from workloads.data import canonical, data_root
from workloads.plugins import provenance
from workloads.runtime import dist, watchdog
from workloads.telemetry import manifest, mllog
from workloads.telemetry.summary import RunTally, summarize
from workloads.telemetry.timing import clock_for
from workloads.training import divergence
from workloads.training.divergence import DIVERGED_EXIT, Diverged
from workloads.training.loop import Deadline
from workloads.training.over_ranks import epoch_sums, mean_phases

PROGRESS_INTERVAL_S = 5.0
T = TypeVar("T")
Guard = Callable[[Callable[[], T], tuple[int, int]], T]


def _limit_cpu_threads(max_threads: int | None) -> None:
    """At most `max_threads` intra-op threads in this process; never more than it had (the
    manifest records what the run used)."""
    if max_threads is not None and max_threads < torch.get_num_threads():
        torch.set_num_threads(max_threads)


def run(
    config: TrainConfig, env: dist.DistEnv | None, args: argparse.Namespace
) -> TrainSummary | None:
    """Train until the target, the epoch limit or the time budget; rank 0 returns the summary.
    `env` is None for an elastic worker (--elastic): its group says its rank."""
    init_t0 = time.perf_counter()
    if not args.open_division:
        canonical.require(data_root(config.data.data_dir), config.data.name)
    session, backend = None, ""
    if env is None:
        session, env = _elastic_start(args.elastic, args.device, config)
        backend = "nccl" if args.device == "cuda" else "gloo"
    is_writer = env.rank == 0
    if is_writer:
        args.output_dir.mkdir(parents=True, exist_ok=True)
    events_path = str(args.output_dir / EVENTS)
    log = (
        mllog.EventLog(events_path, sys.stdout)
        if is_writer
        else mllog.RankLog(env.rank, sys.stdout)
    )
    log.start(events.INIT_START)
    device = dist.select_device(args.device, env)
    _limit_cpu_threads(config.execution.max_cpu_threads)
    if session is None:
        backend = dist.init(device, config.run.dist_timeout_s)
    torch.manual_seed(config.run.seed)  # the same initial model on every rank
    extra: tuple[tuple[Policy, dict[str, KnobValue]], ...] = ()
    if session is not None:
        extra = ((session.policy(), {KNOB: env.world_size}),)
    # The LR schedule's world is the run's starting one, a joiner's included.
    start_world = env.world_size if session is None else session.launch.initial_workers
    adaptive = adaptive_run.build(config, start_world, device, log.point, extra)
    task = tasks.build(
        tasks.Context(
            config,
            env.rank,
            env.world_size,
            device,
            clock_for(device),
            log,
            args.output_dir if is_writer else None,
            adaptive,
        )
    )
    if session is not None:
        assert adaptive is not None  # built with the `workers` knob
        adaptive.elastic = session
        session.bind(adaptive)
    used = provenance.used_entries(config, args.benchmark)
    plugins = provenance.plugin_records(used, getattr(args, "plugins_loaded", {}))
    env_manifest = manifest.build(
        args.run_id, env.world_size, backend, device, config.run.seed, plugins
    )
    _log_run_parameters(log, config, args, env, task, env_manifest)
    if is_writer:
        write_json(args.output_dir / MANIFEST, env_manifest.to_dict())
    log.end(events.INIT_STOP)
    joined = session is not None and session.joined
    if not joined:  # a joiner's peers are mid-run, in the step that admitted it
        torch.distributed.barrier()  # every rank starts the clock together
    init_time_s = time.perf_counter() - init_t0

    start = time.perf_counter()
    log.start(events.RUN_START)
    if adaptive is not None:
        adaptive.start(start)
    tally = RunTally()
    guard = session.guard if session is not None else _unguarded
    # An elastic run's budget is agreed in its steps' decisions (session.py); reading it
    # is no collective. A fixed run's is a collective every few steps and at an epoch's end.
    out_of_time = (
        Deadline(config.run.time_budget_s, start, device).expired
        if session is None
        else session.expired
    )
    # A joiner enters the epoch the cursor it received is in, mid-epoch.
    first_epoch = adaptive.cursor.epoch + 1 if joined and adaptive is not None else 1
    divergence.forget()
    try:
        _train(task, config, device, tally, log, start, out_of_time, guard, first_epoch)
        # Steps read one weight each; every weight is read every few steps, and here.
        divergence.check_all_weights("by the end of training")
    except Diverged as err:
        tally.diverged = str(err)
        if err.partial is not None:  # the run's time went into these steps: count them
            world = session.world_size if session is not None else env.world_size
            tally.add_diverged_epoch(err.partial, world)
    except BaseException as err:
        log.end(events.RUN_STOP, status="aborted", error=f"{type(err).__name__}: {err}")
        raise
    run_time_s = time.perf_counter() - start
    tally.close_loop(run_time_s - tally.eval_s)  # throughput is from wall time (summary.py)
    if not tally.diverged:  # a diverged run's ranks may be gone: no collective after it
        phases = tally.phases
        tally.phases = guard(lambda: mean_phases(phases, device), (0, elastic.RUN_END))
    # An elastic run's world at its end (its start's is the manifest's).
    world_size = session.world_size if session is not None else env.world_size
    if session is not None and not tally.diverged:
        session.report()
    summary = summarize(
        config,
        tally,
        run_id=args.run_id,
        benchmark=args.benchmark or config.model.name,
        division="open" if args.open_division else "closed",
        # What the run started with: an elastic run that ends with one worker ran allreduce,
        # not `local`, and its global batch moved with its workers (the summary's adaptive
        # part says where it ended).
        strategy=strategies.effective_name(config.strategy, start_world),
        world_size=world_size,
        start_world_size=start_world,
        device=device.type,
        precision=task.precision,
        run_time_s=run_time_s,
        init_time_s=init_time_s,
        adaptive=adaptive.summary() if adaptive is not None else None,
    )
    log.point(events.SUMMARY, summary.to_dict())
    if tally.diverged:
        log.end(events.RUN_STOP, status="aborted", error=tally.diverged)
    else:
        log.end(events.RUN_STOP, status=summary.status)
    if is_writer:
        write_json(args.output_dir / SUMMARY, summary.to_dict())
    log.close()
    task.close()  # no DDP reducer may outlive the process group
    if tally.diverged:
        # One line the supervisor takes as the run's reason; an exit code that fails the run.
        named = f" (with plugin {', '.join(p.name for p in plugins)})" if plugins else ""
        print(f"stackbench: {tally.diverged}{named}", flush=True)
        raise SystemExit(DIVERGED_EXIT)
    dist.shutdown()
    if session is not None:
        session.close()
    return summary if is_writer else None


def _elastic_start(
    workers: str, device_name: str, config: TrainConfig
) -> tuple[ElasticSession, dist.DistEnv]:
    """An elastic worker's group, formed (workloads/adaptive/elastic/session.py)."""
    device = torch.device("cuda" if device_name == "cuda" else "cpu")
    try:
        session = ElasticSession.open(workers, os.environ, device, config)
    except (LaunchError, ValueError) as err:
        raise SystemExit(f"workloads.train: --elastic: {err}") from None
    session.start()
    return session, dist.DistEnv(session.rank, 0, session.world_size)


def _unguarded(fn: Callable[[], T], where: tuple[int, int]) -> T:
    return fn()


def _train(
    task: tasks.Task,
    config: TrainConfig,
    device: torch.device,
    tally: RunTally,
    log: mllog.EventLog,
    start: float,
    out_of_time: Callable[[], bool],
    guard: Guard = _unguarded,
    first_epoch: int = 1,
) -> None:
    """The epochs, from `first_epoch` (a joiner's is the run's current one). `guard(fn,
    (epoch, phase))` runs the epoch's end and evaluation: in an elastic run, again on the
    re-formed group when a worker left during them."""
    last_progress = [time.perf_counter()]

    def on_step(step: int, steps: int) -> None:
        now = time.perf_counter()
        if now - last_progress[0] >= PROGRESS_INTERVAL_S:
            last_progress[0] = now
            log.point(events.PROGRESS, {"epoch": epoch, "step": step, "steps": steps})

    for epoch in range(first_epoch, config.run.max_epochs + 1):
        log.start(events.EPOCH_START, epoch_num=epoch)
        stats = task.train_epoch(epoch, out_of_time, on_step)
        watchdog.at(f"the end of epoch {epoch}")
        if stats.first_step_s is not None:
            tally.first_step_s = stats.first_step_s
        tally.add_step_times(stats.step_times_s)
        samples, tokens, train_loss = guard(
            partial(epoch_sums, stats, device), (epoch, elastic.EPOCH_END)
        )
        tally.add_epoch(stats.phases, stats.steps, samples, tokens)
        log.point(events.TRAIN_LOSS, train_loss, epoch_num=epoch)
        tally.train_losses.append(
            {"epoch": epoch, "value": train_loss, "time_s": time.perf_counter() - start}
        )
        log.point(events.EPOCH_PHASES, stats.phases, epoch_num=epoch)
        log.end(events.EPOCH_STOP, epoch_num=epoch)
        last = epoch == config.run.max_epochs or stats.out_of_time
        if epoch % config.run.eval_every_epochs == 0 or last:
            eval_t0 = time.perf_counter()
            log.start(events.EVAL_START, epoch_num=epoch)
            watchdog.at(f"epoch {epoch}, in evaluation")
            result = guard(partial(task.evaluate, epoch), (epoch, elastic.EVALUATION))
            _require_finite(result, epoch)
            # MLPerf logs every benchmark's quality metric as eval_accuracy (BLEU for its
            # translation tasks); the summary's target names the metric.
            log.point(events.EVAL_ACCURACY, result.value, epoch_num=epoch)
            log.point(events.EVAL_LOSS, result.loss, epoch_num=epoch)
            if result.details:
                log.point(events.EVAL_DETAILS, dict(result.details), epoch_num=epoch)
            log.end(events.EVAL_STOP, epoch_num=epoch)
            now = time.perf_counter()
            tally.eval_s += now - eval_t0
            tally.evals.append(
                {
                    "epoch": epoch,
                    "value": result.value,
                    "loss": result.loss,
                    "time_s": now - start,
                    **dict(result.details),
                }
            )
            met = tasks.reached(config.target_metric, result.value, config.target.target_value)
            if met and tally.time_to_target_s is None:
                tally.time_to_target_s = now - start
                log.point(events.TIME_TO_TARGET, tally.time_to_target_s, epoch_num=epoch)
                if config.run.stop_at_target:
                    return
        if stats.out_of_time or out_of_time():
            tally.out_of_time = True
            return


def _require_finite(result: tasks.Evaluation, epoch: int) -> None:
    """Diverged when an evaluation's metric or loss is not finite: damaged test data,
    activations that overflowed, or weights a gradient overflow made non-finite since the last
    pass over them (workloads/training/divergence.py). Such a result is no measurement, and the
    summary could not hold it (JSON has no NaN). Every rank has the same, all-reduced result, so
    every rank stops here."""
    bad = [f"{name} {value}" for name, value in (("metric", result.value), ("loss", result.loss))
           if not math.isfinite(value)]  # fmt: skip
    if bad:
        raise Diverged(f"diverged at epoch {epoch}, in evaluation: {', '.join(bad)}")


def _log_run_parameters(
    log: mllog.EventLog,
    config: TrainConfig,
    args: argparse.Namespace,
    env: dist.DistEnv,
    task: tasks.Task,
    env_manifest: Manifest,
) -> None:
    from workloads.telemetry import mlperf_keys

    log.point(events.SUBMISSION_BENCHMARK, args.benchmark or config.model.name)
    # Before the hyperparameters: the compliance rules check closed-division values by it.
    log.point(events.SUBMISSION_DIVISION, "open" if args.open_division else "closed")
    log.point(events.MANIFEST, env_manifest.to_dict())
    log.point(events.SEED, config.run.seed)
    meta = mlperf_keys.metadata(config)
    for key, value in mlperf_keys.hyperparameters(config, env.world_size).items():
        log.point(key, value, **meta.get(key, {}))
    log.point(events.TRAIN_SAMPLES, task.num_train)
    log.point(events.EVAL_SAMPLES, task.num_eval)
