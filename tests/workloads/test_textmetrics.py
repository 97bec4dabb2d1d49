import math

import pytest

from workloads.tasks.textmetrics import Bleu, bleu, perplexity


def test_identical_text_scores_100_and_records_how_it_was_computed():
    refs = ["The cat sat on the mat.", "A dog ran away, fast!"]
    result = bleu(refs, refs)
    assert isinstance(result, Bleu)
    assert result.score == pytest.approx(100.0)
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.")


def test_corpus_bleu_pools_ngram_counts_over_sentences_as_the_formula_says():
    hyps = ["the cat sat on the mat today", "a dog ran"]
    refs = ["the cat sat on the mat", "a dog ran away fast"]
    # Matched / total n-grams, summed over both sentences (n = 1..4):
    #   1: (6 + 3) / (7 + 3), 2: (5 + 2) / (6 + 2), 3: (4 + 1) / (5 + 1), 4: (3 + 0) / (4 + 0)
    # Hypotheses 10 tokens, references 11: brevity penalty exp(1 - 11/10).
    precisions = [9 / 10, 7 / 8, 5 / 6, 3 / 4]
    expected = 100 * math.exp(1 - 11 / 10) * math.prod(precisions) ** (1 / 4)
    result = bleu(hyps, refs)
    assert result.score == pytest.approx(expected, abs=1e-9)  # 75.79...
    assert result.precisions == pytest.approx(tuple(100 * p for p in precisions))
    assert result.brevity_penalty == pytest.approx(math.exp(-0.1))
    assert (result.hyp_len, result.ref_len) == (10, 11)


def test_bleu_tokenizes_detokenized_text_with_13a():
    # 13a splits punctuation off: detokenized and tokenized spellings match exactly.
    assert bleu(["Hello, world!"], ["Hello , world !"]).score == pytest.approx(100.0)
    # Case matters (case:mixed).
    assert bleu(["hello , world !"], ["Hello , world !"]).score < 100.0


def test_bleu_needs_one_reference_per_hypothesis():
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        bleu(["a", "b"], ["a"])


def test_perplexity_of_a_uniform_distribution_is_the_vocabulary_size():
    vocab, tokens = 33_278, 1000
    assert perplexity(tokens * math.log(vocab), tokens) == pytest.approx(vocab)
    assert perplexity(0.0, 5) == 1.0


def test_perplexity_overflows_to_inf_and_needs_tokens():
    assert perplexity(1e6, 10) == math.inf  # exp(1e5) does not fit in a float
    with pytest.raises(ValueError, match="at least one token"):
        perplexity(1.0, 0)
