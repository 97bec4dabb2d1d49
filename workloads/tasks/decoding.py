"""Greedy and beam search over any Seq2Seq model (workloads/models/seq2seq.py), for the
translation tasks' BLEU evaluation (4a: beam 5, 4b: beam 4, length penalty 0.6).

Both searches run a batch of sentences at once and drop a sentence's rows (model.reorder) as
soon as it is done, so a long tail costs only the sentences still in it. Outputs are token
ids without BOS and EOS, one list per sentence, in input order.

Length limit: `max_len` (an int, or one per sentence, e.g. src_lengths + 50) bounds the
tokens before EOS; a hypothesis that reaches it is ended there, with the log-probability of
EOS added, as fairseq forces EOS at its max length.

Beam search follows fairseq's sequence generator (which the MLPerf Transformer reference
runs): the beams of every sentence are rows of one flattened batch; each step keeps the
2*beam best extensions, finalises those among the first `beam` that end in EOS (score =
sum of log-probabilities including EOS's, divided by the length penalty of the length
including EOS), and continues with the best `beam` that do not. A sentence is done once it
has `beam` finished hypotheses or reaches its length limit; its answer is the finished
hypothesis with the best normalised score. Length penalties, for length L and alpha:
  "gnmt":  ((5 + L) / 6) ** alpha   (Wu et al. 2016, the GNMT reference)
  "power": L ** alpha               (fairseq's lenpen; the MLPerf Transformer reference uses "gnmt")
alpha = 0 ranks by total log-probability, which favours short outputs; larger alpha favours
longer ones. PAD and BOS are never generated. The model's train/eval mode is the caller's
to set (evaluation wants eval: no dropout).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from workloads.models.seq2seq import BOS_ID, EOS_ID, PAD_ID, Seq2Seq

PenaltyForm = Literal["gnmt", "power"]


def length_penalty_divisor(length: int, alpha: float, form: PenaltyForm) -> float:
    """What a hypothesis's total log-probability is divided by; length counts its EOS."""
    if form == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if form == "power":
        return float(length) ** alpha
    raise ValueError(f"penalty_form must be 'gnmt' or 'power', got {form!r}")


def _limits(max_len: int | Tensor, batch: int) -> list[int]:
    if isinstance(max_len, Tensor):
        if max_len.numel() != batch:
            raise ValueError(f"max_len has {max_len.numel()} entries for {batch} sentences")
        return [int(n) for n in max_len.reshape(-1).tolist()]
    return [int(max_len)] * batch


def _banned(vocab: int, pad_id: int, bos_id: int, device: torch.device) -> Tensor:
    """(V,) True at the tokens a search never emits: PAD and BOS."""
    banned = torch.zeros(vocab, dtype=torch.bool, device=device)
    banned[[pad_id, bos_id]] = True
    return banned


def _select(
    model: Seq2Seq, encoded: Any, state: Any, rows: list[int], device: torch.device
) -> tuple[Any, Any]:
    return model.reorder(encoded, state, torch.tensor(rows, dtype=torch.long, device=device))


@torch.inference_mode()
def greedy_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    max_len: int | Tensor,
) -> list[list[int]]:
    """The most likely next token at every step, until EOS or the length limit."""
    device = src.device
    limits = _limits(max_len, src.size(0))
    outputs: list[list[int]] = [[] for _ in limits]
    encoded = model.encode(src, src_lengths)
    state = model.init_state(encoded)
    alive = [s for s, limit in enumerate(limits) if limit > 0]  # the sentence of each row
    if len(alive) < len(limits):
        encoded, state = _select(model, encoded, state, alive, device)
    prev = torch.full((len(alive),), bos_id, dtype=torch.long, device=device)
    banned = None
    while alive:
        log_probs, state = model.decode_step(prev, encoded, state)
        if banned is None:
            banned = _banned(log_probs.size(-1), pad_id, bos_id, device)
        prev = log_probs.float().masked_fill(banned, float("-inf")).argmax(dim=-1)
        keep = []
        for row, (s, token) in enumerate(zip(alive, prev.tolist(), strict=True)):
            if token != eos_id:
                outputs[s].append(token)
                if len(outputs[s]) < limits[s]:
                    keep.append(row)
        if len(keep) < len(alive):
            if not keep:
                break
            encoded, state = _select(model, encoded, state, keep, device)
            prev, alive = prev[keep], [alive[row] for row in keep]
    return outputs


@torch.inference_mode()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    *,
    beam_size: int,
    length_penalty: float,
    penalty_form: PenaltyForm,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    max_len: int | Tensor,
) -> list[list[int]]:
    """The best length-normalised hypothesis of a beam search, per sentence (see the module
    docstring for the rules)."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    length_penalty_divisor(1, length_penalty, penalty_form)  # rejects an unknown form early
    device = src.device
    batch, k = src.size(0), beam_size
    limits = _limits(max_len, batch)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]

    encoded = model.encode(src, src_lengths)
    state = model.init_state(encoded)
    index = torch.arange(batch, device=device).repeat_interleave(k)
    encoded, state = model.reorder(encoded, state, index)

    alive = list(range(batch))  # sentence of each group of k rows
    # Every beam starts as BOS; only the first may extend it, or the first step would fill
    # the beam with k copies of the same hypotheses.
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0
    history = torch.empty(batch * k, 0, dtype=torch.long, device=device)
    prev = torch.full((batch * k,), bos_id, dtype=torch.long, device=device)
    banned = not_eos = None
    step = 0
    while alive:
        log_probs, state = model.decode_step(prev, encoded, state)
        vocab = log_probs.size(-1)
        if banned is None or not_eos is None:
            banned = _banned(vocab, pad_id, bos_id, device)
            not_eos = torch.arange(vocab, device=device) != eos_id
        # At its length limit a sentence's beams may only end (EOS).
        at_limit = torch.tensor([step >= limits[s] for s in alive], device=device)
        mask = banned | (at_limit.repeat_interleave(k)[:, None] & not_eos)
        log_probs = log_probs.float().masked_fill(mask, float("-inf"))

        candidates = (scores[:, :, None] + log_probs.view(-1, k, vocab)).view(-1, k * vocab)
        top, flat = candidates.topk(min(2 * k, k * vocab), dim=1)
        origin, token = flat // vocab, flat % vocab
        is_eos = token == eos_id

        # Finalise: EOS among the best k, with a finite score (the first step's empty beams
        # give -inf candidates).
        ends = is_eos[:, :k] & torch.isfinite(top[:, :k])
        divisor = length_penalty_divisor(step + 1, length_penalty, penalty_form)
        for group, j in ends.nonzero().tolist():
            s = alive[group]
            if len(finished[s]) < k:
                tokens = history[group * k + origin[group, j]].tolist()
                finished[s].append((top[group, j].item() / divisor, tokens))

        # Continue with the best k that do not end (at most k of the 2k end: one EOS per beam).
        pick = torch.sort(is_eos.to(torch.uint8), dim=1, stable=True).indices[:, :k]
        scores, origin, token = top.gather(1, pick), origin.gather(1, pick), token.gather(1, pick)
        # A sentence whose best continuation is impossible (-inf) has nowhere left to go.
        stuck = torch.isneginf(scores[:, 0]).tolist()
        done = [len(finished[s]) >= k or step >= limits[s] or stuck[g] for g, s in enumerate(alive)]
        keep = [g for g, d in enumerate(done) if not d]
        if not keep:
            break
        groups = torch.tensor(keep, device=device)
        rows = (groups[:, None] * k + origin[groups]).view(-1)
        encoded, state = model.reorder(encoded, state, rows)
        history = torch.cat((history[rows], token[groups].view(-1, 1)), dim=1)
        scores, prev = scores[groups], token[groups].view(-1)
        alive = [alive[g] for g in keep]
        step += 1

    return [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in finished]
