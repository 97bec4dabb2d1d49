"""AWD-LSTM, GNMT and the Transformer: sizes at the reference configurations (built on the meta
device, no memory), regularisation, masking, and incremental decoding == teacher forcing."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.awd_lstm.model import (
    AWDLSTM,
    detach_hidden,
    embedding_dropout,
    locked_dropout,
)
from workloads.models.gnmt.model import GNMT
from workloads.models.seq2seq import BOS_ID, PAD_ID, Seq2Seq, make_tgt_in
from workloads.models.transformer.model import Transformer, sinusoidal_positions


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


def padded_batch(lengths: list[int], vocab: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Right-padded source (B, S) of real tokens (ids >= 4), its lengths, and a target."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (len(lengths), max(lengths)), generator=g)
    for row, n in enumerate(lengths):
        src[row, n:] = PAD_ID
    target = torch.randint(4, vocab, (len(lengths), 5), generator=g)
    return src, torch.tensor(lengths), make_tgt_in(target)


def tiny_transformer(dropout: float = 0.0) -> Transformer:
    torch.manual_seed(0)
    return Transformer(37, d_model=16, ffn_dim=32, num_heads=4, num_layers=2, dropout=dropout)


def tiny_gnmt(dropout: float = 0.0) -> GNMT:
    torch.manual_seed(0)
    return GNMT(37, hidden_dim=12, num_layers=4, dropout=dropout)


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


@pytest.mark.parametrize("build", [tiny_transformer, tiny_gnmt])
def test_models_implement_the_seq2seq_protocol_and_learn(build):
    model = build(dropout=0.1)
    assert isinstance(model, Seq2Seq)
    src, lengths, tgt_in = padded_batch([6, 3, 5], 37)
    target = torch.cat((tgt_in[:, 1:], tgt_in[:, :1]), dim=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        logits = model(src, lengths, tgt_in)
        assert logits.shape == (3, 5, 37)
        loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
        opt.zero_grad()
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.parametrize("build", [tiny_transformer, tiny_gnmt])
def test_incremental_decoding_gives_the_teacher_forced_log_probabilities(build):
    model = build(dropout=0.3).eval()
    src, lengths, tgt_in = padded_batch([6, 2, 4], 37)
    expected = F.log_softmax(model(src, lengths, tgt_in), dim=-1)
    encoded = model.encode(src, lengths)
    state = model.init_state(encoded)
    steps = []
    for t in range(tgt_in.size(1)):
        log_probs, state = model.decode_step(tgt_in[:, t], encoded, state)
        steps.append(log_probs)
    assert torch.allclose(torch.stack(steps, dim=1), expected, atol=1e-5)


@pytest.mark.parametrize("build", [tiny_transformer, tiny_gnmt])
def test_reorder_selects_and_repeats_rows_of_the_decoder_state(build):
    model = build().eval()
    src, lengths, tgt_in = padded_batch([6, 2, 4], 37)
    encoded = model.encode(src, lengths)
    state = model.init_state(encoded)
    _, state = model.decode_step(tgt_in[:, 0], encoded, state)
    index = torch.tensor([2, 2, 0])
    encoded2, state2 = model.reorder(encoded, state, index)
    picked, _ = model.decode_step(tgt_in[index, 1], encoded2, state2)
    full, _ = model.decode_step(tgt_in[:, 1], encoded, state)
    assert torch.allclose(picked, full[index], atol=1e-6)


@pytest.mark.parametrize("build", [tiny_transformer, tiny_gnmt])
def test_a_sentence_gets_the_same_logits_alone_and_in_a_padded_batch(build):
    model = build().eval()
    src, lengths, tgt_in = padded_batch([7, 3, 5], 37)
    batched = model(src, lengths, tgt_in)
    for row, n in enumerate(lengths.tolist()):
        alone = model(src[row : row + 1, :n], lengths[row : row + 1], tgt_in[row : row + 1])
        assert torch.allclose(alone[0], batched[row], atol=1e-5)


@pytest.mark.parametrize("build", [tiny_transformer, tiny_gnmt])
def test_a_decoder_position_does_not_see_later_targets(build):
    model = build().eval()
    src, lengths, tgt_in = padded_batch([4, 4], 37)
    changed = tgt_in.clone()
    changed[:, 3:] = 9
    a, b = model(src, lengths, tgt_in), model(src, lengths, changed)
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3:], b[:, 3:])


# --- Transformer ----------------------------------------------------------------------------


# MLPerf's WMT17 en-de vocabulary has 33,708 subwords. One shared embedding (V*1024); per
# encoder layer attention 4*(1024^2+1024) + FFN 2*1024*4096+4096+1024 + 2 LayerNorms; per
# decoder layer one more attention and LayerNorm; a final LayerNorm on each stack (pre-norm).
def test_transformer_big_has_the_reference_parameter_count():
    assert meta_params(Transformer, 33_708) == 210_874_368 + 2 * 2 * 1024


def test_transformer_shares_one_embedding_matrix_and_has_no_output_bias():
    # One more word adds exactly one d_model row: no separate decoder or output matrix.
    assert meta_params(Transformer, 101) - meta_params(Transformer, 100) == 1024
    model = tiny_transformer()
    x = torch.randn(2, 3, 16)
    assert torch.allclose(model.logits(x), x @ model.embedding.weight.T)


def _silence_sublayers(layer: torch.nn.Module) -> None:
    """Zero the output projections of every attention and FFN of `layer`."""
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if "out_proj" in name or "fc2" in name:
                param.zero_()


def test_transformer_layers_are_pre_norm_as_the_mlperf_reference():
    # The MLPerf reference (TF, PrePostProcessingWrapper) is pre-norm: x + sublayer(LN(x)).
    # With every sub-layer's output zeroed, a pre-norm layer passes its input through
    # untouched; a post-norm one would normalise it (mean 0, variance 1 per position).
    model = tiny_transformer().eval()
    x = torch.randn(1, 5, 16) * 7 + 3
    mask = torch.ones(1, 1, 1, 5, dtype=torch.bool)
    encoder_layer, decoder_layer = model.encoder[0], model.decoder[0]
    _silence_sublayers(encoder_layer)
    _silence_sublayers(decoder_layer)
    assert torch.equal(encoder_layer(x, mask), x)
    kv = decoder_layer.self_keys_values(x)
    assert torch.equal(decoder_layer(x, kv, kv, mask, causal=True), x)


def test_transformer_stacks_end_in_a_layer_norm():
    # Pre-norm leaves the residual stream raw: the encoder's output (what the decoder attends
    # to) and the decoder's (what the logits project) are normalised once at the end.
    model = tiny_transformer().eval()
    src, lengths, tgt_in = padded_batch([5], 37)
    outputs = []
    model.encoder_norm.register_forward_hook(lambda m, i, o: outputs.append(o))
    model.decoder_norm.register_forward_hook(lambda m, i, o: outputs.append(o))
    model(src, lengths, tgt_in)
    assert len(outputs) == 2
    for out in outputs:
        assert torch.allclose(out.mean(-1), torch.zeros_like(out.mean(-1)), atol=1e-5)


def test_transformer_drops_attention_weights_and_relu_outputs_in_training_only():
    # The reference's attention_dropout and relu_dropout (0.1 each, as its layer dropout).
    model = tiny_transformer()
    layer = model.encoder[0]
    layer.self_attn.dropout, layer.ffn.relu_dropout.p = 0.5, 0.5
    x = torch.randn(2, 4, 16)
    k, v = layer.self_attn.keys_values(x)
    layer.train()
    torch.manual_seed(0)
    assert not torch.equal(layer.self_attn.attend(x, k, v), layer.self_attn.attend(x, k, v))
    assert not torch.equal(layer.ffn(x), layer.ffn(x))
    layer.eval()
    assert torch.equal(layer.self_attn.attend(x, k, v), layer.self_attn.attend(x, k, v))
    assert torch.equal(layer.ffn(x), layer.ffn(x))


def test_transformer_input_is_scaled_embedding_plus_sinusoids():
    model = tiny_transformer()
    tokens = torch.tensor([[5, 6, 7]])
    expected = 4.0 * model.embedding.weight[tokens] + sinusoidal_positions(3, 16)
    assert torch.allclose(model.embed(tokens), expected)  # sqrt(16) = 4, no dropout
    table = sinusoidal_positions(50, 16)
    assert torch.equal(table[0], torch.cat((torch.zeros(8), torch.ones(8))))
    assert table[7, 2].item() == pytest.approx(torch.sin(torch.tensor(7 * 1e4 ** (-2 / 7))).item())
    with pytest.raises(ValueError, match="max_positions"):
        Transformer(37, 16, 32, 4, 1, max_positions=4).embed(torch.ones(1, 5, dtype=torch.long))


# --- GNMT -------------------------------------------------------------------------------------


# The reference's 32,317-token vocabulary: shared embedding V*1024, classifier V*1024+V,
# encoder LSTMs (bidirectional 1024->2x1024, 2048->1024, 2 x 1024->1024), decoder LSTMs
# (1024->1024, 3 x 2048->1024), attention 2*1024^2 + 2*1024 + 1.
def test_gnmt_has_the_reference_parameter_count():
    assert meta_params(GNMT, 32_317) == 160_665_150
    assert meta_params(GNMT, 32_317, share_embedding=False) == 160_665_150 + 32_317 * 1024


def test_gnmt_layout_bidirectional_first_then_context_fed_decoder_layers():
    model = tiny_gnmt()
    assert model.encoder_embedding is model.decoder_embedding
    assert [(m.input_size, m.bidirectional) for m in model.encoder] == [
        (12, True),
        (24, False),
        (12, False),
        (12, False),
    ]
    assert [m.input_size for m in model.decoder] == [12, 24, 24, 24]


def test_gnmt_has_residual_connections_from_the_third_layer_on():
    # An LSTM with all-zero weights and biases outputs zeros (its cell input tanh(0) is 0):
    # a residual layer then passes its input through, a plain one would output zeros.
    model = tiny_gnmt().eval()
    with torch.no_grad():
        for layer in [*model.encoder[2:], *model.decoder[2:]]:
            for param in layer.parameters():
                param.zero_()
    src, lengths, tgt_in = padded_batch([6, 2, 4], 37)
    second = {}
    model.encoder[1].register_forward_hook(lambda m, i, o: second.update(enc=o[0]))
    model.decoder[1].register_forward_hook(lambda m, i, o: second.update(dec=o[0]))
    encoded = model.encode(src, lengths)
    assert torch.equal(encoded.values, second["enc"])
    logits = model(src, lengths, tgt_in)
    assert torch.allclose(logits, model.classifier(second["dec"]))
    assert second["dec"].abs().sum() > 0


def test_gnmt_reads_source_lengths_not_what_lies_in_the_padding():
    # Packing (bidirectional layer) and the attention mask both follow src_lengths: junk
    # after a sentence's end changes nothing. Without packing the backward direction
    # would start in the junk.
    model = tiny_gnmt().eval()
    src, lengths, tgt_in = padded_batch([6, 2, 4], 37)
    junk = src.clone()
    for row, n in enumerate(lengths.tolist()):
        junk[row, n:] = 11
    assert torch.allclose(model(src, lengths, tgt_in), model(junk, lengths, tgt_in), atol=1e-6)
