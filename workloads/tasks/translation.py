"""Translation (tasks 4a GNMT on WMT16, 4b Transformer on WMT17 en-de), scored by sacreBLEU.

Training batches are cut by length (workloads/data/token_batching.py): per device at most
`batch_size` padded tokens (or sentences, for GNMT), and an optimizer update accumulates
rounds of one batch per rank until the update holds `global_batch` units, so the global batch
is the spec's whatever the number of workers. Every rank derives the same plan from the seed,
so nothing is communicated to agree on it; all micro-batches but an update's last run under
the strategy's no_sync(). The loss is label-smoothed cross-entropy summed over real target
tokens and normalised by the update's units over all ranks, so the averaged gradient is the
gradient of the update's mean loss however its units fell on the ranks.

Evaluation translates the test split (newstest2014) with beam search (greedy at beam 1),
each rank a disjoint share, detokenizes with the subword model, and scores the whole corpus
with sacreBLEU against the raw reference lines; the BLEU signature is recorded with the score.
It also reports the teacher-forced NLL per target token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from contract import files
from workloads import models, strategies
from workloads.data import data_root, translation_cache_dir
from workloads.data import translation as corpus
from workloads.data.config import WmtData
from workloads.data.subword import SubwordTokenizer
from workloads.data.token_batching import Unit, batch_units, length_batches, plan_updates
from workloads.models.seq2seq import Seq2Seq
from workloads.optimization.sgd import Optimizer
from workloads.runtime import precision, watchdog
from workloads.strategies.base import Strategy
from workloads.tasks import Context, Evaluation, Trains, decoding, narrow, textmetrics
from workloads.telemetry.timing import StepTimer
from workloads.training import divergence
from workloads.training.loop import EpochStats, StepResult, timed_epoch

if TYPE_CHECKING:
    from workloads.configuration.train_config import TrainConfig
    from workloads.tasks.config import TranslationConfig

EVAL_SENTENCES = 128  # sentences per evaluation batch (sorted by length, so little padding)
# Each evaluation's detokenized translations of the test split, one a line in its order, in
# <run dir>/translations/epoch-N.txt.
TRANSLATIONS_SUBDIR = "translations"


@dataclass
class TranslationTask(Trains):
    config: TrainConfig
    rank: int
    world_size: int
    device: torch.device
    train: corpus.ParallelSplit
    train_ids: np.ndarray  # the training pairs used (within max_seq_len)
    test: corpus.ParallelSplit
    references: list[str]
    tokenizer: SubwordTokenizer
    strategy: Strategy | None
    optimizer: Optimizer | None
    timer: StepTimer
    precision: str
    output_dir: Path | None = None  # where rank 0 keeps each evaluation's translations
    updates_done: int = 0
    num_train: int = field(init=False)
    num_eval: int = field(init=False)
    data_config: WmtData = field(init=False)
    task_config: TranslationConfig = field(init=False)

    def __post_init__(self) -> None:
        self.data_config = narrow(self.config.data, WmtData, "data")
        self.num_train = len(self.train_ids)
        self.num_eval = self.test.num_sentences

    @classmethod
    def build(cls, ctx: Context, task_config: TranslationConfig) -> TranslationTask:
        """`task_config`: the run's task (TranslationConfig.build hands itself, so this
        module needs its class only for types)."""
        config = ctx.config
        data = config.data
        cache = translation_cache_dir(data_root(data.data_dir), data.name)
        tokenizer = corpus.tokenizer(cache, dataset=data.name)
        train = corpus.load_parallel(cache, "train", dataset=data.name)
        test = corpus.load_parallel(cache, "test", dataset=data.name)
        references = corpus.load_references(cache, "test", dataset=data.name)
        train_ids = trainable_pairs(train, narrow(data, WmtData, "data").max_seq_len)
        model = models.build(config.model, tokenizer.vocab_size).to(ctx.device)
        strategy = strategies.build(config.strategy, config.run.seed, model, ctx.clock)
        made = cls(
            config,
            ctx.rank,
            ctx.world_size,
            ctx.device,
            train,
            train_ids,
            test,
            references,
            tokenizer,
            strategy,
            config.build_optimizer(model.parameters()),
            StepTimer(ctx.clock),
            precision.resolve(config.execution.precision, config.model.task, ctx.device),
            ctx.output_dir,
        )
        made.task_config = task_config
        return made

    def train_epoch(
        self,
        epoch: int,
        out_of_time: Callable[[], bool] | None = None,
        on_step: Callable[[int, int], None] | None = None,
    ) -> EpochStats:
        cfg, data = self.config, self.data_config
        unit: Unit = "tokens" if data.batch_unit == "tokens" else "sentences"
        src_lengths = self.train.src_lengths[self.train_ids]
        tgt_lengths = self.train.tgt_lengths[self.train_ids]
        batches = length_batches(
            src_lengths, tgt_lengths, data.batch_size, unit, seed=cfg.run.seed, epoch=epoch - 1
        )
        units = batch_units(batches, src_lengths, tgt_lengths, unit)
        updates = plan_updates(units, self.world_size, data.global_batch)
        if not updates:
            raise ValueError(
                f"one epoch of {len(self.train_ids)} training pairs holds no complete update of "
                f"global_batch={data.global_batch} {data.batch_unit} over {self.world_size} "
                "workers; lower global_batch or use more data"
            )
        strategy = self._strategy()
        strategy.module.train()

        def step(i: int) -> StepResult:
            update = updates[i]
            rounds = [self.train_ids[batches[r[self.rank]]] for r in update.rounds]
            return self._update(rounds, update.units, epoch - 1 + i / len(updates))

        return timed_epoch(self.timer, epoch, len(updates), step, out_of_time, on_step)

    def _update(self, rounds: list[np.ndarray], units: int, epochs_done: float) -> StepResult:
        """One optimizer update over this rank's micro-batches `rounds` (pair ids)."""
        cfg, timer, strategy, optimizer = self.config, self.timer, self._strategy(), self._optim()
        timer.start()
        watchdog.at(f"epoch {int(epochs_done) + 1}, step {self.updates_done + 1}")
        lr = cfg.lr_at(self.world_size, epochs_done, self.updates_done)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=self.device)
        tokens = sentences = 0
        for j, pairs in enumerate(rounds):
            src, src_len, tgt_in, tgt_out = self._batch(self.train, pairs)
            timer.lap("data")
            last = j == len(rounds) - 1
            with contextlib.nullcontext() if last else strategy.no_sync():
                with precision.autocast(self.precision, self.device):
                    logits = strategy.module(src, src_len, tgt_in)
                smoothed, nll, count = label_smoothed_loss(
                    logits, tgt_out, self.task_config.label_smoothing, self.tokenizer.pad_id
                )
                # Each rank's part of the update's mean: the strategies average over ranks.
                scaled = smoothed * (self.world_size / units)
                timer.lap("forward")
                strategy.backward(scaled, timer)
            loss_sum += nll.detach()
            tokens += count
            sentences += len(pairs)
        if cfg.task.grad_clip_norm is not None:
            nn.utils.clip_grad_norm_(strategy.inner.parameters(), cfg.task.grad_clip_norm)
        optimizer.step()
        divergence.check(loss_sum, optimizer, int(epochs_done) + 1, self.updates_done + 1)
        optimizer.zero_grad(set_to_none=True)
        timer.lap("optimizer")
        strategy.after_step(timer)
        self.updates_done += 1
        return StepResult(loss_sum / max(1, tokens), sentences, tokens)

    def _batch(
        self, split: corpus.ParallelSplit, pairs: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(source, source lengths, decoder input, decoder target) on the device: the target
        ends with EOS, the decoder input is BOS followed by the target without its last."""
        src, src_len, tgt, _ = split.padded(pairs, self.tokenizer.pad_id)
        tgt_out = torch.from_numpy(tgt).to(self.device)
        bos = torch.full_like(tgt_out[:, :1], self.tokenizer.bos_id)
        tgt_in = torch.cat([bos, tgt_out[:, :-1]], dim=1)
        # A padded position's input is PAD or EOS; its output is PAD and carries no loss.
        tgt_in = tgt_in.masked_fill(tgt_out == self.tokenizer.pad_id, self.tokenizer.pad_id)
        return (
            torch.from_numpy(src).to(self.device),
            torch.from_numpy(src_len).to(self.device),
            tgt_in,
            tgt_out,
        )

    @torch.no_grad()
    def evaluate(self, epoch: int) -> Evaluation:
        task, strategy = self.task_config, self._strategy()
        strategy.sync_buffers()
        model = strategy.inner
        if not isinstance(model, Seq2Seq):  # narrow() takes concrete classes, not a Protocol
            raise TypeError(f"model: expected a Seq2Seq, got a {type(model).__name__}")
        model.eval()
        mine = eval_order(self.test.src_lengths, self.world_size, self.rank)
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # nll, tokens
        translated: list[tuple[int, str]] = []
        for start in range(0, len(mine), EVAL_SENTENCES):
            pairs = mine[start : start + EVAL_SENTENCES]
            src, src_len, tgt_in, tgt_out = self._batch(self.test, pairs)
            with precision.autocast(self.precision, self.device):
                logits = model(src, src_len, tgt_in)
                _, nll, count = label_smoothed_loss(logits, tgt_out, 0.0, self.tokenizer.pad_id)
                outputs = self._search(model, src, src_len)
            sums += torch.stack([nll.double(), sums.new_tensor(count)])
            translated += zip(pairs.tolist(), map(self.tokenizer.decode, outputs), strict=True)
        dist.all_reduce(sums)
        everyone: list[list[tuple[int, str]] | None] = [None] * self.world_size
        dist.all_gather_object(everyone, translated)
        hypotheses = dict(pair for part in everyone for pair in part or [])
        # Every rank scores the same corpus, so the result is identical without a broadcast.
        ordered = [hypotheses[i] for i in range(self.test.num_sentences)]
        bleu = textmetrics.bleu(ordered, self.references)
        if self.output_dir is not None:  # what was scored, to read or rescore
            translations = self.output_dir / TRANSLATIONS_SUBDIR
            translations.mkdir(exist_ok=True)
            files.write_text(
                translations / f"epoch-{epoch}.txt", "".join(h + "\n" for h in ordered)
            )
        model.train()
        details = {"bleu_signature": bleu.signature, "beam_size": task.beam_size}
        return Evaluation(value=bleu.score, loss=float(sums[0] / sums[1]), details=details)

    def _search(self, model: Seq2Seq, src: torch.Tensor, src_len: torch.Tensor) -> list[list[int]]:
        task, tok = self.task_config, self.tokenizer
        max_len = src_len + task.decode_extra_len
        if task.beam_size == 1:
            return decoding.greedy_search(
                model, src, src_len, bos_id=tok.bos_id, eos_id=tok.eos_id, max_len=max_len
            )
        return decoding.beam_search(
            model,
            src,
            src_len,
            beam_size=task.beam_size,
            length_penalty=task.length_penalty,
            penalty_form=task.length_penalty_form,
            bos_id=tok.bos_id,
            eos_id=tok.eos_id,
            max_len=max_len,
        )


def trainable_pairs(split: corpus.ParallelSplit, max_seq_len: int | None) -> np.ndarray:
    """Ids of the training pairs whose both sides fit in max_seq_len tokens (all if None)."""
    ids = np.arange(split.num_sentences)
    if max_seq_len is None:
        return ids
    fits = np.maximum(split.src_lengths, split.tgt_lengths) <= max_seq_len
    if not fits.any():
        raise ValueError(f"no training pair is within max_seq_len={max_seq_len} tokens")
    return ids[fits]


def eval_order(src_lengths: np.ndarray, world_size: int, rank: int) -> np.ndarray:
    """This rank's test sentences: every world_size-th of the length-sorted order, so the
    shares are disjoint, cover the split and cost about the same to translate."""
    return np.argsort(src_lengths, kind="stable")[rank::world_size]


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(label-smoothed loss sum, NLL sum, target tokens) over the non-padding positions, in
    fp32 whatever the logits' precision; smoothing spreads epsilon uniformly over the
    vocabulary (fairseq's label_smoothed_cross_entropy, the MLPerf references' loss)."""
    lprobs = F.log_softmax(logits.float(), dim=-1)
    keep = target != pad_id
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[keep].sum()
    if epsilon == 0.0:
        return nll, nll, int(keep.sum())
    smooth = -lprobs.mean(dim=-1)[keep].sum()
    return (1.0 - epsilon) * nll + epsilon * smooth, nll, int(keep.sum())
