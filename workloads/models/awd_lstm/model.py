"""AWD-LSTM (Merity, Keskar & Socher 2017, "Regularizing and Optimizing LSTM Language
Models") for task 3a, WikiText-2.

A plain stack of LSTMs whose regularisation is the point; four dropouts, all off in eval mode:
- embedding dropout: whole rows of the embedding matrix (words) are dropped, the same words
  at every position of the batch, and the rest rescaled by 1/(1-p);
- locked (variational) dropout: one mask per sequence, the same at every time step, on the
  embeddings (dropout_input), between the LSTM layers (dropout_hidden) and on the last
  layer's output (dropout);
- weight drop: DropConnect on every layer's hidden-to-hidden matrix, one mask per forward
  call (per BPTT segment), shared across time steps. The original implementation swapped
  the parameter under cuDNN's feet (`_setweights`), which current PyTorch rejects; here each
  layer runs through torch.func.functional_call with the dropped matrix in place of
  `weight_hh_l0`, so the gradient reaches the real parameter and cuDNN's fused kernel stays.
With tied weights the decoder reuses the embedding matrix, so the last layer is embed_dim
wide. At the paper's sizes the model has 24.2 M parameters on Penn Treebank (10,000 words,
the paper's 24 M) and 33.6 M on WikiText-2 (33,278 words, the paper's 33 M).

Activation regularisation (AR/TAR in the paper) needs the last layer's outputs before and
after dropout; `forward` returns logits only, so a loop that wants AR/TAR adds a hook.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

# One (h, c) pair per layer, each (1, batch, layer width): what nn.LSTM takes.
Hidden = list[tuple[Tensor, Tensor]]


def embedding_dropout(embed: nn.Embedding, tokens: Tensor, p: float, training: bool) -> Tensor:
    """Embeddings of `tokens` with whole words dropped: one keep/drop draw per vocabulary
    row, so every occurrence of a word in the batch is dropped together."""
    out = embed(tokens)
    if not training or p == 0:
        return out
    keep = torch.empty(embed.num_embeddings, 1, device=out.device, dtype=out.dtype)
    keep.bernoulli_(1 - p).div_(1 - p)
    # Masking the looked-up rows equals masking the matrix (same gradient) without a
    # vocabulary-sized multiply per step.
    return out * F.embedding(tokens, keep)


def locked_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout on x (T, B, D) with one mask per sequence and feature, shared over time."""
    if not training or p == 0:
        return x
    mask = x.new_empty(1, x.size(1), x.size(2)).bernoulli_(1 - p).div_(1 - p)
    return x * mask


class WeightDropLSTM(nn.Module):
    """A one-layer LSTM with DropConnect on its hidden-to-hidden weights in training."""

    def __init__(self, input_size: int, hidden_size: int, weight_drop: float) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=1)
        self.hidden_size = hidden_size
        self.weight_drop = weight_drop

    def forward(self, x: Tensor, hx: tuple[Tensor, Tensor]) -> tuple[Tensor, Any]:
        if not self.training or self.weight_drop == 0:
            return self.lstm(x, hx)
        dropped = F.dropout(self.lstm.weight_hh_l0, self.weight_drop, training=True)
        # For this call only; the other weights are the module's own.
        return functional_call(self.lstm, {"weight_hh_l0": dropped}, (x, hx))


class AWDLSTM(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        embed_dim: int = 400,
        hidden_dim: int = 1150,
        num_layers: int = 3,
        dropout: float = 0.4,
        dropout_hidden: float = 0.2,
        dropout_input: float = 0.65,
        dropout_embedding: float = 0.1,
        weight_drop: float = 0.5,
        tie_weights: bool = True,
    ) -> None:
        super().__init__()
        self.dropout = dropout
        self.dropout_hidden = dropout_hidden
        self.dropout_input = dropout_input
        self.dropout_embedding = dropout_embedding
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        widths = [embed_dim] + [hidden_dim] * (num_layers - 1)
        widths.append(embed_dim if tie_weights else hidden_dim)
        self.layers = nn.ModuleList(
            WeightDropLSTM(widths[i], widths[i + 1], weight_drop) for i in range(num_layers)
        )
        self.decoder = nn.Linear(widths[-1], vocab_size)
        # As the reference: uniform(-0.1, 0.1) embeddings, zero decoder bias, LSTMs keep
        # PyTorch's uniform(-1/sqrt(hidden), 1/sqrt(hidden)).
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if tie_weights:
            self.decoder.weight = self.embedding.weight
        else:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def init_hidden(self, batch_size: int, device: torch.device | str | None = None) -> Hidden:
        dtype = self.decoder.weight.dtype
        return [
            (
                torch.zeros(1, batch_size, layer.hidden_size, device=device, dtype=dtype),
                torch.zeros(1, batch_size, layer.hidden_size, device=device, dtype=dtype),
            )
            for layer in self.layers
        ]

    def forward(self, tokens: Tensor, hidden: Hidden) -> tuple[Tensor, Hidden]:
        """tokens (T, B) -> logits (T, B, V) and the hidden state after the last step."""
        x = embedding_dropout(self.embedding, tokens, self.dropout_embedding, self.training)
        x = locked_dropout(x, self.dropout_input, self.training)
        new_hidden: Hidden = []
        for i, layer in enumerate(self.layers):
            x, (h, c) = layer(x, hidden[i])
            new_hidden.append((h, c))
            last = i == len(self.layers) - 1
            x = locked_dropout(x, self.dropout if last else self.dropout_hidden, self.training)
        return self.decoder(x), new_hidden


def detach_hidden(hidden: Hidden) -> Hidden:
    """The same state cut from the graph of the segment that made it (truncated BPTT)."""
    return [(h.detach(), c.detach()) for h, c in hidden]
