"""One rank's training state on every rank: how a joiner (and every survivor of a failure)
takes the state of the source worker.

The state is any nesting of dicts, lists and tuples over tensors and plain values (a model's
and an optimizer's state_dict, the step, the sampler's cursor, the policies' knobs, the
monitors' EMAs). The source sends its structure as JSON, tensors replaced by their shape and
dtype, then the tensors themselves, flattened into one buffer per dtype: 2 + (number of
dtypes) broadcasts, whatever the number of tensors. No pickle crosses the wire, so a damaged
or hostile message can only fail to parse. Receivers need nothing beforehand: a joiner whose
optimizer has no state yet receives it whole.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

DTYPES = {
    str(dtype): dtype
    for dtype in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
    )
}
PLAIN = (str, int, float, bool, type(None))


def split(state: Any, tensors: list[torch.Tensor]) -> Any:
    """The JSON skeleton of `state`; its tensors are appended to `tensors`."""
    if isinstance(state, torch.Tensor):
        if str(state.dtype) not in DTYPES:
            raise TypeError(f"cannot send tensors of {state.dtype}")
        tensors.append(state)
        return {"tensor": [list(state.shape), str(state.dtype)]}
    if isinstance(state, dict):
        if not all(isinstance(k, PLAIN) for k in state):
            raise TypeError("state dict keys must be plain values")
        return {"dict": [[k, split(v, tensors)] for k, v in state.items()]}
    if isinstance(state, list | tuple):
        return {type(state).__name__: [split(v, tensors) for v in state]}
    if isinstance(state, PLAIN):
        return {"value": state}
    raise TypeError(f"cannot send a {type(state).__name__}")


def specs(skeleton: Any) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """The (shape, dtype) of each tensor of a received skeleton, in order."""
    out: list[tuple[tuple[int, ...], torch.dtype]] = []
    _walk(skeleton, lambda shape, dtype: out.append((shape, dtype)))
    return out


def join(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """The state a skeleton describes, its tensors taken from `tensors` in order."""
    stream = iter(tensors)
    return _walk(skeleton, lambda shape, dtype: next(stream))


def _walk(node: Any, on_tensor: Any) -> Any:
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError("malformed state skeleton")
    ((kind, body),) = node.items()
    if kind == "tensor":
        shape, dtype = body
        if dtype not in DTYPES or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError(f"malformed tensor in state skeleton: {body!r}")
        return on_tensor(tuple(shape), DTYPES[dtype])
    if kind == "dict":
        return {key: _walk(value, on_tensor) for key, value in body}
    if kind in ("list", "tuple"):
        items = [_walk(value, on_tensor) for value in body]
        return items if kind == "list" else tuple(items)
    if kind == "value" and isinstance(body, PLAIN):
        return body
    raise ValueError(f"malformed state skeleton node {kind!r}")


def broadcast_state(state: Any, src: int, device: torch.device) -> Any:
    """`state` as rank `src` holds it, on every rank (others may pass None). Tensors arrive on
    `device` (the process group's: CUDA for NCCL)."""
    tensors: list[torch.Tensor] = []
    payload = b""
    if dist.get_rank() == src:
        payload = json.dumps(split(state, tensors)).encode()
    skeleton = json.loads(_broadcast_bytes(payload, src, device))
    shapes = specs(skeleton)
    if dist.get_rank() != src:
        tensors = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in shapes]
    received = [t.to(device) for t in tensors]
    for dtype in dict.fromkeys(t.dtype for t in received):  # in order of first appearance
        group = [t for t in received if t.dtype == dtype]
        flat = _flatten_dense_tensors(group)
        dist.broadcast(flat, src)
        for tensor, value in zip(group, _unflatten_dense_tensors(flat, group), strict=True):
            tensor.copy_(value)
    return join(skeleton, received)


def _broadcast_bytes(payload: bytes, src: int, device: torch.device) -> bytes:
    size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    dist.broadcast(size, src)
    buffer = torch.zeros(int(size.item()), dtype=torch.uint8, device=device)
    if dist.get_rank() == src:
        buffer.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(buffer, src)
    return buffer.cpu().numpy().tobytes()
