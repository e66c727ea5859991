"""Attention masks in the book's convention: ``True`` means *the key is excluded*.

A mask is a boolean tensor broadcastable to the attention scores of shape
``(..., n, m)`` (``n`` queries, ``m`` keys). Position ``(i, j)`` set to ``True`` removes
key ``j`` from the softmax of query ``i`` (its score becomes :math:`-\\infty`).

PyTorch's own APIs disagree with each other here, so beware when you mix them:

* ``torch.nn.functional.scaled_dot_product_attention(attn_mask=...)`` takes a boolean
  mask where ``True`` means *take part* -- the opposite of this book. Pass ``~mask``.
* ``torch.nn.MultiheadAttention(key_padding_mask=..., attn_mask=...)`` uses ``True`` for
  *excluded*, as this book does.

Section: chapter 1 (and chapter 2, masks).
"""

from __future__ import annotations

import torch

from transformer_book import checks

__all__ = ["padding_mask", "causal_mask", "combine_masks"]


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Exclude the keys that are padding.

    Only keys are masked: a query at a PAD position still attends to the real tokens
    (its output is discarded by the loss anyway), so no row becomes fully masked.

    Args:
        tokens: integer token ids of shape ``(B, m)``.
        pad_id: the id used for padding.

    Returns:
        Boolean mask of shape ``(B, 1, m)``, ``True`` where ``tokens == pad_id``. It
        broadcasts over the ``n`` query rows of scores shaped ``(B, n, m)``; for scores
        with a head axis ``(B, h, n, m)`` add it with ``mask.unsqueeze(1)``.

    Raises:
        ValueError: if ``tokens`` is not a 2-D integer tensor.
    """
    checks.id_tensor("padding_mask", "tokens", tokens, "(B, m)")
    return (tokens == pad_id).unsqueeze(1)


def causal_mask(m: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Exclude the future: query ``i`` may attend to key ``j`` only when ``j <= i``.

    .. math:: M_{ij} = [\\, j > i \\,]

    The diagonal is kept (a position sees itself). Masking ``j >= i`` instead would
    leave row 0 with no key at all.

    Args:
        m: sequence length (number of queries and keys), a positive integer.
        device: where to create the mask.

    Returns:
        Boolean mask of shape ``(m, m)``, ``True`` strictly above the diagonal.

    Raises:
        ValueError: if ``m`` is not a positive integer.
    """
    checks.positive_int("causal_mask", m=m)
    return torch.ones(m, m, dtype=torch.bool, device=device).triu(diagonal=1)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    r"""OR-combine masks: a key is excluded if any mask excludes it.

    .. math:: M = M^{(1)} \lor M^{(2)} \lor \dots

    A decoder's self-attention, for example, combines the padding mask of the targets
    ``(B, 1, m)`` with the causal mask ``(m, m)`` into ``(B, m, m)``. ``None`` entries are
    skipped; with no mask left the result is ``None``.

    Raises:
        ValueError: if a mask is not boolean or the shapes do not broadcast.
    """
    present = [each for each in masks if each is not None]
    for each in present:
        if not isinstance(each, torch.Tensor) or each.dtype != torch.bool:
            what = each.dtype if isinstance(each, torch.Tensor) else type(each).__name__
            raise ValueError(f"combine_masks: masks must be boolean tensors (True = excluded), got {what}")
    if not present:
        return None
    try:
        torch.broadcast_shapes(*(each.shape for each in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(each.shape)) for each in present)
        raise ValueError(f"combine_masks: mask shapes {shapes} do not broadcast together") from None
    combined = present[0]
    for each in present[1:]:
        combined = combined | each
    return combined
