"""GNMT for task 4a (WMT16 en-de), as the MLPerf reference builds it: NVIDIA's PyTorch "GNMT
v2" (DeepLearningExamples, rnn_translator), after Wu et al. 2016.

Encoder: embeddings, a bidirectional LSTM layer (run on packed sequences, so the backward
direction starts at each sentence's last real token, not in its padding), then
unidirectional layers of `hidden_dim`, with residual connections from the third layer on.
Dropout on the input of every encoder layer. Only the bidirectional layer needs packing: a
unidirectional layer never looks right, so padding after a sentence cannot reach it.

Decoder: embeddings, a first LSTM layer whose output queries a normalised Bahdanau attention
over the encoder output (v2: the attention uses the current step's first-layer output; no
input feeding), the attention context concatenated to the input of every following layer,
residual connections from the third layer on, a linear classifier (with bias; not tied to
the embeddings). Dropout on the output of every decoder layer but the last before it is
concatenated with the context. The decoder starts from zero states (the encoder's final
states are not passed over). With share_embedding the encoder and decoder share one
embedding matrix. Every weight starts uniform(-0.1, 0.1) except the LSTMs' hidden-to-hidden
biases (zero) and the attention's normalisation (scalar 1/sqrt(hidden), bias 0).

A decode step therefore carries only the LSTM states of every decoder layer: the context for
step t is computed from the first layer's output at step t. The encoder's keys (the
attention's key projection of the encoder output) are computed once in `encode`.
At the reference size with the reference's 32,317-token vocabulary: 160.7 M parameters.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

INIT_RANGE = 0.1

LSTMState = tuple[Tensor, Tensor]  # (h, c), each (1, B, H)


def lstm(input_size: int, hidden_size: int, bidirectional: bool = False) -> nn.LSTM:
    layer = nn.LSTM(input_size, hidden_size, batch_first=True, bidirectional=bidirectional)
    for name, param in layer.named_parameters():
        if name.startswith("bias_hh"):
            nn.init.zeros_(param)  # the two biases add up; the reference zeroes one of them
        else:
            nn.init.uniform_(param, -INIT_RANGE, INIT_RANGE)
    return layer


class BahdanauAttention(nn.Module):
    """Additive attention, normalised (Salimans & Kingma's weight normalisation on the score
    vector, as tf.contrib.seq2seq.BahdanauAttention(normalize=True)):

        score(q, k_j) = g * v/|v| . tanh(W_q q + W_k k_j + b)
    """

    def __init__(self, query_size: int, key_size: int, num_units: int) -> None:
        super().__init__()
        self.linear_q = nn.Linear(query_size, num_units, bias=False)
        self.linear_k = nn.Linear(key_size, num_units, bias=False)
        self.linear_att = nn.Parameter(torch.empty(num_units))
        self.normalize_scalar = nn.Parameter(torch.empty(1))
        self.normalize_bias = nn.Parameter(torch.empty(num_units))
        for param in (self.linear_q.weight, self.linear_k.weight, self.linear_att):
            nn.init.uniform_(param, -INIT_RANGE, INIT_RANGE)
        nn.init.constant_(self.normalize_scalar, 1 / math.sqrt(num_units))
        nn.init.zeros_(self.normalize_bias)

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor) -> Tensor:
        """Contexts (B, Tq, K) for queries (B, Tq, Q) over keys = linear_k(values) (B, S, N),
        values (B, S, K); mask (B, S) is True at real source tokens."""
        q = self.linear_q(query)
        # (B, Tq, S, N): additive attention has no cheaper form, tanh sits between the sum
        # and the product.
        energy = torch.tanh(q[:, :, None, :] + keys[:, None, :, :] + self.normalize_bias)
        v = self.normalize_scalar * self.linear_att / self.linear_att.norm()
        scores = energy @ v
        scores = scores.masked_fill(~mask[:, None, :], torch.finfo(scores.dtype).min)
        return torch.bmm(F.softmax(scores, dim=-1), values)


class Encoded(NamedTuple):
    """The encoder's output (B, S, H), its attention keys (B, S, H), the mask (B, S)."""

    values: Tensor
    keys: Tensor
    mask: Tensor


class GNMT(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        hidden_dim: int = 1024,
        num_layers: int = 4,
        dropout: float = 0.2,
        share_embedding: bool = True,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        if num_layers < 2:
            raise ValueError(f"GNMT needs at least 2 layers, got {num_layers}")
        self.pad_id = pad_id
        self.dropout = nn.Dropout(dropout)
        self.encoder_embedding = nn.Embedding(vocab_size, hidden_dim, padding_idx=pad_id)
        nn.init.uniform_(self.encoder_embedding.weight, -INIT_RANGE, INIT_RANGE)
        if share_embedding:
            self.decoder_embedding = self.encoder_embedding
        else:
            self.decoder_embedding = nn.Embedding(vocab_size, hidden_dim, padding_idx=pad_id)
            nn.init.uniform_(self.decoder_embedding.weight, -INIT_RANGE, INIT_RANGE)

        h = hidden_dim
        self.encoder = nn.ModuleList(
            [lstm(h, h, bidirectional=True), lstm(2 * h, h)]
            + [lstm(h, h) for _ in range(num_layers - 2)]
        )
        self.decoder = nn.ModuleList([lstm(h, h)] + [lstm(2 * h, h) for _ in range(num_layers - 1)])
        self.attention = BahdanauAttention(h, h, h)
        self.classifier = nn.Linear(h, vocab_size)
        nn.init.uniform_(self.classifier.weight, -INIT_RANGE, INIT_RANGE)
        nn.init.uniform_(self.classifier.bias, -INIT_RANGE, INIT_RANGE)

    def encode(self, src: Tensor, src_lengths: Tensor) -> Encoded:
        x = self.dropout(self.encoder_embedding(src))
        lengths = src_lengths.to("cpu", torch.int64)  # packing wants them on the host
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        x, _ = self.encoder[0](packed)
        x, _ = pad_packed_sequence(x, batch_first=True, total_length=src.size(1))
        x, _ = self.encoder[1](self.dropout(x))
        for layer in self.encoder[2:]:
            x = x + layer(self.dropout(x))[0]
        mask = torch.arange(src.size(1), device=src.device) < src_lengths.to(src.device)[:, None]
        return Encoded(x, self.attention.linear_k(x), mask)

    def decode(
        self, tokens: Tensor, encoded: Encoded, states: list[LSTMState | None]
    ) -> tuple[Tensor, list[LSTMState]]:
        """Logits (B, T, V) for decoder inputs tokens (B, T) from the given layer states
        (None: zeros), and the states after the last position."""
        x, first = self.decoder[0](self.decoder_embedding(tokens), states[0])
        context = self.attention(x, encoded.keys, encoded.values, encoded.mask)
        new_states = [first]
        for i, layer in enumerate(self.decoder[1:], start=1):
            out, state = layer(torch.cat((self.dropout(x), context), dim=2), states[i])
            new_states.append(state)
            x = out if i == 1 else x + out
        return self.classifier(x), new_states

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V)."""
        encoded = self.encode(src, src_lengths)
        return self.decode(tgt_in, encoded, [None] * len(self.decoder))[0]

    def init_state(self, encoded: Encoded) -> list[LSTMState]:
        b, _, h = encoded.values.shape
        zeros = encoded.values.new_zeros(1, b, h)
        return [(zeros, zeros)] * len(self.decoder)

    def decode_step(
        self, prev_tokens: Tensor, encoded: Encoded, state: list[LSTMState]
    ) -> tuple[Tensor, list[LSTMState]]:
        """Log-probabilities (B, V) of the token after prev_tokens (B,), and the new state."""
        logits, state = self.decode(prev_tokens[:, None], encoded, list(state))
        return F.log_softmax(logits[:, 0].float(), dim=-1), state

    def reorder(
        self, encoded: Encoded, state: list[LSTMState], index: Tensor
    ) -> tuple[Encoded, list[LSTMState]]:
        encoded = Encoded(*(t.index_select(0, index) for t in encoded))
        state = [(h.index_select(1, index), c.index_select(1, index)) for h, c in state]
        return encoded, state
