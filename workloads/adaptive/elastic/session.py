"""An elastic worker inside a training run (`python -m workloads.train --elastic MIN:MAX`):
its group for the whole run, and what happens to the run when a worker leaves or joins.

    session = ElasticSession.open("2:3", os.environ, device)   # launch.py: where the group is
    session.start()                   # a generation formed: rank and world_size are known
    ...build the adaptive run (with session.policy()) and the task...
    session.bind(adaptive)            # what a change re-forms (the trainer, the knobs)
    session.before_step(step, lr)     # the step's decisions; admits waiting joiners
    session.guard(step)               # a step; after a departure, taken again on the new group
    session.report()                  # one line: where this worker ended, a digest of its weights
    session.close()

Leaving: when a step's collective fails because a worker left, the survivors re-form the
group (group.recover), every survivor adopts the state of the one that had completed the
most steps (model, optimizer, step count, sampler cursor, the policies' knobs: transfer.py),
the trainer is rebuilt on the new group (its strategy's exchange spans the new world), and
the change is a Decision of knob `workers` (old -> new, "w2 left") like every policy's, so it
is an event and counts in the summary. Fewer than MIN left: TooFewWorkers, and the run fails.

Joining: a worker that registers after the start waits to be admitted (group.start). At the
next decision point rank 0's ElasticPolicy sees it waiting and proposes `workers: W -> W+1`;
every member takes the agreed decision in that step's before_step, forms the grown group
(group.grow) and rank 0 broadcasts its state. The joiner receives that state as soon as it
is admitted, before it builds its task (so its strategy's construction pairs with the
members' rebuild), loads it once bound, and enters the epoch loop in the middle of that
step: its first before_step is skipped, since the members took that step's decisions.

The time budget (`--set time_budget_s`): the writer's clock, which started the run, decides.
Every BUDGET_CHECK_EVERY_STEPS steps of the run (its step count, which every worker shares:
a change hands it over with the state), before the step's other decisions, rank 0 broadcasts
whether the budget is spent; every worker then takes that step and stops after it, so all
stop after the same step, whoever joined or left. The check is taken afresh when a departure
makes the step be taken again, and a joiner, admitted after it in the same before_step,
skips it with the step's other decisions. Once spent, no joiner is admitted.

The writer: the worker that is rank 0 at the start (the first of the starting members by
name: w0 locally, <job>-worker-0 on Kubernetes, the store's host there) writes the run's
events and summary; a change keeps it rank 0 (membership keeps the old order and appends
joiners), and its departure ends the run (WriterLeft): the survivors cannot finish a record
they do not hold.
Not here: the group's mechanism (group.py), where the group is (launch.py).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import traceback
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from workloads import strategies
from workloads.adaptive import training
from workloads.adaptive.elastic.group import (
    Change,
    ElasticConfig,
    ElasticGroup,
    ElasticPolicy,
    FormingFailed,
)
from workloads.adaptive.elastic.launch import ElasticLaunch
from workloads.adaptive.elastic.membership import MembershipError
from workloads.adaptive.elastic.transfer import broadcast_state
from workloads.adaptive.policy import Decision
from workloads.adaptive.run import Adaptive
from workloads.adaptive.sampler import Cursor
from workloads.adaptive.sync import AdaptiveSyncStrategy
from workloads.configuration.train_config import TrainConfig
from workloads.strategies.averaging import ModelAveragingStrategy
from workloads.strategies.base import Strategy
from workloads.training.loop import BUDGET_CHECK_EVERY_STEPS, agreed_flag

T = TypeVar("T")
KNOB = "workers"
# Where in the run a guarded collective is (guard's `where`: (epoch, phase)). Survivors must
# take up the run at the same point; a kill can leave them a collective apart, and then only
# the step loop can line them up (the one behind adopts the state of the one ahead).
STEPS, EPOCH_END, EVALUATION, RUN_END = range(4)


class WriterLeft(MembershipError):
    """The worker that writes the run's record left: the run cannot finish its record."""


class ElasticSession:
    def __init__(self, launch: ElasticLaunch, config: ElasticConfig, device: torch.device):
        self.launch, self.device = launch, device
        self._store = launch.host_store()  # hosted by this worker (a PyTorchJob's worker 0)
        backend = "nccl" if device.type == "cuda" else "gloo"
        self.group = ElasticGroup(launch.connector(), launch.member, config, backend, launch.signer)
        self.writer = ""
        self._run: Adaptive | None = None
        self._entry: dict[str, Any] | None = None  # a joiner's state, until bound
        self._entering = False  # a joiner's first step: the members decided it already
        self.joined = False  # this worker joined a running run (rather than starting it)
        # The time budget is spent: agreed at a check (before_step), the same on every worker.
        self.out_of_time = False

    @classmethod
    def open(
        cls, workers: str, environ: Mapping[str, str], device: torch.device, run: TrainConfig
    ) -> ElasticSession:
        """The run's heartbeat and `dead_after_s` (--set), its collective timeout (a hung
        peer is found after it)."""
        launch = ElasticLaunch.parse(workers, environ)
        config = ElasticConfig(
            launch.min_workers, launch.max_workers, heartbeat_s=run.adaptive.heartbeat_s,
            dead_after_s=run.adaptive.dead_after_s, pg_timeout_s=run.run.dist_timeout_s,
        )  # fmt: skip
        return cls(launch, config, device)

    @property
    def rank(self) -> int:
        return self.group.rank

    @property
    def world_size(self) -> int:
        return self.group.world_size

    def start(self) -> None:
        """Form generation 0 with the first workers to register, or wait to be admitted to
        the running group and receive its state (the process group is up either way)."""
        try:
            change = self.group.start(self.launch.initial_workers)
        except FormingFailed as err:  # nothing to recover yet: the run has not begun
            raise MembershipError(f"{err}; a worker lost while the group forms fails the "
                                  "run (or the join)") from None  # fmt: skip
        self.writer = change.current.members[0]
        if change.current.number > 0:
            self._entry = broadcast_state(None, change.source_rank, self.device)
            self._entering = self.joined = True
            print(f"elastic: {self.launch.member} admitted as rank {self.rank} of "
                  f"{self.world_size} at step {change.current.step}", flush=True)  # fmt: skip

    def policy(self) -> ElasticPolicy:
        """The `workers` knob's policy: admits waiting joiners at decision points."""
        return ElasticPolicy(self._joiners_to_admit, self.launch.max_workers)

    def _joiners_to_admit(self) -> int:
        """Waiting joiners, none once the budget is spent (the run stops after this step)."""
        return 0 if self.out_of_time else self.group.pending_joiners()

    def expired(self) -> bool:
        """Whether the run's time budget is spent, as the last check agreed (no collective:
        the training loop and training/run.py read it between steps and at an epoch's end)."""
        return self.out_of_time

    def bind(self, run: Adaptive) -> None:
        """The run whose trainer and knobs a change re-forms (the task has built its trainer);
        a joiner takes the state it received."""
        self._run = run
        if self._entry is not None:
            _load(run, self._entry)
            _restore_sync(run, run.trainer.strategy, self._entry)
            self._entry = None

    def before_step(self, step: int, lr: float) -> list[Decision]:
        """The step's decisions (the controller's); a change of `workers` admits the waiting
        joiners now. A joiner's first step has none: its members took them before admitting it."""
        run = self._bound()
        if self._entering:
            self._entering = False
            return []
        self._check_budget(run, step)  # before a change: a joiner admitted now skips it
        decisions = run.controller.before_step(step, lr)
        for decision in decisions:
            if decision.knob == KNOB:
                try:
                    self._grow(run, int(decision.new), step)
                except BaseException:
                    # Taken and counted already: on record before the departure that undoes
                    # it (a joiner that died waiting), which the recovery records next.
                    run.record_decisions(decisions)
                    raise
        return decisions

    def _check_budget(self, run: Adaptive, step: int) -> None:
        """At every check step, rank 0's clock (the writer's, started with the run) says
        whether the budget is spent, for every worker. Taken again, even when this worker
        already saw it spent, when a departure makes the step be taken again: a survivor
        that missed the broadcast takes it then, and the collectives pair up."""
        budget_s = run.config.run.time_budget_s
        if budget_s is None or step % BUDGET_CHECK_EVERY_STEPS != 0:
            return
        spent = run.seconds_since_start() >= budget_s
        self.out_of_time = agreed_flag(spent, self.device)

    def _grow(self, run: Adaptive, world_size: int, step: int) -> None:
        change = self.group.grow(world_size, step)
        print(f"elastic: {change.reason}: going on with {change.current.world_size} "
              f"workers from step {step}", flush=True)  # fmt: skip
        self._adopt(run, change)

    def report(self) -> None:
        """One line in this worker's log: where it ended and a digest of its weights (every
        worker of a run must print the same one)."""
        run = self._bound()
        digest = hashlib.sha256()
        for name, tensor in run.trainer.strategy.inner.named_parameters():
            digest.update(name.encode())
            raw = tensor.detach().cpu().contiguous().view(-1).view(torch.uint8)
            digest.update(raw.numpy().tobytes())
        where = f"ended at step {run.steps_done} with {self.world_size} workers"
        print(f"elastic: {self.launch.member} {where}; weights sha256 {digest.hexdigest()}",
              flush=True)  # fmt: skip

    def guard(self, fn: Callable[[], T], where: tuple[int, int]) -> T:
        """`fn()`; when a collective in it fails because a worker left, again on the
        re-formed group, from the adopted state. `where`: (epoch, phase) of the run, the
        same on every rank at this call (STEPS, EPOCH_END, EVALUATION, RUN_END)."""
        while True:
            try:
                return fn()
            except MembershipError:
                raise
            except RuntimeError as err:  # gloo raises as soon as a peer's connection closes
                self._recover_until_formed(err, where)

    def _recover_until_formed(self, error: RuntimeError, where: tuple[int, int]) -> None:
        """`recover`, again for as long as another worker leaves while the survivors check
        their point of the run and take the source's state (those collectives fail then):
        the run goes on while MIN are left, however close together they left."""
        while True:
            try:
                self.recover(error, where)
                return
            except MembershipError:
                raise
            except RuntimeError as err:
                if err is error:  # nobody left: the failure was not a departure
                    raise
                error = err

    def recover(self, error: RuntimeError, where: tuple[int, int]) -> None:
        """Re-form the group without the workers that left, check that the survivors are at
        the same point of the run, record the change, adopt the source's state. Raises
        `error` again when nobody left, TooFewWorkers below MIN, WriterLeft, MembershipError
        when the survivors were at different points."""
        run = self._bound()
        traceback.clear_frames(error.__traceback__)  # frames may hold the old group's work
        gc.collect()
        change = self.group.recover(run.steps_done, error)
        if self.writer in change.departed:
            self.group.end()
            raise WriterLeft(
                f"worker {self.writer}, which writes the run's record, left "
                f"({change.reason}); the run cannot go on without it"
            )
        # Recorded at once: if another worker leaves during what follows, the next change
        # starts from this one.
        decision = run.controller.record(
            "elastic", KNOB, change.current.world_size, change.current.step, change.reason
        )
        run.record_decisions([decision])
        _agree_on(where, self.device)
        print(f"elastic: {change.reason}: going on with {change.current.world_size} workers "
              f"from step {change.current.step}", flush=True)  # fmt: skip
        self._adopt(run, change)

    def close(self) -> None:
        self.group.close()

    def _adopt(self, run: Adaptive, change: Change) -> None:
        """Every member takes the source's state, then a trainer on the new group."""
        tr = run.trainer
        got = broadcast_state(_state(run), change.source_rank, self.device)
        _load(run, got)
        model = tr.strategy.inner
        strategy = strategies.build(
            tr.config.strategy, tr.config.run.seed, model, tr.timer.clock, monitor=run.monitor
        )
        _restore_sync(run, strategy, got)
        rebuilt = dataclasses.replace(
            tr, rank=dist.get_rank(), world_size=dist.get_world_size(), strategy=strategy
        )
        training.attach(run, rebuilt)

    def _bound(self) -> Adaptive:
        if self._run is None:
            raise MembershipError("a worker left before the run's training began")
        return self._run


def _state(run: Adaptive) -> dict[str, Any]:
    """What a worker hands over: everything a step depends on besides the data."""
    tr = run.trainer
    return {
        "model": tr.strategy.inner.state_dict(),
        "optimizer": tr.optimizer.state_dict(),
        "steps_done": run.steps_done,
        "cursor": [run.cursor.epoch, run.cursor.consumed],
        "knobs": dict(run.controller.values),
        "last_change": dict(run.controller.last_change),
        "local_steps": getattr(tr.strategy, "local_steps", 0),
    }


def _load(run: Adaptive, got: Mapping[str, Any]) -> None:
    tr = run.trainer
    tr.strategy.inner.load_state_dict(got["model"])
    tr.optimizer.load_state_dict(got["optimizer"])
    run.steps_done, run.cursor = int(got["steps_done"]), Cursor(*got["cursor"])
    run.controller.values.update(got["knobs"])
    run.controller.last_change.update(got["last_change"])


def _restore_sync(run: Adaptive, strategy: Strategy, got: Mapping[str, Any]) -> None:
    """Where the rebuilt strategy's schedule stands: the run's, not a fresh one's."""
    if isinstance(strategy, AdaptiveSyncStrategy):
        strategy.restore(training.sync_state(run), int(got["local_steps"]))
    elif isinstance(strategy, ModelAveragingStrategy):
        strategy.resume(run.steps_done)  # else its warm-up would start again


def _agree_on(where: tuple[int, int], device: torch.device) -> None:
    """MembershipError unless every survivor is at `where` (one collective: max of +/-)."""
    epoch, phase = where
    code = epoch * 8 + phase
    seen = torch.tensor([code, -code], dtype=torch.int64, device=device)
    dist.all_reduce(seen, op=dist.ReduceOp.MAX)
    if int(seen[0]) != -int(seen[1]):
        raise MembershipError(
            "the survivors were at different points of the run when a worker left (a step "
            "apart at an epoch's end); the run cannot go on"
        )
