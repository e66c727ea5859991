r"""Generating output sequences from a trained encoder-decoder (chapters 7 and 8).

Greedy decoding picks the most probable next token at every step,

.. math::

    \hat y_t = \operatorname*{arg\,max}_{v \in \mathcal{V}} P(v \mid \hat y_{<t}, x),

starting from :math:`\hat y_0 = \mathrm{SOS}`, until the sentence emits EOS or reaches the
length limit. A batch decodes all its sentences together: each sentence stops at *its own*
EOS and is padded with PAD from then on, and the loop ends when every sentence has stopped.

The functions here work with any model that has the encoder-decoder interface of
:class:`~transformer_book.models.transformer.Transformer` and :class:`~transformer_book.models.rnn.RNNSeq2Seq`:

* ``model.encode(src) -> (memory, src_mask)``
* ``model.decode(tgt_in, memory, src_mask) -> states (B, n, d)``
* ``model.output(states) -> logits (..., V)``
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from transformer_book.data.batching import pad_sequences
from transformer_book.subword import EOS_ID, PAD_ID, SOS_ID

__all__ = ["greedy_decode", "translate"]


def _check_src(src: torch.Tensor, where: str) -> None:
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.dtype.is_floating_point or src.dtype == torch.bool:
        what = f"shape {tuple(src.shape)}, dtype {src.dtype}" if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"{where}: src must be a (B, m) integer tensor, got {what}")
    if src.shape[0] == 0 or src.shape[1] == 0:
        raise ValueError(f"{where}: src has shape {tuple(src.shape)}; it needs at least one sentence and one token")


def _max_len(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    return getattr(config, "max_len", None)


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    *,
    max_new_tokens: int,
    sos_id: int = SOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> torch.Tensor:
    """Greedy decoding of a batch of source sentences.

    Runs the model in evaluation mode (and restores its mode afterwards). At each step the
    decoder reads the whole prefix generated so far; chapter 9 adds a cache that avoids
    recomputing it.

    Args:
        model: an encoder-decoder (see the module docstring).
        src: ``(B, m)`` source ids, PAD-padded.
        max_new_tokens: the most tokens generated per sentence (EOS included).

    Returns:
        ``(B, T)`` int64 ids, ``T <= max_new_tokens``, without SOS: each row is the sentence's
        tokens, its EOS (unless it hit the limit), then PAD.

    Raises:
        ValueError: ``src`` is not a non-empty 2-D integer tensor, or ``max_new_tokens`` is not a
            positive int or exceeds the model's ``config.max_len``.
    """
    _check_src(src, "greedy_decode")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"greedy_decode: max_new_tokens must be a positive int, got {max_new_tokens!r}")
    limit = _max_len(model)
    if limit is not None and max_new_tokens > limit:
        raise ValueError(f"greedy_decode: max_new_tokens={max_new_tokens} exceeds the model's max_len={limit}")
    was_training = model.training
    model.eval()
    try:
        memory, src_mask = model.encode(src)
        generated = torch.full((src.shape[0], 1), sos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_new_tokens):
            states = model.decode(generated, memory, src_mask)         # (B, t, d)
            next_token = model.output(states[:, -1]).argmax(dim=-1)    # (B,): the last position only
            next_token = next_token.masked_fill(finished, pad_id)      # stopped sentences get PAD
            generated = torch.cat([generated, next_token[:, None]], dim=1)
            finished |= next_token == eos_id                           # each sentence its own EOS
            if bool(finished.all()):
                break
    finally:
        model.train(was_training)
    return generated[:, 1:]


def translate(
    model: nn.Module,
    sentences: Sequence[str],
    source_tokenizer: Any,
    target_tokenizer: Any = None,
    *,
    batch_size: int = 100,
    max_new_tokens: int | None = None,
    device: torch.device | str | None = None,
) -> list[str]:
    """Translate sentences with greedy decoding and return the detokenised translations.

    Sentences are encoded with ``source_tokenizer`` (EOS appended), decoded in batches of
    similar length, and written out with ``target_tokenizer`` (default: the same tokeniser);
    the result is in the input order.

    Long inputs are rejected, not cut: a sentence that needs more positions than the model's
    ``config.max_len`` raises, naming the sentence. By default at most
    ``2 * (source length) + 10`` tokens are generated, capped at ``max_len``.

    Raises:
        ValueError: an empty or non-string sentence, or one longer than the model's maximum.
    """
    if isinstance(sentences, str):
        raise ValueError("translate: sentences must be a sequence of str, got one str")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"translate: batch_size must be a positive int, got {batch_size!r}")
    target_tokenizer = target_tokenizer or source_tokenizer
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str) or not sentence.strip():
            raise ValueError(f"translate: sentence {index} is {'empty' if isinstance(sentence, str) else type(sentence).__name__}")
    encoded = source_tokenizer.encode_batch(list(sentences), add_eos=True)
    limit = _max_len(model)
    if limit is not None:
        for index, ids in enumerate(encoded):
            if len(ids) > limit:
                raise ValueError(f"translate: sentence {index} has {len(ids)} tokens with EOS, more than the "
                                 f"model's max_len={limit}; split it into shorter sentences")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out: list[str] = [""] * len(encoded)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        src = pad_sequences([encoded[i] for i in chunk], PAD_ID).to(device)
        budget = max_new_tokens or 2 * src.shape[1] + 10
        if limit is not None:
            budget = min(budget, limit)
        hypotheses = greedy_decode(model, src, max_new_tokens=budget)
        for i, row in zip(chunk, hypotheses.cpu()):
            out[i] = target_tokenizer.decode(row)
    return out
