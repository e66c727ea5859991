r"""The losses that :func:`~transformer_book.training.fit` minimises (chapters 7 and 9).

The loss at one non-PAD position with target :math:`y` and vocabulary size :math:`V` is the
cross-entropy against the smoothed target distribution :math:`q = (1-\varepsilon)\,\text{onehot}(y)
+ \varepsilon / V`:

.. math::

    \ell = -\sum_v q_v \log p_v = -(1-\varepsilon)\log p_y - \frac{\varepsilon}{V}\sum_v \log p_v

and the batch loss is the mean of :math:`\ell` over the non-PAD positions only
(:func:`label_smoothed_cross_entropy`). :func:`seq2seq_loss` and :func:`language_model_loss`
turn it into the ``loss_fn(model, batch) -> (loss, n_tokens)`` that ``fit`` takes, for an
encoder-decoder and for a language model. (BERT's and the fine-tuning heads' losses live with
their models: :func:`~transformer_book.models.bert.bert_loss`,
:func:`~transformer_book.models.finetuning.finetuning_loss`.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks
from transformer_book.contracts import IGNORE_INDEX

__all__ = ["label_smoothed_cross_entropy", "seq2seq_loss", "language_model_loss"]


def _check_smoothed_targets(
    where: str, logits: torch.Tensor, targets: torch.Tensor, pad_id: int, smoothing: float
) -> None:
    """Floating ``(..., V)`` logits, integer targets of the shape ``logits.shape[:-1]`` with every
    non-PAD id in ``[0, V)`` and at least one of them, and ``smoothing`` in ``[0, 1)``."""
    if not isinstance(logits, torch.Tensor) or logits.dim() < 2 or not logits.dtype.is_floating_point:
        raise ValueError(f"{where}: logits must be a floating (..., V) tensor")
    if not isinstance(targets, torch.Tensor) or targets.dtype.is_floating_point or targets.dtype == torch.bool:
        raise ValueError(f"{where}: targets must be an integer tensor")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"{where}: targets shape {tuple(targets.shape)} does not match logits shape "
            f"{tuple(logits.shape)} without its last (vocabulary) axis"
        )
    checks.probability(where, "smoothing", smoothing)
    kept = targets[targets != pad_id]
    if kept.numel() == 0:
        raise ValueError(f"{where}: every target is PAD (pad_id={pad_id}); the mean is undefined")
    if bool(((kept < 0) | (kept >= logits.shape[-1])).any()):
        raise ValueError(f"{where}: a target id lies outside [0, {logits.shape[-1]})")


def label_smoothed_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, *, pad_id: int, smoothing: float = 0.0
) -> torch.Tensor:
    r"""Mean label-smoothed cross-entropy over the non-PAD positions.

    :math:`\ell = -(1-\varepsilon)\log p_y - \frac{\varepsilon}{V}\sum_v \log p_v` per position
    (the smoothed target puts :math:`1-\varepsilon+\varepsilon/V` on :math:`y` and
    :math:`\varepsilon/V` on every other token), averaged over positions whose target is not
    ``pad_id``; PAD positions get exactly zero gradient. Equal to ``F.cross_entropy(logits
    .reshape(-1, V), targets.reshape(-1), ignore_index=pad_id, label_smoothing=smoothing)``.

    Args:
        logits: ``(B, n, V)`` unnormalised scores (any leading shape ``(..., V)`` works).
        targets: ``(B, n)`` integer ids, matching ``logits.shape[:-1]``.
        pad_id: the id whose positions are ignored.
        smoothing: :math:`\varepsilon \in [0, 1)`.

    Returns:
        A scalar tensor (float32 for half-precision logits, else the logits' dtype).

    Raises:
        ValueError: for mismatched shapes, non-integer targets, ``smoothing`` outside
            ``[0, 1)``, target ids outside the vocabulary, or a batch that is all PAD.
    """
    _check_smoothed_targets("label_smoothed_cross_entropy", logits, targets, pad_id, smoothing)
    keep = targets != pad_id  # (B, n)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # log-softmax over a large vocabulary needs float32
    log_p = F.log_softmax(logits[keep], dim=-1)  # (N, V): only non-PAD rows, so PAD grads are 0
    nll = -log_p.gather(-1, targets[keep].unsqueeze(-1)).squeeze(-1)  # -log p_y, (N,)
    uniform = -log_p.mean(dim=-1)  # -(1/V) sum_v log p_v, (N,)
    return ((1.0 - smoothing) * nll + smoothing * uniform).mean()


def seq2seq_loss(*, pad_id: int, smoothing: float = 0.0) -> Callable[[nn.Module, Any], tuple[torch.Tensor, int]]:
    """The ``loss_fn`` of :func:`fit` for an encoder-decoder and :class:`~transformer_book.data.Seq2SeqBatch`.

    Returns ``loss_fn(model, batch) -> (loss, n_tokens)`` with ``logits = model(batch.src,
    batch.tgt_in)`` and :func:`label_smoothed_cross_entropy` against ``batch.tgt_out``. The
    smoothing applies only while the model is in training mode: in evaluation mode (the
    validation of :func:`fit`) the loss is the plain cross-entropy, so that ``exp(loss)`` is
    the perplexity.
    """
    checks.probability("seq2seq_loss", "smoothing", smoothing)

    def loss_fn(model: nn.Module, batch: Any) -> tuple[torch.Tensor, int]:
        logits = model(batch.src, batch.tgt_in)
        epsilon = smoothing if model.training else 0.0
        loss = label_smoothed_cross_entropy(logits, batch.tgt_out, pad_id=pad_id, smoothing=epsilon)
        return loss, int((batch.tgt_out != pad_id).sum())

    return loss_fn


def language_model_loss(*, smoothing: float = 0.0) -> Callable[[nn.Module, Any], tuple[torch.Tensor, int]]:
    """The ``loss_fn`` of :func:`~transformer_book.training.fit` for a language model and ``(x, y)`` batches of next tokens
    (:class:`~transformer_book.data.RandomWindows`): the mean cross-entropy of ``model(x)``
    against ``y`` over every position whose target is not ``IGNORE_INDEX`` (-100; e.g. the items
    of :class:`~transformer_book.data.incontext.InContextBatches`), label-smoothed only
    in training mode, so that the validation loss is the plain cross-entropy (its exponential the
    perplexity). The count it returns is the number of positions scored; a batch with none
    scores 0 (a mean over no positions, which cross-entropy's own mean makes NaN). A target id
    outside the vocabulary raises a ``ValueError`` (on a GPU it would be a device-side assert).
    Inside a compiled step (``torch.compile``) nothing is read back to the host: the count stays a
    tensor, the mean is the sum over at least one position, and the id check is left out
    (:func:`~transformer_book.checks.compiling`), so that the step compiles into one graph."""
    checks.probability("language_model_loss", "smoothing", smoothing)

    def loss_fn(model: nn.Module, batch: Any) -> tuple[torch.Tensor, int]:
        x, y = batch
        logits = model(x)
        epsilon = smoothing if model.training else 0.0
        kept = y != IGNORE_INDEX
        if checks.compiling():  # no wait for the device, no break in the graph
            scored = kept.sum()
            total = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(),
                y.reshape(-1),
                label_smoothing=epsilon,
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
            return total / scored.clamp(min=1), scored
        outside = kept & ((y < 0) | (y >= logits.shape[-1]))
        scored, bad = torch.stack([kept.sum(), outside.sum()]).tolist()  # one wait for the device, not two
        if bad:
            raise ValueError(
                f"language_model_loss: {bad} target id(s) lie outside [0, {logits.shape[-1]}) "
                f"(and are not IGNORE_INDEX {IGNORE_INDEX})"
            )
        if scored == 0:  # cross-entropy's mean over no positions is 0 / 0
            return logits.float().sum() * 0.0, 0
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            y.reshape(-1),
            label_smoothing=epsilon,
            ignore_index=IGNORE_INDEX,
        )
        return loss, scored

    return loss_fn
