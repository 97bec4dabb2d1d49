"""Greedy and beam search, checked against brute-force enumeration on hand-built models whose
next-token distributions are known, and on small real models for batching."""

import itertools
import math

import pytest
import torch
from torch import Tensor

from workloads.models.gnmt.model import GNMT
from workloads.models.seq2seq import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Seq2Seq
from workloads.models.transformer.model import Transformer
from workloads.tasks.decoding import beam_search, greedy_search, length_penalty_divisor


@pytest.fixture(autouse=True)
def one_thread():
    """The models here are tiny: a second thread only adds OpenMP hand-offs, which stall
    when the machine is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


A, B, C, D, E, F_ = 4, 5, 6, 7, 8, 9
VOCAB = 10


def chain(every: dict[int, float] | None = None, **rows: dict[int, float]) -> Tensor:
    """Next-token log-probabilities (V, V) by previous token. rows maps a previous token's
    name ("bos", "a", ...) to the probabilities it names, `every` applies to the rows not
    named (default: none named); the rest of a row's mass is spread evenly over its other
    tokens, so every sequence has a finite score."""
    names = {"bos": BOS_ID, "a": A, "b": B, "c": C, "d": D, "e": E, "f": F_}
    table = torch.empty(VOCAB, VOCAB, dtype=torch.float64)
    for prev in range(VOCAB):
        named = [n for n, t in names.items() if t == prev and n in rows]
        probs = rows[named[0]] if named else (every or {})
        table[prev] = (1 - sum(probs.values())) / (VOCAB - len(probs))
        for token, p in probs.items():
            table[prev, token] = p
    return table.log()


# Greedy takes A (0.55) and ends A B EOS (0.55 * 0.36 * 0.9 = 0.178); B EOS is 0.40 * 0.9 = 0.36.
GREEDY_TRAP = chain(
    bos={A: 0.55, B: 0.40, EOS_ID: 0.01},
    a={B: 0.36, EOS_ID: 0.30, A: 0.30},
    b={EOS_ID: 0.9},
)
# Short B EOS (0.65 * 0.9) against the long A C D E F EOS (0.3 * 0.97^5): the short one has
# the higher total, the long one the higher per-token log-probability. Everything else
# drifts into UNK and almost never ends, so no stray hypothesis fills the finished list (a
# sentence is done after `beam` finished hypotheses, as in fairseq) before the long one ends.
SHORT_OR_LONG = chain(
    every={UNK_ID: 0.99, EOS_ID: 1e-6},
    bos={B: 0.65, A: 0.30, UNK_ID: 0.04, EOS_ID: 1e-6},
    b={EOS_ID: 0.9, UNK_ID: 0.09},
    a={C: 0.97, UNK_ID: 0.02, EOS_ID: 1e-6},
    c={D: 0.97, UNK_ID: 0.02, EOS_ID: 1e-6},
    d={E: 0.97, UNK_ID: 0.02, EOS_ID: 1e-6},
    e={F_: 0.97, UNK_ID: 0.02, EOS_ID: 1e-6},
    f={EOS_ID: 0.97},
)
# Never ends by itself: EOS is almost impossible after any token.
ENDLESS = chain(every={EOS_ID: 1e-6, A: 0.5})


class MarkovToy(torch.nn.Module):
    """A Seq2Seq whose next-token distribution depends only on the previous token, through
    the table that the source's first token picks (source token 4 + i -> tables[i])."""

    def __init__(self, *tables: Tensor) -> None:
        super().__init__()
        self.tables = torch.stack(tables)
        self.steps_in_inference_mode: list[bool] = []

    def encode(self, src: Tensor, src_lengths: Tensor) -> Tensor:
        return src[:, 0] - 4

    def init_state(self, encoded: Tensor) -> None:
        return None

    def decode_step(self, prev_tokens: Tensor, encoded: Tensor, state: None) -> tuple[Tensor, None]:
        self.steps_in_inference_mode.append(torch.is_inference_mode_enabled())
        return self.tables[encoded, prev_tokens].float(), None

    def reorder(self, encoded: Tensor, state: None, index: Tensor) -> tuple[Tensor, None]:
        return encoded[index], None

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        # Teacher forcing: each position's distribution given the previous token.
        return self.tables[self.encode(src, src_lengths)[:, None], tgt_in].float()


def toy_source(*table_ids: int) -> tuple[Tensor, Tensor]:
    src = torch.tensor([[4 + i, 9, 9] for i in table_ids])
    return src, torch.full((len(table_ids),), 3)


def brute_force_best(table: Tensor, max_len: int, alpha: float, form: str) -> list[int]:
    """Best length-normalised sequence among all of up to max_len tokens (then EOS), over
    every token a search may emit (not PAD, BOS or EOS)."""
    emittable = [t for t in range(VOCAB) if t not in (PAD_ID, BOS_ID, EOS_ID)]
    logp = table.tolist()
    best, best_score = None, -math.inf
    for n in range(max_len + 1):
        for body in itertools.product(emittable, repeat=n):
            path = (BOS_ID, *body, EOS_ID)
            total = sum(logp[p][q] for p, q in itertools.pairwise(path))
            score = total / length_penalty_divisor(n + 1, alpha, form)
            if score > best_score:
                best, best_score = list(body), score
    assert best is not None
    return best


def test_beam_search_finds_the_best_sequence_where_greedy_does_not():
    model = MarkovToy(GREEDY_TRAP)
    src, lengths = toy_source(0)
    best = brute_force_best(GREEDY_TRAP, max_len=4, alpha=0.0, form="power")
    assert best == [B]
    assert greedy_search(model, src, lengths, max_len=4) == [[A, B]]
    found = beam_search(
        model, src, lengths, beam_size=2, length_penalty=0.0, penalty_form="power", max_len=4
    )
    assert found == [best]


@pytest.mark.parametrize(
    ("form", "alpha", "expected"),
    [
        # Totals: B EOS log(0.585) = -0.536 (L = 2), A C D E F EOS log(0.258) = -1.356 (L = 6).
        # power: the long one wins once 3^a > 1.356 / 0.536, alpha > 0.84
        ("power", 0.0, [B]),
        ("power", 0.6, [B]),
        ("power", 1.0, [A, C, D, E, F_]),
        # gnmt: once (11 / 7)^a > 1.356 / 0.536, alpha > 2.05
        ("gnmt", 1.0, [B]),
        ("gnmt", 3.0, [A, C, D, E, F_]),
    ],
)
def test_length_penalty_decides_between_a_short_and_a_long_hypothesis(form, alpha, expected):
    assert brute_force_best(SHORT_OR_LONG, 5, alpha, form) == expected
    src, lengths = toy_source(0)
    found = beam_search(
        MarkovToy(SHORT_OR_LONG),
        src,
        lengths,
        beam_size=2,
        length_penalty=alpha,
        penalty_form=form,
        max_len=5,
    )
    assert found == [expected]


def test_length_penalty_formulas():
    assert length_penalty_divisor(7, 0.6, "gnmt") == pytest.approx((12 / 6) ** 0.6)
    assert length_penalty_divisor(7, 0.6, "power") == pytest.approx(7**0.6)
    with pytest.raises(ValueError, match="penalty_form"):
        length_penalty_divisor(7, 0.6, "linear")  # type: ignore[arg-type]


def test_a_batch_of_toy_sentences_gets_each_ones_best_and_its_own_length_limit():
    model = MarkovToy(GREEDY_TRAP, SHORT_OR_LONG, ENDLESS)
    src, lengths = toy_source(0, 1, 2, 1)
    max_len = torch.tensor([4, 5, 3, 4])
    found = beam_search(
        model, src, lengths, beam_size=3, length_penalty=1.0, penalty_form="power", max_len=max_len
    )
    tables = [GREEDY_TRAP, SHORT_OR_LONG, ENDLESS, SHORT_OR_LONG]
    assert found == [
        brute_force_best(t, int(n), 1.0, "power") for t, n in zip(tables, max_len, strict=True)
    ]
    # The endless chain is cut at its limit; the long chain does not fit in 4 tokens.
    assert found[2] == [A, A, A] and found[3] == [B]
    assert greedy_search(model, src, lengths, max_len=max_len)[2] == [A, A, A]
    assert all(model.steps_in_inference_mode)


def test_pad_and_bos_are_never_generated():
    likes_pad = chain(bos={PAD_ID: 0.5, BOS_ID: 0.3, B: 0.1}, b={EOS_ID: 0.9})
    model = MarkovToy(likes_pad)
    src, lengths = toy_source(0)
    assert greedy_search(model, src, lengths, max_len=3) == [[B]]
    assert beam_search(
        model, src, lengths, beam_size=3, length_penalty=0.0, penalty_form="gnmt", max_len=3
    ) == [[B]]


def test_a_zero_length_limit_gives_empty_outputs():
    model = MarkovToy(ENDLESS)
    src, lengths = toy_source(0, 0)
    assert greedy_search(model, src, lengths, max_len=0) == [[], []]
    assert beam_search(
        model, src, lengths, beam_size=2, length_penalty=0.6, penalty_form="gnmt", max_len=0
    ) == [[], []]


def test_toy_model_satisfies_the_protocol():
    assert isinstance(MarkovToy(ENDLESS), Seq2Seq)


# --- real models ----------------------------------------------------------------------------


def tiny_models() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    transformer = Transformer(23, d_model=16, ffn_dim=32, num_heads=2, num_layers=2)
    gnmt = GNMT(23, hidden_dim=16, num_layers=3)
    return [transformer.eval(), gnmt.eval()]


def random_source(lengths: list[int]) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 23, (len(lengths), max(lengths)), generator=g)
    for row, n in enumerate(lengths):
        src[row, n:] = PAD_ID
    return src, torch.tensor(lengths)


@pytest.mark.parametrize("model", tiny_models(), ids=["transformer", "gnmt"])
def test_search_of_a_padded_batch_equals_one_sentence_at_a_time(model):
    src, lengths = random_source([5, 2, 7, 3])
    max_len = lengths + 4
    kwargs = {"beam_size": 3, "length_penalty": 0.6, "penalty_form": "gnmt"}
    batched = beam_search(model, src, lengths, max_len=max_len, **kwargs)
    greedy = greedy_search(model, src, lengths, max_len=max_len)
    for row, n in enumerate(lengths.tolist()):
        one, one_len = src[row : row + 1, :n], lengths[row : row + 1]
        assert beam_search(model, one, one_len, max_len=n + 4, **kwargs) == [batched[row]]
        assert greedy_search(model, one, one_len, max_len=n + 4) == [greedy[row]]
    assert all(len(out) <= n + 4 for out, n in zip(batched, lengths.tolist(), strict=True))
    assert all(BOS_ID not in out and EOS_ID not in out for out in batched + greedy)


@pytest.mark.parametrize("model", tiny_models(), ids=["transformer", "gnmt"])
@pytest.mark.parametrize(("form", "alpha"), [("gnmt", 0.6), ("power", 1.0)])
def test_beam_search_of_width_one_is_greedy_search(model, form, alpha):
    src, lengths = random_source([5, 2, 7, 3])
    greedy = greedy_search(model, src, lengths, max_len=9)
    beam = beam_search(
        model, src, lengths, beam_size=1, length_penalty=alpha, penalty_form=form, max_len=9
    )
    assert beam == greedy
    assert any(len(out) > 0 for out in greedy)


def test_beam_search_of_width_one_is_greedy_search_on_the_trap():
    model = MarkovToy(GREEDY_TRAP, SHORT_OR_LONG)
    src, lengths = toy_source(0, 1)
    beam = beam_search(
        model, src, lengths, beam_size=1, length_penalty=1.0, penalty_form="power", max_len=5
    )
    assert beam == greedy_search(model, src, lengths, max_len=5) == [[A, B], [B]]
