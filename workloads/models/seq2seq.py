"""What a translation model offers the training loop and the search (tasks 4a and 4b).

Training calls `forward` (teacher forcing: every target position at once). Evaluation runs a
search (workloads/tasks/decoding.py) that drives the model one token at a time through `encode`,
`init_state`, `decode_step` and `reorder`, so that GNMT and the Transformer share one greedy
and one beam search. What `encode` and the decoder state hold is each model's business; the
search only passes them back and asks the model to `reorder` them.

Batches: `src` is right-padded with PAD and `src_lengths` gives each row's real length;
`tgt_in` is BOS followed by the target without its last token (so position t predicts target
token t). Token ids are the suite's: PAD=0, UNK=1, BOS=2, EOS=3.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


@runtime_checkable
class Seq2Seq(Protocol):
    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) for src (B, S), src_lengths (B,), tgt_in (B, T)."""
        ...

    def encode(self, src: Tensor, src_lengths: Tensor) -> Any:
        """The encoder's output for the search, opaque to it."""
        ...

    def init_state(self, encoded: Any) -> Any:
        """The decoder state before the first step (nothing decoded yet)."""
        ...

    def decode_step(self, prev_tokens: Tensor, encoded: Any, state: Any) -> tuple[Tensor, Any]:
        """One step: prev_tokens (B,) is the last token of every row (BOS at the first step).

        Returns the next token's log-probabilities (B, V), in float32 and normalised
        (log_softmax), and the new state. Rows are independent; the step never changes
        `encoded` or `state` in place, so the search may keep the old ones.
        """
        ...

    def reorder(self, encoded: Any, state: Any, index: Tensor) -> tuple[Any, Any]:
        """`encoded` and `state` with batch rows index (LongTensor (B',)) in that order:
        repeats a row per beam, follows the beams that survive, drops finished sentences."""
        ...


def make_tgt_in(target: Tensor, bos_id: int = BOS_ID) -> Tensor:
    """tgt_in for a target batch (B, T): BOS + target[:, :-1] (the loss compares with target).

    Padding stays where it was: a row shorter than T ends in PAD in both tensors."""
    bos = target.new_full((target.size(0), 1), bos_id)
    return torch.cat((bos, target[:, :-1]), dim=1)
