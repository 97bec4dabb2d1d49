"""AWD-LSTM, GNMT and the Transformer: sizes at the reference configurations (built on the meta
device, no memory), regularisation, masking, and incremental decoding == teacher forcing."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.awd_lstm import (
    AWDLSTM,
    detach_hidden,
    embedding_dropout,
    locked_dropout,
)
from workloads.models.seq2seq import BOS_ID, make_tgt_in


@pytest.fixture(autouse=True)
def one_thread():
    """The models here are tiny: a second thread only adds OpenMP hand-offs, which stall
    when the machine is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # shared parameters count once


def meta_params(cls, *args, **kwargs) -> int:
    with torch.device("meta"):
        return num_params(cls(*args, **kwargs))


# --- AWD-LSTM ---------------------------------------------------------------------------


# Merity et al. 2017 report 24 M parameters on Penn Treebank (10,000 words) and 33 M on
# WikiText-2 (33,278 words). Tied: embedding V*400 + decoder bias V + LSTMs 400->1150,
# 1150->1150, 1150->400 (4*h*(in+h) + 8*h each) = V*401 + 20,211,600.
@pytest.mark.parametrize(("vocab", "expected"), [(10_000, 24_221_600), (33_278, 33_556_078)])
def test_awd_lstm_has_the_papers_parameter_count(vocab, expected):
    assert meta_params(AWDLSTM, vocab) == expected


def test_awd_lstm_ties_the_decoder_to_the_embedding_and_narrows_the_last_layer():
    tied = AWDLSTM(50, embed_dim=8, hidden_dim=12)
    untied = AWDLSTM(50, embed_dim=8, hidden_dim=12, tie_weights=False)
    assert tied.decoder.weight is tied.embedding.weight
    assert [layer.hidden_size for layer in tied.layers] == [12, 12, 8]
    assert [layer.hidden_size for layer in untied.layers] == [12, 12, 12]
    logits, hidden = tied(torch.randint(0, 50, (7, 3)), tied.init_hidden(3, "cpu"))
    assert logits.shape == (7, 3, 50)
    assert [h.shape for h, _ in hidden] == [(1, 3, 12), (1, 3, 12), (1, 3, 8)]


def test_awd_lstm_in_eval_mode_is_the_model_with_every_dropout_off():
    torch.manual_seed(0)
    model = AWDLSTM(30, embed_dim=8, hidden_dim=12)
    plain = AWDLSTM(30, 8, 12, 3, 0.0, 0.0, 0.0, 0.0, 0.0)
    plain.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 30, (6, 4))
    hidden = model.init_hidden(4, "cpu")
    model.eval()
    expected = plain.train()(tokens, hidden)[0]
    assert torch.equal(model(tokens, hidden)[0], expected)
    model.train()
    assert not torch.allclose(model(tokens, hidden)[0], expected)


@pytest.mark.parametrize(
    "rate", ["dropout", "dropout_hidden", "dropout_input", "dropout_embedding", "weight_drop"]
)
def test_each_awd_lstm_dropout_acts_in_training_only(rate):
    torch.manual_seed(0)
    rates = dict.fromkeys(
        ["dropout", "dropout_hidden", "dropout_input", "dropout_embedding", "weight_drop"], 0.0
    )
    model = AWDLSTM(30, embed_dim=8, hidden_dim=12, **{**rates, rate: 0.5})
    tokens = torch.randint(0, 30, (6, 4))
    hidden = model.init_hidden(4, "cpu")
    trained = model(tokens, hidden)[0]
    model.eval()
    assert not torch.allclose(trained, model(tokens, hidden)[0])


def test_weight_drop_uses_one_dropped_hidden_matrix_for_every_step_and_keeps_the_weights():
    torch.manual_seed(0)
    model = AWDLSTM(30, 8, 12, 1, 0.0, 0.0, 0.0, 0.0, weight_drop=0.5, tie_weights=False)
    layer = model.layers[0]
    weight = layer.lstm.weight_hh_l0.detach().clone()
    x, hx = torch.randn(9, 2, 8), (torch.zeros(1, 2, 12), torch.zeros(1, 2, 12))

    torch.manual_seed(1)
    out, _ = layer(x, hx)
    torch.manual_seed(1)  # replay the one draw the layer makes: its DropConnect mask
    dropped = F.dropout(weight, 0.5, training=True)
    reference = nn.LSTM(8, 12)
    reference.load_state_dict(layer.lstm.state_dict())
    with torch.no_grad():
        reference.weight_hh_l0.copy_(dropped)
    assert torch.allclose(out, reference(x, hx)[0], atol=1e-6)
    assert torch.equal(layer.lstm.weight_hh_l0, weight)  # the parameter itself untouched

    out.sum().backward()
    grad = layer.lstm.weight_hh_l0.grad
    assert torch.equal(grad == 0, dropped == 0)  # dropped connections get no gradient


def test_locked_dropout_keeps_one_mask_across_time():
    x = torch.ones(20, 3, 50)
    out = locked_dropout(x, 0.5, training=True)
    assert torch.equal(out, out[:1].expand_as(out))
    assert set(out.unique().tolist()) == {0.0, 2.0}
    assert locked_dropout(x, 0.5, training=False) is x


def test_embedding_dropout_drops_whole_words_and_rescales_the_rest():
    torch.manual_seed(0)
    embed = nn.Embedding(40, 6)
    tokens = torch.arange(40).repeat(5, 1)  # every word 5 times
    out = embedding_dropout(embed, tokens, 0.5, training=True)
    dropped = (out == 0).all(dim=-1)  # (5, 40)
    assert torch.equal(dropped, dropped[:1].expand_as(dropped))  # a word is dropped everywhere
    assert 5 < dropped[0].sum() < 35
    kept = ~dropped[0]
    assert torch.allclose(out[0, kept], 2 * embed.weight[kept])


def test_detach_hidden_cuts_the_graph_and_keeps_the_values():
    model = AWDLSTM(30, 8, 12)
    _, hidden = model(torch.randint(0, 30, (5, 2)), model.init_hidden(2, "cpu"))
    assert hidden[0][0].grad_fn is not None
    detached = detach_hidden(hidden)
    for (h, c), (h0, c0) in zip(detached, hidden, strict=True):
        assert h.grad_fn is None and c.grad_fn is None
        assert torch.equal(h, h0) and torch.equal(c, c0)


# --- shared protocol ----------------------------------------------------------------------


def test_make_tgt_in_shifts_the_target_right_behind_bos():
    target = torch.tensor([[5, 6, 3], [7, 3, 0]])
    assert make_tgt_in(target).tolist() == [[BOS_ID, 5, 6], [BOS_ID, 7, 3]]
