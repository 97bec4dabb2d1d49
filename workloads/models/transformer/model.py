"""Transformer "big" for task 4b (WMT17 en-de), as the MLPerf v0.6 reference builds it: fairseq's
transformer_vaswani_wmt_en_de_big (Vaswani et al. 2017, Ott et al. 2018).

- Pre-norm layers, as that reference (mlcommons/training translation/tensorflow/transformer,
  its PrePostProcessingWrapper) and the fairseq submissions with its hyperparameters
  (transformer_wmt_en_de_big_t2t): x = x + Dropout(sublayer(LayerNorm(x))), and a final
  LayerNorm on the encoder's and the decoder's output (not the paper's post-norm stack).
- Sinusoidal positions, fairseq's layout (sines in the first half of the channels, cosines in
  the second); token embeddings scaled by sqrt(d_model) before the positions are added.
  Positions count from 0 (fairseq's from padding_idx + 1: the same encoding, shifted).
- One embedding matrix for the encoder input, the decoder input and the output projection
  (shared source/target BPE vocabulary, fairseq's share_all_embeddings), so no output bias.
- Dropout on embeddings, after every sub-layer, on the attention weights and after the FFN's
  ReLU, all at `dropout` (the reference's layer_postprocess_, attention_ and relu_dropout are
  each 0.1).
- Attention through F.scaled_dot_product_attention with a key-padding mask on the source
  and is_causal on the target (right padding never lies before a real target token).
- decode_step keeps every decoder layer's self-attention keys and values (a cache grown by
  one position per step) and the cross-attention keys and values of the source, computed
  once in `encode`: one step costs one position's work, so a search is not quadratic.
At the reference size with MLPerf's 33,708-token vocabulary: 210.9 M parameters.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workloads.models.layers import layers_of


def sinusoidal_positions(num_positions: int, dim: int) -> Tensor:
    """(num_positions, dim): sin(pos * f_i) in channels [0, dim/2), cos in [dim/2, dim), with
    frequencies f_i = 10000^(-i / (dim/2 - 1)) as fairseq (a geometric series from 1 down to
    1/10000)."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * freqs[None, :]
    table = torch.cat((torch.sin(angles), torch.cos(angles)), dim=1)
    if dim % 2:
        table = F.pad(table, (0, 1))
    return table


class Attention(nn.Module):
    """Multi-head attention with separate query/key/value projections, so that keys and
    values can be computed once (the source) or one position at a time (the cache)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.dropout = dropout  # on the attention weights, in training only
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        # fairseq's init: Xavier with gain 1/sqrt(2) on the three input projections (they
        # are one fused matrix there), plain Xavier on the output, zero output bias.
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.num_heads, d // self.num_heads).transpose(1, 2)

    def keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values (B, H, T, d_head) of x (B, T, D)."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def attend(
        self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        """Queries from x (B, T, D) attend to k, v; mask (B, 1, 1, S) is True where allowed."""
        q = self.split_heads(self.q_proj(x))
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        b, h, t, dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, h * dh))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, ffn_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.relu_dropout = nn.Dropout(dropout)
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        for fc in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(fc.weight)
            nn.init.zeros_(fc.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.relu_dropout(F.relu(self.fc1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, ffn_dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = Attention(d_model, num_heads, dropout)
        self.self_attn_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.ffn_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        # Pre-norm: each sub-layer reads the normalised stream and adds to the raw one.
        h = self.self_attn_norm(x)
        x = x + self.dropout(self.self_attn.attend(h, *self.self_attn.keys_values(h), mask))
        return x + self.dropout(self.ffn(self.ffn_norm(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, ffn_dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = Attention(d_model, num_heads, dropout)
        self.self_attn_norm = nn.LayerNorm(d_model)
        self.cross_attn = Attention(d_model, num_heads, dropout)
        self.cross_attn_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.ffn_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        self_kv: tuple[Tensor, Tensor],
        cross_kv: tuple[Tensor, Tensor],
        src_mask: Tensor,
        causal: bool,
    ) -> Tensor:
        """x (B, T, D) attends to self_kv (its own positions, and in decoding the earlier
        ones: `self_keys_values` of each) and to cross_kv (the source)."""
        h = self.self_attn_norm(x)
        x = x + self.dropout(self.self_attn.attend(h, *self_kv, None, causal))
        x = x + self.dropout(self.cross_attn.attend(self.cross_attn_norm(x), *cross_kv, src_mask))
        return x + self.dropout(self.ffn(self.ffn_norm(x)))

    def self_keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The self-attention keys and values of positions x (B, T, D): of the normalised
        stream, as the queries (pre-norm)."""
        return self.self_attn.keys_values(self.self_attn_norm(x))


class Encoded(NamedTuple):
    """What `encode` hands the search: the source mask (B, 1, 1, S), True at real tokens,
    and every decoder layer's cross-attention keys and values of the source."""

    src_mask: Tensor
    cross_kv: list[tuple[Tensor, Tensor]]


class DecoderState(NamedTuple):
    """Each decoder layer's self-attention keys and values so far (B, H, t, d_head)."""

    step: int
    self_kv: list[tuple[Tensor, Tensor]]


class Transformer(nn.Module):
    positions: Tensor  # a buffer (register_buffer), declared for the type checker

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 1024,
        ffn_dim: int = 4096,
        num_heads: int = 16,
        num_layers: int = 6,
        dropout: float = 0.1,
        pad_id: int = 0,
        max_positions: int = 1024,
    ) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.max_positions = max_positions
        self.embed_scale = math.sqrt(d_model)
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()
        self.register_buffer(
            "positions", sinusoidal_positions(max_positions, d_model), persistent=False
        )
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(
            EncoderLayer(d_model, ffn_dim, num_heads, dropout) for _ in range(num_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderLayer(d_model, ffn_dim, num_heads, dropout) for _ in range(num_layers)
        )
        # Pre-norm leaves the residual stream unnormalised: each stack ends in a LayerNorm.
        self.encoder_norm = nn.LayerNorm(d_model)
        self.decoder_norm = nn.LayerNorm(d_model)

    def embed(self, tokens: Tensor, start: int = 0) -> Tensor:
        """Scaled embeddings plus the positions start, start+1, ... of tokens (B, T)."""
        end = start + tokens.size(1)
        if end > self.max_positions:
            raise ValueError(f"sequence of {end} positions, max_positions is {self.max_positions}")
        x = self.embed_scale * self.embedding(tokens) + self.positions[start:end]
        return self.dropout(x)

    def _decoder_layers(self) -> list[DecoderLayer]:
        return layers_of(self.decoder, DecoderLayer)

    def logits(self, x: Tensor) -> Tensor:
        """The output projection of the decoder's normalised output x."""
        return F.linear(x, self.embedding.weight)

    def encode(self, src: Tensor, src_lengths: Tensor) -> Encoded:
        # The padding comes from the tokens; src_lengths is part of the shared protocol.
        del src_lengths
        mask = (src != self.pad_id)[:, None, None, :]
        x = self.embed(src)
        for layer in self.encoder:
            x = layer(x, mask)
        x = self.encoder_norm(x)
        return Encoded(mask, [layer.cross_attn.keys_values(x) for layer in self._decoder_layers()])

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V)."""
        encoded = self.encode(src, src_lengths)
        x = self.embed(tgt_in)
        for layer, cross_kv in zip(self._decoder_layers(), encoded.cross_kv, strict=True):
            x = layer(x, layer.self_keys_values(x), cross_kv, encoded.src_mask, causal=True)
        return self.logits(self.decoder_norm(x))

    def init_state(self, encoded: Encoded) -> DecoderState:
        del encoded
        return DecoderState(0, [])

    def decode_step(
        self, prev_tokens: Tensor, encoded: Encoded, state: DecoderState
    ) -> tuple[Tensor, DecoderState]:
        """Log-probabilities (B, V) of the token after prev_tokens (B,), and the new state."""
        x = self.embed(prev_tokens[:, None], start=state.step)
        new_kv = []
        layers = self._decoder_layers()
        for i, (layer, cross_kv) in enumerate(zip(layers, encoded.cross_kv, strict=True)):
            k, v = layer.self_keys_values(x)
            if state.self_kv:
                past_k, past_v = state.self_kv[i]
                k, v = torch.cat((past_k, k), dim=2), torch.cat((past_v, v), dim=2)
            new_kv.append((k, v))
            # The cache holds only this and earlier positions: no causal mask needed.
            x = layer(x, (k, v), cross_kv, encoded.src_mask, causal=False)
        log_probs = F.log_softmax(self.logits(self.decoder_norm(x[:, 0])).float(), dim=-1)
        return log_probs, DecoderState(state.step + 1, new_kv)

    def reorder(
        self, encoded: Encoded, state: DecoderState, index: Tensor
    ) -> tuple[Encoded, DecoderState]:
        def pick(kv: list[tuple[Tensor, Tensor]]) -> list[tuple[Tensor, Tensor]]:
            return [(k.index_select(0, index), v.index_select(0, index)) for k, v in kv]

        encoded = Encoded(encoded.src_mask.index_select(0, index), pick(encoded.cross_kv))
        return encoded, DecoderState(state.step, pick(state.self_kv))
