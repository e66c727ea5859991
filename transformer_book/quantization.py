r"""Weights in four and eight bits: the block formats of GGUF files (chapter 18).

A GGUF file (llama.cpp's format) stores most of a model's matrices *quantized*: each row is cut into
blocks of :data:`BLOCK` = 32 consecutive weights, and each block keeps a scale (and a minimum) in
16-bit floats and one small integer per weight.

**Q4_1**: a block holds a scale :math:`d` and a minimum :math:`m` (float16 each) and 32 integers
:math:`q_j \in \{0, \dots, 15\}` (4 bits each, two to a byte), and stands for

.. math:: w_j \approx d\, q_j + m, \qquad d = \frac{\max_j w_j - \min_j w_j}{15}, \quad m = \min_j w_j,

so :math:`2 + 2 + 16 = 20` bytes for 32 weights, **5 bits per weight** (a float32 weight takes 32:
6.4 times less memory). Byte :math:`j` of the 16 holds :math:`q_j` in its low four bits and
:math:`q_{j+16}` in its high four. The rounding error of a weight is at most :math:`d/2` (plus the
rounding of :math:`d` and :math:`m` to float16).

**Q8_0**: a block holds a scale :math:`d` (float16) and 32 integers :math:`q_j \in \{-127, \dots,
127\}` (int8), :math:`w_j \approx d\, q_j` with :math:`d = \max_j |w_j| / 127`: 34 bytes for 32
weights, **8.5 bits per weight**.

:func:`dequantize` turns a tensor's raw blocks back into float32 weights; :func:`quantize` writes
them (the tests write small GGUF files with it). Both are written from these definitions, and the
tests check :func:`dequantize` against llama.cpp's own ``gguf`` package on every tensor of a real
file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["BLOCK", "FORMATS", "bits_per_weight", "block_bytes", "dequantize", "quantize"]

BLOCK = 32
"""Weights per block in every format here."""

FORMATS = ("F32", "F16", "Q8_0", "Q4_1")
"""The tensor types :func:`dequantize` reads (their GGUF names)."""

_BLOCK_BYTES = {"Q4_1": 2 + 2 + BLOCK // 2, "Q8_0": 2 + BLOCK}


def block_bytes(kind: str) -> int:
    """Bytes of one block of :data:`BLOCK` weights in ``kind`` (``"Q4_1"``: 20, ``"Q8_0"``: 34;
    ``"F32"``: 128 and ``"F16"``: 64, as if blocked)."""
    _check_kind(kind)
    return {"F32": 4 * BLOCK, "F16": 2 * BLOCK}.get(kind) or _BLOCK_BYTES[kind]


def bits_per_weight(kind: str) -> float:
    """Storage per weight in bits: Q4_1 5.0, Q8_0 8.5, F16 16, F32 32."""
    return 8 * block_bytes(kind) / BLOCK


def dequantize(raw: np.ndarray | bytes, kind: str, shape: Sequence[int]) -> torch.Tensor:
    r"""The float32 tensor of ``shape`` that the bytes ``raw`` store in format ``kind``.

    ``shape`` is PyTorch's order, ``(rows, columns)`` for a matrix (``nn.Linear``'s ``(out, in)``);
    blocks run along the last axis, whose length must be a multiple of 32 for the quantized
    formats. Q4_1: :math:`w = d\,q + m`; Q8_0: :math:`w = d\,q`; F16 and F32 are read as they are.

    Raises:
        ValueError: an unknown ``kind``, a last axis that is not a whole number of blocks, or
            ``raw`` of another size than ``shape`` needs in ``kind``.
    """
    _check_kind(kind)
    shape = tuple(int(s) for s in shape)
    data = (
        np.frombuffer(raw, dtype=np.uint8)
        if isinstance(raw, (bytes, bytearray, memoryview))
        else np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    )
    count = int(np.prod(shape)) if shape else 1
    if kind in ("F32", "F16"):
        width = 4 if kind == "F32" else 2
        if data.size != count * width:
            raise ValueError(f"dequantize: {data.size:,} bytes cannot hold {count:,} {kind} numbers of shape {shape}")
        values = data.view(np.float32 if kind == "F32" else np.float16).astype(np.float32)
        return torch.from_numpy(values.reshape(shape).copy())
    if not shape or shape[-1] % BLOCK:
        raise ValueError(f"dequantize: a {kind} tensor's last axis must be a multiple of {BLOCK}, got shape {shape}")
    n_blocks = count // BLOCK
    if data.size != n_blocks * _BLOCK_BYTES[kind]:
        raise ValueError(
            f"dequantize: {data.size:,} bytes are not the {n_blocks:,} blocks of {_BLOCK_BYTES[kind]} "
            f"bytes that a {kind} tensor of shape {shape} takes"
        )
    blocks = data.reshape(n_blocks, _BLOCK_BYTES[kind])
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # (n_blocks, 1) the scales
    if kind == "Q8_0":
        q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)  # (n_blocks, 32)
        weights = d * q
    else:
        m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)  # (n_blocks, 1) the minima
        packed = blocks[:, 4:]  # (n_blocks, 16)
        q = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)  # q_0..q_15, then q_16..q_31
        weights = d * q + m
    return torch.from_numpy(weights.reshape(shape))


def quantize(weights: torch.Tensor, kind: str) -> bytes:
    r"""The bytes of ``weights`` (any shape whose last axis is a multiple of 32) in ``kind``.

    Q4_1: per block :math:`m = \min w`, :math:`d = (\max w - m) / 15` (both rounded to float16),
    :math:`q = \operatorname{round}((w - m) / d)` clipped to :math:`[0, 15]`. Q8_0: :math:`d =
    \max |w| / 127` (float16), :math:`q = \operatorname{round}(w / d)`. F16 and F32 store the
    values as they are. A Q4_1 block of equal weights gets :math:`d = 0` and dequantizes exactly.

    Raises:
        ValueError: an unknown ``kind``, a tensor that is not floating point or not finite, or a
            last axis that is not a whole number of blocks (quantized formats).
    """
    _check_kind(kind)
    if not isinstance(weights, torch.Tensor) or not weights.is_floating_point():
        raise ValueError(f"quantize: weights must be a floating-point tensor, got {type(weights).__name__}")
    if not bool(torch.isfinite(weights).all()):
        raise ValueError("quantize: weights hold NaN or infinite values")
    values = weights.detach().to(torch.float32).cpu().numpy()
    if kind == "F32":
        return values.astype("<f4").tobytes()
    if kind == "F16":
        return values.astype("<f2").tobytes()
    if values.ndim == 0 or values.shape[-1] % BLOCK:
        raise ValueError(
            f"quantize: a {kind} tensor's last axis must be a multiple of {BLOCK}, got shape {tuple(values.shape)}"
        )
    blocks = values.reshape(-1, BLOCK)
    if kind == "Q8_0":
        d = (np.abs(blocks).max(axis=1, keepdims=True) / 127).astype(np.float16)
        scale = d.astype(np.float32)
        q = np.where(scale > 0, np.round(blocks / np.where(scale > 0, scale, 1)), 0).clip(-127, 127).astype(np.int8)
        return np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=1).tobytes()
    low, high = blocks.min(axis=1, keepdims=True), blocks.max(axis=1, keepdims=True)
    d, m = ((high - low) / 15).astype(np.float16), low.astype(np.float16)
    scale = d.astype(np.float32)
    q = np.where(scale > 0, np.round((blocks - m.astype(np.float32)) / np.where(scale > 0, scale, 1)), 0)
    q = q.clip(0, 15).astype(np.uint8)
    packed = (q[:, : BLOCK // 2] | (q[:, BLOCK // 2 :] << 4)).astype(np.uint8)
    return np.concatenate([d.view(np.uint8), m.view(np.uint8), packed], axis=1).tobytes()


def _check_kind(kind: object) -> None:
    if kind not in FORMATS:
        raise ValueError(f"unknown tensor format {kind!r}; the formats read here are {', '.join(FORMATS)}")
