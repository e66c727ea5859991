r"""In-context learning measured in a small GPT (chapter 15).

A model trained on the sequences of :class:`~transformer_book.data.incontext.InContextTask`
answers each label position after :math:`k` demonstrations of the sequence's own, arbitrary
labelling. :func:`accuracy_by_demonstrations` measures how often its most probable next token
is the right label as :math:`k` grows, on assignments of labels that it never saw in training;
:func:`label_attention` reads where one head looks from the position that asks; with
:func:`~transformer_book.attention.heads_removed` a head can be taken out and the accuracy
measured again.
"""

from __future__ import annotations

from collections.abc import Callable
from math import comb

import torch
import torch.nn.functional as F

from transformer_book import checks
from transformer_book.contracts import IGNORE_INDEX, InContextBatch
from transformer_book.data.incontext import InContextTask
from transformer_book.models.gpt import GPT

__all__ = [
    "accuracy_by_demonstrations",
    "loss_by_demonstrations",
    "label_attention",
    "previous_item_attention",
    "ideal_accuracy",
    "icl_loss",
]


def _check(model: GPT, task: InContextTask, n: int, where: str) -> None:
    if not isinstance(model, GPT):
        raise ValueError(f"{where}: model must be a GPT, got {type(model).__name__}")
    if not isinstance(task, InContextTask):
        raise ValueError(f"{where}: task must be an InContextTask, got {type(task).__name__}")
    if model.config.vocab_size != task.vocab_size or model.config.context < task.length - 1:
        raise ValueError(
            f"{where}: the model (vocabulary {model.config.vocab_size}, context {model.config.context}) "
            f"does not fit the task (vocabulary {task.vocab_size}, {task.length - 1} positions)"
        )
    checks.positive_int(where, n=n)


@torch.no_grad()
def _logits(
    model: GPT, task: InContextTask, split: str, n: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits at the label positions ``(n, P, V)``, the labels ``(n, P)`` and the inputs ``(n, 2P)``."""
    x, y = task.batch(task.sample(n, torch.Generator().manual_seed(seed), split=split))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        logits = model(x.to(device)).float().cpu()
    finally:
        model.train(was_training)
    return logits[:, 1::2], y[:, 1::2], x


def accuracy_by_demonstrations(
    model: GPT, task: InContextTask, *, split: str = "test", n: int = 2_000, seed: int = 1
) -> torch.Tensor:
    r"""``(n_pairs,)``: entry :math:`k` is the share of ``n`` sequences of ``split`` (held-out
    label assignments by default) whose label after :math:`k` demonstrations is the model's most
    probable next token (over the whole vocabulary), in eval mode."""
    _check(model, task, n, "accuracy_by_demonstrations")
    logits, labels, _ = _logits(model, task, split, n, seed)
    return (logits.argmax(dim=-1) == labels).double().mean(dim=0)


def loss_by_demonstrations(
    model: GPT, task: InContextTask, *, split: str = "test", n: int = 2_000, seed: int = 1
) -> torch.Tensor:
    r"""``(n_pairs,)``: the mean cross-entropy (nats) of the label after :math:`k` demonstrations."""
    _check(model, task, n, "loss_by_demonstrations")
    logits, labels, _ = _logits(model, task, split, n, seed)
    return F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").double().mean(dim=0)


def ideal_accuracy(task: InContextTask, k: int) -> float:
    r"""The accuracy after :math:`k` demonstrations of a reader that answers right whenever the
    query's group has been shown and otherwise guesses among the labels not yet shown:
    :math:`1 - q^k + q^k / (L - s)`, averaged over how many other groups :math:`s` were shown,
    with :math:`q = 1 - 1/G` (computed exactly by summing over the demonstrations' groups)."""
    checks.non_negative_int("ideal_accuracy", k=k)
    G, L = task.n_groups, task.n_labels
    # P(the query's group unseen, and exactly s other groups seen) = C(G-1, s) * P(k draws cover a given s-set)
    unseen = 0.0
    for s in range(0, min(G - 1, k) + 1):
        # k demonstrations land in a fixed set of s other groups, covering all of them
        cover = sum((-1) ** j * comb(s, j) * ((s - j) / G) ** k for j in range(s + 1))
        unseen += comb(G - 1, s) * cover / (L - s)
    return 1.0 - (1 - 1 / G) ** k + unseen


def _attention_weights(
    model: GPT, task: InContextTask, layer: int, split: str, n: int, seed: int, where: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of ``split`` ``(n, positions)`` and the attention weights of ``layer`` on
    them, ``(n, heads, positions, positions)`` on the CPU, computed in eval mode (restored after)."""
    _check(model, task, n, where)
    checks.integer(where, "layer", layer, minimum=0, below=model.config.n_layers)
    _, _, x = _logits(model, task, split, n, seed)
    was_training = model.training
    model.eval()
    try:
        _, weights = model.attention_weights(x.to(next(model.parameters()).device))
    finally:
        model.train(was_training)
    return x, weights[layer].float().cpu()


@torch.no_grad()
def label_attention(
    model: GPT, task: InContextTask, layer: int, *, split: str = "test", n: int = 500, seed: int = 1
) -> dict[str, torch.Tensor]:
    r"""Where the heads of ``layer`` look from the last item (the query) of ``n`` sequences.

    Returns ``{"same group label", "other group label", "same group item", "other"}``, each
    ``(n_heads,)``: the mean attention weight that the query position puts on the labels that
    follow an item of the query's group, on the labels of the other groups, on the items of its
    own group (the query itself excluded), and on everything else (``[BOS]``, other items, itself).
    """
    x, weights = _attention_weights(model, task, layer, split, n, seed, "label_attention")
    query = x.shape[1] - 1  # the last item, whose label is asked
    w = weights[:, :, query]  # (n, h, positions)
    groups = task.group_of(x)  # (n, positions): -1 off items
    item_group = torch.full_like(groups, -1)
    item_group[:, 2::2] = groups[:, 1:-1:2]  # a label's item is the token before it
    own = groups[:, query : query + 1]  # (n, 1)
    same_label = (item_group == own) & (item_group >= 0)
    other_label = (item_group != own) & (item_group >= 0)
    same_item = groups == own
    same_item[:, query] = False
    parts = {"same group label": same_label, "other group label": other_label, "same group item": same_item}
    out = {name: (w * where[:, None, :]).sum(dim=-1).mean(dim=0) for name, where in parts.items()}
    out["other"] = 1.0 - sum(out.values())
    return out


@torch.no_grad()
def previous_item_attention(
    model: GPT, task: InContextTask, layer: int, *, split: str = "test", n: int = 500, seed: int = 1
) -> torch.Tensor:
    """``(n_heads,)``: the mean attention weight that the heads of ``layer`` put, from every label
    position, on the item just before it (the first half of an induction circuit: a label's
    position learns which word it labels)."""
    x, weights = _attention_weights(model, task, layer, split, n, seed, "previous_item_attention")
    labels = torch.arange(2, x.shape[1], 2)  # input positions holding a label
    return weights[:, :, labels, labels - 1].mean(dim=(0, 2))


def icl_loss(log: list[torch.Tensor] | None = None) -> Callable[[GPT, InContextBatch], tuple[torch.Tensor, int]]:
    """The loss function for :func:`~transformer_book.training.fit` on
    :class:`~transformer_book.data.incontext.InContextBatch` es: the mean cross-entropy of the
    labels (items are ``IGNORE_INDEX``), with the number of labels scored. With a list ``log``,
    every call in eval mode (a validation pass) also appends the ``(n_pairs,)`` accuracy after
    each number of demonstrations (the most probable next token against the label)."""
    if log is not None and not isinstance(log, list):
        raise ValueError(f"icl_loss: log must be a list or None, got {type(log).__name__}")

    def loss_fn(model: GPT, batch: InContextBatch) -> tuple[torch.Tensor, int]:
        x, y = batch
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), ignore_index=IGNORE_INDEX)
        if log is not None and not model.training:
            log.append((logits[:, 1::2].argmax(dim=-1) == y[:, 1::2]).double().mean(dim=0).cpu())
        return loss, int((y != IGNORE_INDEX).sum())

    return loss_fn
