r"""A task that can only be solved in context: labels that change from one sequence to the next
(chapter 15).

Every sequence is a prompt of demonstrations followed by their answers,

.. code-block:: text

    [BOS]  x_1 y_1  x_2 y_2  ...  x_P y_P

Each item :math:`x_i` is a word of one of ``n_groups`` fixed groups (think of *positive* and
*negative* words); which group a word belongs to never changes, so a model can learn it into its
weights. Each label :math:`y_i` is the label word that *this sequence* gives to the item's group:
a sequence draws an assignment of distinct label words to the groups, at random, and every item
of a group gets its group's word. So :math:`y_1` cannot be known from :math:`x_1` alone (the
label words are arbitrary, as in a sentiment prompt whose answers are *foo* and *bar*), but once
an item of the same group has been shown with its label, :math:`y_i` can be read off the
context: the position of label :math:`i` is a few-shot question with :math:`i - 1`
demonstrations before it. A model that does this perfectly answers with probability
:math:`1 - (1 - 1/G)^{k}` right after :math:`k` demonstrations for :math:`G` groups, plus its luck
when the group has not been shown.

The assignments of label words to groups are split once (by ``seed``) into those seen in
training and those held out, so that a test sequence's mapping was never trained on; the split
keeps every label equally frequent for every group on both sides.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from transformer_book import checks
from transformer_book.contracts import IGNORE_INDEX, InContextBatch

__all__ = ["InContextTask", "InContextBatch", "InContextBatches", "SPLITS"]

SPLITS = ("train", "test")
"""The two sets of label assignments, the one trained on and the one held out."""


def _check_sample(n: int, split: str) -> None:
    checks.positive_int("InContextTask.sample", n=n)
    checks.choice("InContextTask.sample", "split", split, SPLITS)


@dataclass(frozen=True)
class InContextTask:
    """The task's sizes and its vocabulary.

    Token ids: ``0`` is ``[BOS]``; the items of group ``g`` are
    ``1 + g * items_per_group ... (g + 1) * items_per_group``; the ``n_labels`` label words
    follow. A sequence holds ``n_pairs`` (item, label) pairs. About ``held_out`` of the ordered
    assignments of distinct label words to the groups are kept for testing, chosen by ``seed``
    (whole classes of assignments that differ by a rotation of the labels).
    """

    n_groups: int = 2
    items_per_group: int = 32
    n_labels: int = 16
    n_pairs: int = 9
    held_out: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        checks.positive_int(
            "InContextTask",
            n_groups=self.n_groups,
            items_per_group=self.items_per_group,
            n_labels=self.n_labels,
            n_pairs=self.n_pairs,
        )
        if self.n_groups < 2:
            raise ValueError(
                f"InContextTask: n_groups must be at least 2 (one group needs no context), got {self.n_groups}"
            )
        if self.n_labels < self.n_groups:
            raise ValueError(
                f"InContextTask: n_labels={self.n_labels} cannot give {self.n_groups} groups distinct labels"
            )
        if math.perm(self.n_labels, self.n_groups) > 1_000_000:
            raise ValueError(
                f"InContextTask: {math.perm(self.n_labels, self.n_groups):,} assignments are too many "
                f"to enumerate; use fewer labels or groups"
            )
        checks.probability("InContextTask", "held_out", self.held_out, zero=False)
        patterns = math.perm(self.n_labels - 1, self.n_groups - 1)
        if patterns < 2:
            raise ValueError(
                f"InContextTask: {self.n_labels} labels for {self.n_groups} groups give {patterns} rotation "
                f"class of assignments; at least 2 are needed to hold one out (use more labels)"
            )
        if max(1, round(self.held_out * patterns)) >= patterns:
            raise ValueError(
                f"InContextTask: held_out={self.held_out} of {patterns} rotation classes leaves none for training"
            )
        checks.non_negative_int("InContextTask", seed=self.seed)

    @property
    def bos_id(self) -> int:
        """The id of ``[BOS]``, the first token of every sequence."""
        return 0

    @property
    def vocab_size(self) -> int:
        """``[BOS]``, the items and the labels."""
        return 1 + self.n_groups * self.items_per_group + self.n_labels

    @property
    def label_ids(self) -> torch.Tensor:
        """``(n_labels,)`` the ids of the label words."""
        first = 1 + self.n_groups * self.items_per_group
        return torch.arange(first, first + self.n_labels)

    def group_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """The group of every item id in ``tokens`` (``-1`` for ``[BOS]`` and labels)."""
        items = (tokens >= 1) & (tokens <= self.n_groups * self.items_per_group)
        return torch.where(items, (tokens - 1) // self.items_per_group, torch.full_like(tokens, -1))

    @property
    def length(self) -> int:
        """Tokens per sequence, ``2 * n_pairs + 1`` (the model reads all but the last)."""
        return 2 * self.n_pairs + 1

    def assignments(self, split: str) -> torch.Tensor:
        """``(K, n_groups)`` label indices (0-based, into :attr:`label_ids`): row ``k`` gives group
        ``g`` the label ``row[g]``. ``"train"`` and ``"test"`` share no row."""
        checks.choice("InContextTask.assignments", "split", split, SPLITS)
        return _assignments(self, split).clone()

    def sample(self, n: int, generator: torch.Generator, *, split: str = "train") -> torch.Tensor:
        """``(n, length)`` sequences ``[BOS] x_1 y_1 ... x_P y_P``: each draws an assignment of
        ``split``, then every item uniformly (its group uniformly, then a word of the group)."""
        _check_sample(n, split)
        table = _assignments(self, split)
        chosen = table[torch.randint(len(table), (n,), generator=generator)]  # (n, G)
        groups = torch.randint(self.n_groups, (n, self.n_pairs), generator=generator)
        words = torch.randint(self.items_per_group, (n, self.n_pairs), generator=generator)
        tokens = torch.empty(n, self.length, dtype=torch.long)
        tokens[:, 0] = self.bos_id
        tokens[:, 1::2] = 1 + groups * self.items_per_group + words
        tokens[:, 2::2] = self.label_ids[chosen.gather(1, groups)]
        return tokens

    def batch(self, tokens: torch.Tensor) -> InContextBatch:
        """Inputs and next-token targets of ``tokens`` ``(B, length)``; only labels are targets."""
        if tokens.dim() != 2 or tokens.shape[1] != self.length:
            raise ValueError(f"InContextTask.batch: tokens must be (B, {self.length}), got {tuple(tokens.shape)}")
        x, y = tokens[:, :-1], tokens[:, 1:].clone()
        y[:, 0::2] = IGNORE_INDEX  # the next token is an item: random, not a question
        return InContextBatch(x, y)


@functools.lru_cache(maxsize=32)
def _assignments(task: InContextTask, split: str) -> torch.Tensor:
    """The split of the assignments by their *offsets* ``(l_g - l_0) mod L``: every offset pattern
    belongs to one split with all ``L`` rotations of it, so that in both splits every label is
    equally often the label of every group (no label is rarer in the test split, which a model
    could otherwise exploit, or suffer from, before any demonstration)."""
    G, L = task.n_groups, task.n_labels
    patterns = [p for p in itertools.permutations(range(1, L), G - 1)]  # distinct non-zero offsets
    order = torch.randperm(len(patterns), generator=torch.Generator().manual_seed(task.seed)).tolist()
    n_test = max(1, round(task.held_out * len(patterns)))
    if n_test >= len(patterns):
        raise ValueError(
            f"InContextTask: held_out={task.held_out} leaves no assignment for training "
            f"({len(patterns)} offset patterns)"
        )
    chosen = sorted(order[:n_test]) if split == "test" else sorted(order[n_test:])
    rows = [[first, *((first + offset) % L for offset in patterns[i])] for i in chosen for first in range(L)]
    return torch.tensor(sorted(rows))


class InContextBatches:
    """Training batches of a task, addressable by step (as :func:`~transformer_book.training.fit`
    needs): batch ``s`` is ``batch_size`` fresh sequences drawn from the training assignments
    with a generator seeded by ``(seed, s)`` (through NumPy's ``SeedSequence``, so that no two
    pairs share a stream), so a run repeats exactly and never runs out."""

    def __init__(self, task: InContextTask, batch_size: int, *, seed: int = 0) -> None:
        if not isinstance(task, InContextTask):
            raise ValueError(f"InContextBatches: task must be an InContextTask, got {type(task).__name__}")
        checks.positive_int("InContextBatches", batch_size=batch_size)
        checks.non_negative_int("InContextBatches", seed=seed)
        self.task, self.batch_size, self.seed = task, batch_size, seed

    def __call__(self, step: int) -> InContextBatch:
        checks.non_negative_int("InContextBatches", step=step)
        seed = np.random.SeedSequence([self.seed, step]).generate_state(1, dtype=np.uint64)[0]
        generator = torch.Generator().manual_seed(int(seed))
        return self.task.batch(self.task.sample(self.batch_size, generator))

    def __repr__(self) -> str:
        return f"InContextBatches({self.task}, batch_size={self.batch_size}, seed={self.seed})"
