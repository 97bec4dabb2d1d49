"""The text tasks' quality metrics: corpus BLEU (4a, 4b) and perplexity (3a).

BLEU is sacreBLEU's corpus BLEU on detokenized text with its default 13a tokenization, the
number MLPerf and the WMT papers report; BPE-level or tokenized BLEU reads higher and is not
comparable. The signature (tokenizer, smoothing, casing, version) is kept with the score so
that a result says how it was computed. sacreBLEU is imported on first use, so that models
and the loop start without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Bleu:
    score: float  # 0-100
    signature: str  # e.g. nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0
    precisions: tuple[float, ...]  # modified 1- to 4-gram precisions, percent
    brevity_penalty: float
    hyp_len: int  # tokens in all hypotheses, after 13a tokenization
    ref_len: int


def bleu(hypotheses: list[str], references: list[str]) -> Bleu:
    """Corpus BLEU of detokenized hypotheses against one detokenized reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    from sacrebleu.metrics import BLEU

    metric = BLEU()  # 13a tokenization, exponential smoothing, mixed case: the defaults
    result = metric.corpus_score(hypotheses, [references])
    return Bleu(
        score=result.score,
        signature=str(metric.get_signature()),
        precisions=tuple(result.precisions),
        brevity_penalty=result.bp,
        hyp_len=result.sys_len,
        ref_len=result.ref_len,
    )


def perplexity(nll_sum: float, tokens: int) -> float:
    """exp(mean negative log-likelihood per token), natural log; inf where that overflows."""
    if tokens <= 0:
        raise ValueError(f"perplexity needs at least one token, got {tokens}")
    try:
        return math.exp(nll_sum / tokens)
    except OverflowError:  # mean NLL past ~709.78: a diverged model
        return math.inf
