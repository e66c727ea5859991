r"""Zero-shot classification by prompting a pretrained model (chapter 15).

A masked language model answers a task it was never trained on once the task is written as a
word to fill in (a *cloze*): the text goes into a template with one ``[MASK]``, such as
``"{text} it was [MASK] ."``, and each class is represented by a *label word* (``great`` for
positive, ``terrible`` for negative). The class is the label word the model finds most probable
behind the mask,

.. math::

    \hat y = \arg\max_{k}\; \log P_{\text{MLM}}\bigl(v_k \mid \text{template}(x)\bigr),

(Schick and Schütze, 2021). A causal language model does the same with the label word as the
*next* token after a prompt (Radford et al., 2019). Both are biased towards label words that
are frequent, or favoured by the template itself; *contextual calibration* (Zhao et al., 2021)
subtracts the log-probabilities that the model gives the label words for a content-free input
(``"N/A"`` in the template):

.. math::

    \hat y = \arg\max_{k}\; \log P(v_k \mid \text{template}(x)) - \log P(v_k \mid \text{template}(\text{N/A})).

The functions take the tokenizer as an ``encode(text) -> ids`` callable (no special tokens
added) and the special ids as arguments, so that they serve the book's WordPiece tokenizer and
a real checkpoint's tokenizer alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from transformer_book.models.bert import BERT
from transformer_book.models.gpt import GPT

__all__ = [
    "MASK_SLOT",
    "TEXT_SLOT",
    "label_word_ids",
    "cloze_inputs",
    "mask_log_probs",
    "cloze_scores",
    "next_token_log_probs",
    "next_token_log_probs_after",
    "calibrate",
]

TEXT_SLOT = "{text}"
"""Where the text goes in a template."""
MASK_SLOT = "[MASK]"
"""Where the mask goes in a cloze template."""


def label_word_ids(encode: Callable[[str], Sequence[int]], words: Sequence[str]) -> list[int]:
    """The id of each label word, which must be a single piece of the vocabulary.

    Raises:
        ValueError: a word that encodes to no piece or to several (name and pieces given).
    """
    ids = []
    for word in words:
        pieces = list(encode(word))
        if len(pieces) != 1:
            raise ValueError(
                f"label_word_ids: label word {word!r} encodes to {len(pieces)} pieces {pieces}; "
                "a label word must be exactly one piece"
            )
        ids.append(pieces[0])
    return ids


def _check_template(template: str) -> None:
    if template.count(TEXT_SLOT) != 1 or template.count(MASK_SLOT) != 1:
        raise ValueError(
            f"cloze_inputs: the template must hold {TEXT_SLOT} and {MASK_SLOT} once each, got {template!r}"
        )


def _room_for_text(parts: list, max_len: int) -> int:
    """The pieces left for the text in ``max_len``; refuses a template that leaves none."""
    fixed = sum(len(p) for p in parts if isinstance(p, list)) + 1 + 2
    if max_len - fixed < 1:
        raise ValueError(f"cloze_inputs: the template takes {fixed} of max_len={max_len} pieces; no room for the text")
    return max_len - fixed


def _check_one_mask(tokens: torch.Tensor, mask_id: int) -> None:
    counts = (tokens == mask_id).sum(dim=1)
    if not bool((counts == 1).all()):
        bad = int((counts != 1).nonzero()[0, 0])
        raise ValueError(
            f"mask_log_probs: row {bad} holds {int(counts[bad])} masks (id {mask_id}); exactly one is needed"
        )


def _check_prompts(prompts: Sequence[Sequence[int]], context: int) -> None:
    for i, prompt in enumerate(prompts):
        if not 1 <= len(prompt) <= context:
            raise ValueError(f"next_token_log_probs: prompt {i} has {len(prompt)} tokens; 1 to {context} are allowed")


def _check_cached_prompts(model: GPT, prefix: Sequence[int], prompts: Sequence[Sequence[int]]) -> None:
    if not hasattr(model, "decode_step"):
        raise ValueError(f"next_token_log_probs_after: {type(model).__name__} has no decode_step (a key/value cache)")
    if len(prefix) == 0:
        raise ValueError("next_token_log_probs_after: the prefix is empty; use next_token_log_probs")
    _check_prompts([[*prefix, *prompt] for prompt in prompts], model.config.context)
    _check_prompts(prompts, model.config.context)


def _check_calibration(scores: torch.Tensor, content_free: torch.Tensor) -> None:
    if scores.dim() != 2 or content_free.reshape(-1).shape[0] != scores.shape[1]:
        raise ValueError(
            f"calibrate: scores {tuple(scores.shape)} and content-free scores "
            f"{tuple(content_free.reshape(-1).shape)} do not match"
        )


def cloze_inputs(
    encode: Callable[[str], Sequence[int]],
    texts: Sequence[str],
    template: str,
    *,
    cls_id: int,
    sep_id: int,
    mask_id: int,
    max_len: int,
) -> list[list[int]]:
    """``[CLS] template(text) [SEP]`` for every text, with the template's ``[MASK]`` as ``mask_id``.

    The template holds :data:`TEXT_SLOT` and :data:`MASK_SLOT` once each, in either order; the
    words around them are encoded as they are. A text too long for ``max_len`` loses pieces
    from its end (never the template's).

    Raises:
        ValueError: a template without exactly one of each slot, or one that leaves no room for
            the text in ``max_len``.
    """
    _check_template(template)
    # the template's words are encoded once; a slot stays a str until each text fills it
    parts = [p if p in (TEXT_SLOT, MASK_SLOT) else list(encode(p)) if p.strip() else [] for p in _split(template)]
    room = _room_for_text(parts, max_len)  # max_len less [CLS], [SEP], the mask and the template's words
    out = []
    for text in texts:
        ids = [cls_id]
        for part in parts:
            if part == TEXT_SLOT:
                ids.extend(list(encode(text))[:room])
            elif part == MASK_SLOT:
                ids.append(mask_id)
            else:
                ids.extend(part)
        out.append(ids + [sep_id])
    return out


def _split(template: str) -> list[str]:
    first, second = sorted([(template.index(TEXT_SLOT), TEXT_SLOT), (template.index(MASK_SLOT), MASK_SLOT)])
    a, b = first[0], second[0]
    return [template[:a], first[1], template[a + len(first[1]) : b], second[1], template[b + len(second[1]) :]]


@torch.no_grad()
def mask_log_probs(
    model: BERT, tokens: torch.Tensor, *, mask_id: int, segments: torch.Tensor | None = None
) -> torch.Tensor:
    """``(B, vocab_size)`` log-probabilities of the MLM head at the one ``mask_id`` of each row
    of ``tokens`` ``(B, n)``, in eval mode (the mode is restored after).

    Raises:
        ValueError: a row without a mask, or with more than one.
    """
    _check_one_mask(tokens, mask_id)
    was_training = model.training
    model.eval()
    try:
        hidden = model.encode(tokens, segments)
        return torch.log_softmax(model.mlm_logits(hidden[tokens == mask_id]).float(), dim=-1)
    finally:
        model.train(was_training)


def cloze_scores(
    model: BERT, inputs: Sequence[Sequence[int]], label_ids: Sequence[int], *, mask_id: int, batch_size: int = 64
) -> torch.Tensor:
    """``(N, K)`` log-probabilities of the ``K`` label words behind the mask of each input (from
    :func:`cloze_inputs`), padded with the model's ``pad_id`` in batches of ``batch_size``."""
    device = next(model.parameters()).device
    label = torch.as_tensor(list(label_ids), device=device)
    rows = []
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start : start + batch_size]
        n = max(len(ids) for ids in chunk)
        tokens = torch.full((len(chunk), n), model.config.pad_id, dtype=torch.long)
        for b, ids in enumerate(chunk):
            tokens[b, : len(ids)] = torch.as_tensor(list(ids))
        rows.append(mask_log_probs(model, tokens.to(device), mask_id=mask_id)[:, label].cpu())
    return torch.cat(rows)


@torch.no_grad()
def next_token_log_probs(
    model: GPT, prompts: Sequence[Sequence[int]], *, pad_id: int = 0, batch_size: int = 16
) -> torch.Tensor:
    """``(N, vocab_size)`` log-probabilities of the token after each prompt under a causal
    model. Prompts are padded on the right, which a causal mask makes harmless: no position
    attends to a later one, so each prompt's last position sees only the prompt.

    Raises:
        ValueError: an empty prompt, or one longer than the model's context.
    """
    _check_prompts(prompts, model.config.context)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    rows = []
    try:
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            lengths = torch.tensor([len(p) for p in chunk], device=device)
            tokens = torch.full((len(chunk), int(lengths.max())), pad_id, dtype=torch.long)
            for b, prompt in enumerate(chunk):
                tokens[b, : len(prompt)] = torch.as_tensor(list(prompt))
            logits = model(tokens.to(device))
            last = logits[torch.arange(len(chunk), device=device), lengths - 1]
            rows.append(torch.log_softmax(last.float(), dim=-1).cpu())
    finally:
        model.train(was_training)
    return torch.cat(rows)


@torch.no_grad()
def next_token_log_probs_after(
    model: GPT, prefix: Sequence[int], prompts: Sequence[Sequence[int]], *, pad_id: int = 0, batch_size: int = 16
) -> torch.Tensor:
    """:func:`next_token_log_probs` of ``prefix + prompt`` for every prompt, with the shared prefix
    (the demonstrations of a few-shot prompt, a system prompt) computed once: its keys and values
    (``decode_step``) are copied into every row of a batch, and only the prompts' own tokens run
    through the model. The numbers are those of the full prompts, to rounding; the work is that of
    the prompts alone. Prompts are batched by length (less padding), the result in their order.

    Raises:
        ValueError: an empty prefix or prompt, one that makes the whole longer than the model's
            context, or a model without ``decode_step``.
    """
    _check_cached_prompts(model, prefix, prompts)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = torch.empty(len(prompts), model.config.vocab_size)
    try:
        _, prefix_caches = model.decode_step(torch.as_tensor([list(prefix)], device=device))
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            lengths = torch.tensor([len(prompts[i]) for i in chunk], device=device)
            tokens = torch.full((len(chunk), int(lengths.max())), pad_id, dtype=torch.long)
            for b, i in enumerate(chunk):
                tokens[b, : len(prompts[i])] = torch.as_tensor(list(prompts[i]))
            rows = torch.zeros(len(chunk), dtype=torch.long, device=device)
            logits, _ = model.decode_step(tokens.to(device), [cache.select(rows) for cache in prefix_caches])
            last = logits[torch.arange(len(chunk), device=device), lengths - 1]
            out[chunk] = torch.log_softmax(last.float(), dim=-1).cpu()
    finally:
        model.train(was_training)
    return out


def calibrate(scores: torch.Tensor, content_free: torch.Tensor) -> torch.Tensor:
    """Contextual calibration: ``scores (N, K)`` minus the ``(K,)`` (or ``(1, K)``) log-probabilities
    of the label words for a content-free input; take the ``argmax`` of the result.

    Raises:
        ValueError: shapes that do not match.
    """
    _check_calibration(scores, content_free)
    return scores - content_free.reshape(-1)
