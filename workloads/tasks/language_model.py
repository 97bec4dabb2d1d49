"""Language modelling (task 3a): AWD-LSTM on WikiText-2, scored by validation perplexity.

As the AWD-LSTM reference (Merity et al. 2017, salesforce/awd-lstm-lm): the token stream is
cut into `batch_size` parallel streams, trained by truncated backpropagation over windows of
random length around `bptt` (95% of windows centre on bptt, 5% on bptt/2; the LR scales
with the window length), the hidden state carried across windows, gradients clipped to
`grad_clip_norm`; SGD switches to averaged SGD when validation stalls (NT-ASGD,
`asgd_nonmono`), after which evaluation scores the averaged weights.
With k workers each rank trains its own contiguous 1/k of the stream (the same length on
every rank, so every rank takes the same windows); the window lengths come from a generator
seeded by (seed, epoch), identical on every rank. Evaluation splits the validation stream the
same way and adds up the NLL, so the perplexity is over the whole stream (each share starts
from a zero hidden state, which at batch 10 and 217k tokens changes perplexity negligibly).
Not here: the reference's activation regularization (AR/TAR), which docs/benchmarks.md
does not list among the task's hyperparameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from workloads import models, strategies
from workloads.data import WIKITEXT2_SUBDIR, data_root
from workloads.data.config import WikiText2Data
from workloads.data.wikitext import load_wikitext
from workloads.models.awd_lstm.model import AWDLSTM, Hidden, detach_hidden
from workloads.optimization.sgd import Optimizer
from workloads.runtime import precision, watchdog
from workloads.strategies.base import Strategy
from workloads.tasks import Context, Evaluation, Trains, narrow
from workloads.telemetry.timing import StepTimer
from workloads.training import divergence
from workloads.training.loop import EpochStats, StepResult, timed_epoch

if TYPE_CHECKING:
    from workloads.configuration.train_config import TrainConfig
    from workloads.tasks.config import LanguageModelConfig

EVAL_BATCH_SIZE = 10  # the reference's eval_batch_size
MIN_WINDOW = 5  # the reference's floor on a window length
MAX_WINDOW_EXTRA = 40  # ...and its cap, bptt + max_seq_len_delta


@dataclass
class LanguageModelTask(Trains):
    config: TrainConfig
    rank: int
    world_size: int
    device: torch.device
    train: torch.Tensor  # [steps of tokens, batch_size]: this rank's share, batchified
    valid: torch.Tensor  # [tokens, EVAL_BATCH_SIZE]: this rank's share of validation
    strategy: Strategy | None
    optimizer: Optimizer | None
    timer: StepTimer
    precision: str
    num_train: int
    num_eval: int
    vocab_size: int
    val_losses: list[float] = field(default_factory=list)
    averaging: bool = False  # NT-ASGD has switched to averaged SGD
    updates_done: int = 0
    data_config: WikiText2Data = field(init=False)
    task_config: LanguageModelConfig = field(init=False)

    def __post_init__(self) -> None:
        self.data_config = narrow(self.config.data, WikiText2Data, "data")

    @classmethod
    def build(cls, ctx: Context, task_config: LanguageModelConfig) -> LanguageModelTask:
        """`task_config`: the run's task (LanguageModelConfig.build hands itself, so this
        module needs its class only for types)."""
        config = ctx.config
        bptt = narrow(config.data, WikiText2Data, "data").bptt
        corpus = load_wikitext(data_root(config.data.data_dir) / WIKITEXT2_SUBDIR)
        model = models.build(config.model, corpus.vocab_size).to(ctx.device)
        strategy = strategies.build(config.strategy, config.run.seed, model, ctx.clock)
        train = batchify(rank_share(corpus.train, ctx.world_size, ctx.rank), config.data.batch_size)
        valid = batchify(rank_share(corpus.valid, ctx.world_size, ctx.rank), EVAL_BATCH_SIZE)
        if len(train) < bptt + 2:
            raise ValueError(
                f"each of {ctx.world_size} ranks has {len(train)} tokens per stream, fewer than "
                f"one bptt={bptt} window; lower bptt or batch_size, or use more data"
            )
        # Checked before training: a stream of one row predicts nothing, and an evaluation of
        # no tokens would read as a diverged run (perplexity nan) after a whole epoch.
        if len(valid) < 2:
            raise ValueError(
                f"each of {ctx.world_size} ranks has {len(valid)} validation tokens per stream "
                f"(of {EVAL_BATCH_SIZE}), so nothing to score; use more validation data or "
                "fewer workers"
            )
        made = cls(
            config,
            ctx.rank,
            ctx.world_size,
            ctx.device,
            train.to(ctx.device),
            valid.to(ctx.device),
            strategy,
            config.build_optimizer(model.parameters()),
            StepTimer(ctx.clock),
            precision.resolve(config.execution.precision, config.model.task, ctx.device),
            num_train=len(corpus.train),
            num_eval=len(corpus.valid),
            vocab_size=corpus.vocab_size,
        )
        made.task_config = task_config
        return made

    def train_epoch(
        self,
        epoch: int,
        out_of_time: Callable[[], bool] | None = None,
        on_step: Callable[[int, int], None] | None = None,
    ) -> EpochStats:
        cfg, strategy = self.config, self._strategy()
        windows = bptt_windows(len(self.train), self.data_config.bptt, cfg.run.seed, epoch - 1)
        strategy.module.train()
        hidden = [self._model().init_hidden(cfg.data.batch_size, self.device)]

        def step(i: int) -> StepResult:
            start, length = windows[i]
            loss, hidden[0] = self._step(start, length, hidden[0], epoch - 1 + i / len(windows))
            return StepResult(loss, cfg.data.batch_size, length * cfg.data.batch_size)

        return timed_epoch(self.timer, epoch, len(windows), step, out_of_time, on_step)

    def _step(
        self, start: int, length: int, hidden: Hidden, epochs_done: float
    ) -> tuple[torch.Tensor, Hidden]:
        cfg, timer, strategy, optimizer = self.config, self.timer, self._strategy(), self._optim()
        timer.start()
        watchdog.at(f"epoch {int(epochs_done) + 1}, step {self.updates_done + 1}")
        x = self.train[start : start + length]
        y = self.train[start + 1 : start + 1 + length]
        hidden = detach_hidden(hidden)  # truncated backpropagation
        timer.lap("data")
        # The reference scales the LR with the window so every token weighs the same.
        lr = (
            cfg.lr_at(self.world_size, epochs_done, self.updates_done)
            * length
            / self.data_config.bptt
        )
        for group in optimizer.param_groups:
            group["lr"] = lr
        with precision.autocast(self.precision, self.device):
            logits, hidden = strategy.module(x, hidden)
        loss = F.cross_entropy(logits.float().reshape(-1, self.vocab_size), y.reshape(-1))
        timer.lap("forward")
        strategy.backward(loss, timer)
        if cfg.task.grad_clip_norm is not None:
            nn.utils.clip_grad_norm_(strategy.inner.parameters(), cfg.task.grad_clip_norm)
        optimizer.step()
        divergence.check(loss, optimizer, int(epochs_done) + 1, self.updates_done + 1)
        optimizer.zero_grad(set_to_none=True)
        timer.lap("optimizer")
        strategy.after_step(timer)
        self.updates_done += 1
        return loss.detach(), hidden

    @torch.no_grad()
    def evaluate(self, epoch: int) -> Evaluation:
        # Every rank scores its share with the same model: model averaging's ranks step on
        # their own between averagings, and would otherwise each score a different model.
        self._strategy().sync_buffers()
        model = self._model()
        model.eval()
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # nll, tokens
        with self._averaged_weights():
            hidden = model.init_hidden(EVAL_BATCH_SIZE, self.device)
            bptt = self.data_config.bptt
            for start in range(0, len(self.valid) - 1, bptt):
                length = min(bptt, len(self.valid) - 1 - start)
                x = self.valid[start : start + length]
                y = self.valid[start + 1 : start + 1 + length]
                with precision.autocast(self.precision, self.device):
                    logits, hidden = model(x, hidden)
                nll = F.cross_entropy(
                    logits.float().reshape(-1, self.vocab_size), y.reshape(-1), reduction="sum"
                )
                sums += torch.stack([nll.double(), sums.new_tensor(y.numel())])
        dist.all_reduce(sums)
        model.train()
        loss = float(sums[0] / sums[1])
        self._maybe_switch_to_asgd(loss)
        details = {"optimizer": "asgd" if self.averaging else self.config.optimizer.name}
        return Evaluation(value=perplexity(loss), loss=loss, details=details)

    def _model(self) -> AWDLSTM:
        return narrow(self._strategy().inner, AWDLSTM, "model")

    def _maybe_switch_to_asgd(self, val_loss: float) -> None:
        """NT-ASGD: every rank sees the same loss, so every rank switches together."""
        n = self.task_config.asgd_nonmono
        if n and not self.averaging and asgd_due(self.val_losses, val_loss, n):
            self.optimizer = averaged_sgd(self.config, self._strategy().inner)
            self.averaging = True
        self.val_losses.append(val_loss)

    @contextmanager
    def _averaged_weights(self) -> Iterator[None]:
        """With averaged SGD, the averaged weights stand in for the model's while scored."""
        optimizer = self._optim()
        if not self.averaging:
            yield
            return
        saved = []
        for p in self._strategy().inner.parameters():
            state = optimizer.state.get(p, {})
            if "ax" in state:
                saved.append((p, p.detach().clone()))
                p.data.copy_(state["ax"])
        # Each rank's averages are of its own iterates: under model averaging, those differ.
        self._strategy().sync_buffers()
        try:
            yield
        finally:
            for p, value in saved:
                p.data.copy_(value)


def asgd_due(previous: list[float], val_loss: float, nonmono: int) -> bool:
    """The reference's non-monotone trigger: more than `nonmono` evaluations so far, and
    `val_loss` is worse than the best of all of them but the last `nonmono`."""
    return len(previous) > nonmono and val_loss > min(previous[:-nonmono])


def averaged_sgd(config: TrainConfig, model: nn.Module) -> Optimizer:
    """The reference's switch: ASGD averaging from now on (t0=0, lambd=0), same LR and decay."""
    return torch.optim.ASGD(
        model.parameters(),
        lr=config.schedule.lr,
        t0=0,
        lambd=0.0,
        weight_decay=config.optimizer.weight_decay,
    )


def perplexity(mean_nll: float) -> float:
    return float(np.exp(min(mean_nll, 700.0)))  # exp(700) is near float64's limit


def rank_share(tokens: np.ndarray, world_size: int, rank: int) -> np.ndarray:
    """Rank `rank`'s contiguous 1/world_size of a token stream (all shares the same length)."""
    size = len(tokens) // world_size
    return tokens[rank * size : (rank + 1) * size]


def batchify(tokens: np.ndarray, batch_size: int) -> torch.Tensor:
    """[steps, batch_size]: the stream cut into batch_size parallel streams (column j holds
    the j-th consecutive part), the remainder dropped, as the reference's batchify."""
    steps = len(tokens) // batch_size
    if steps == 0:
        raise ValueError(f"{len(tokens)} tokens cannot fill one row of batch_size={batch_size}")
    data = torch.from_numpy(np.ascontiguousarray(tokens[: steps * batch_size], dtype=np.int64))
    return data.view(batch_size, steps).t().contiguous()


def bptt_windows(num_rows: int, bptt: int, seed: int, epoch: int) -> list[tuple[int, int]]:
    """(start row, length) of an epoch's windows, as the reference draws them: bptt with
    probability 0.95 else bptt/2, then normal(that, 5), at least 5 and at most bptt + 40
    (and never past the data's end: a target is the next token)."""
    rng = np.random.default_rng([seed, epoch])
    windows, start = [], 0
    while start < num_rows - 2:
        centre = bptt if rng.random() < 0.95 else bptt / 2
        length = max(MIN_WINDOW, int(rng.normal(centre, 5)))
        length = min(length, bptt + MAX_WINDOW_EXTRA, num_rows - 1 - start)
        windows.append((start, length))
        start += length
    return windows
