"""Tests of the in-context learning task and its measurements (chapter 15):
transformer_book.data.incontext (InContextTask, InContextBatch, InContextBatches),
transformer_book.incontext (accuracy_by_demonstrations, loss_by_demonstrations, ideal_accuracy,
label_attention), transformer_book.attention.heads_removed, the attention weights of
GPT.attention_weights / Encoder.forward with need_weights=True, and the IGNORE_INDEX handling of
transformer_book.objectives.language_model_loss."""

import itertools
import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.attention import MultiHeadAttention, heads_removed
from transformer_book.data.incontext import SPLITS, InContextBatch, InContextBatches, InContextTask
from transformer_book.data.pretraining import IGNORE_INDEX
from transformer_book.incontext import (
    accuracy_by_demonstrations,
    ideal_accuracy,
    label_attention,
    loss_by_demonstrations,
)
from transformer_book.models import GPT
from transformer_book.models.gpt import GPTConfig
from transformer_book.models.transformer import Encoder
from transformer_book.objectives import language_model_loss

pytestmark = pytest.mark.usefixtures("one_thread")


def small_task(**changes):
    return InContextTask(**{**dict(n_groups=2, items_per_group=4, n_labels=6, n_pairs=5), **changes})


def small_gpt(task, **changes):
    torch.manual_seed(0)
    config = dict(vocab_size=task.vocab_size, context=task.length - 1, d_model=16, n_heads=2, n_layers=2, dropout=0.0)
    return GPT(GPTConfig(**{**config, **changes}))


def shown_assignment(task, sequence):
    """``{group: label index}`` read off one full sequence ``[BOS] x_1 y_1 ... x_P y_P``; checks
    that every item of a group carries one label."""
    groups = task.group_of(sequence[1::2]).tolist()
    labels = (sequence[2::2] - int(task.label_ids[0])).tolist()
    assignment = {}
    for g, label in zip(groups, labels):
        assert assignment.setdefault(g, label) == label, f"group {g} has two labels in {sequence.tolist()}"
    return assignment


def consistent_with(assignment, rows):
    """Whether some row of ``rows`` (full assignments) agrees with a (possibly partial) one."""
    return any(all(row[g] == label for g, label in assignment.items()) for row in rows)


# ---- the task's vocabulary ------------------------------------------------------------------------


def test_vocabulary_layout_bos_then_items_group_by_group_then_labels():
    task = InContextTask(n_groups=2, items_per_group=3, n_labels=4, n_pairs=7)
    # by hand: 0 = [BOS]; 1, 2, 3 group 0; 4, 5, 6 group 1; 7 .. 10 labels
    assert task.bos_id == 0
    assert task.vocab_size == 11
    assert task.label_ids.tolist() == [7, 8, 9, 10]
    assert task.group_of(torch.arange(11)).tolist() == [-1, 0, 0, 0, 1, 1, 1, -1, -1, -1, -1]
    assert task.length == 15


def test_group_of_keeps_the_shape_and_matches_a_loop_for_three_groups():
    task = InContextTask(n_groups=3, items_per_group=5, n_labels=4, n_pairs=2)
    ids = torch.arange(task.vocab_size).reshape(4, -1)  # 1 + 15 + 4 = 20 ids
    expected = torch.tensor([[(i - 1) // 5 if 1 <= i <= 15 else -1 for i in row] for row in ids.tolist()])
    assert torch.equal(task.group_of(ids), expected)
    assert task.label_ids.tolist() == list(range(16, 20))


# ---- the split of the assignments ------------------------------------------------------------------


@pytest.mark.parametrize("groups, labels, held_out", [(2, 6, 0.2), (2, 16, 0.2), (3, 5, 0.3), (3, 7, 0.25)])
def test_train_and_test_assignments_partition_every_ordered_assignment(groups, labels, held_out):
    task = InContextTask(n_groups=groups, n_labels=labels, held_out=held_out, items_per_group=2)
    train = [tuple(row) for row in task.assignments("train").tolist()]
    test = [tuple(row) for row in task.assignments("test").tolist()]
    every = set(itertools.permutations(range(labels), groups))
    assert len(train) == len(set(train)) and len(test) == len(set(test))  # no row twice
    assert not set(train) & set(test)  # disjoint
    assert len(train) + len(test) == len(every) and set(train) | set(test) == every
    assert all(len(set(row)) == groups for row in train + test)  # distinct labels per row
    assert task.assignments("train").shape == (len(train), groups)


@pytest.mark.parametrize("groups, labels", [(2, 6), (2, 16), (3, 5), (3, 7)])
def test_every_label_is_equally_frequent_for_every_group_in_each_split(groups, labels):
    task = InContextTask(n_groups=groups, n_labels=labels, items_per_group=2)
    for split in SPLITS:
        rows = task.assignments(split).tolist()
        assert len(rows) % labels == 0
        for g in range(groups):
            counts = Counter(row[g] for row in rows)
            assert sorted(counts) == list(range(labels)), (split, g)
            assert set(counts.values()) == {len(rows) // labels}, (split, g, counts)


@pytest.mark.parametrize(
    "groups, labels, held_out", [(2, 16, 0.2), (2, 11, 0.5), (3, 8, 0.3), (3, 6, 0.1), (2, 4, 0.1)]
)
def test_the_held_out_share_is_close_to_held_out(groups, labels, held_out):
    task = InContextTask(n_groups=groups, n_labels=labels, held_out=held_out, items_per_group=2)
    total = math.perm(labels, groups)
    classes = total // labels  # assignments are held out by whole rotation classes
    share = len(task.assignments("test")) / total
    if held_out * classes < 0.5:  # too few classes: still one held out
        assert share == pytest.approx(1 / classes)
    else:  # the nearest whole number of classes
        assert abs(share - held_out) <= 0.5 / classes + 1e-12


def test_the_test_split_is_closed_under_rotating_the_labels():
    task = InContextTask(n_groups=3, n_labels=7, items_per_group=2, held_out=0.3)
    test = {tuple(row) for row in task.assignments("test").tolist()}
    for row in test:
        for shift in range(7):
            assert tuple((label + shift) % 7 for label in row) in test


def test_the_split_depends_on_the_seed_only():
    def test_rows(**changes):
        return {
            tuple(r)
            for r in InContextTask(**{**dict(n_labels=16, items_per_group=2), **changes}).assignments("test").tolist()
        }

    assert test_rows(seed=3) == test_rows(seed=3)
    assert test_rows(seed=3) == test_rows(seed=3, n_pairs=4, items_per_group=7)  # the split is of labels only
    assert len({frozenset(test_rows(seed=s)) for s in range(5)}) > 1


def test_assignments_returns_a_copy():
    task = small_task()
    rows = task.assignments("train")
    rows.fill_(0)
    assert len({tuple(r) for r in task.assignments("train").tolist()}) == len(rows)


# ---- sequences and batches -------------------------------------------------------------------------


@pytest.mark.parametrize("split", SPLITS)
def test_sample_builds_pairs_whose_labels_follow_the_assignment_of_the_split(split):
    task = InContextTask(n_groups=3, items_per_group=4, n_labels=5, n_pairs=6)
    tokens = task.sample(400, torch.Generator().manual_seed(0), split=split)
    assert tokens.shape == (400, 13) and tokens.dtype == torch.long
    assert (tokens[:, 0] == 0).all()
    assert (task.group_of(tokens[:, 1::2]) >= 0).all()  # items at odd positions
    assert torch.isin(tokens[:, 2::2], task.label_ids).all()  # labels at even positions
    rows = task.assignments(split).tolist()
    other = task.assignments("test" if split == "train" else "train").tolist()
    for sequence in tokens:
        assignment = shown_assignment(task, sequence)  # one label per group
        assert len(set(assignment.values())) == len(assignment)  # groups differ
        assert consistent_with(assignment, rows)
        if len(assignment) == 3:
            assert [assignment[g] for g in range(3)] in rows
            assert [assignment[g] for g in range(3)] not in other


def test_sample_draws_items_and_groups_broadly():
    task = InContextTask(n_groups=2, items_per_group=3, n_labels=4, n_pairs=8)
    tokens = task.sample(300, torch.Generator().manual_seed(1))
    assert set(tokens[:, 1::2].unique().tolist()) == set(range(1, 7))  # every item word occurs
    assert set(tokens[:, 2::2].unique().tolist()) == set(range(7, 11))  # every label word occurs
    share = (task.group_of(tokens[:, 1::2]) == 0).double().mean().item()
    assert abs(share - 0.5) < 4 * math.sqrt(0.25 / tokens[:, 1::2].numel())


def test_sample_is_deterministic_for_one_generator_state():
    task = small_task()
    a = task.sample(20, torch.Generator().manual_seed(5))
    b = task.sample(20, torch.Generator().manual_seed(5))
    c = task.sample(20, torch.Generator().manual_seed(6))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    g = torch.Generator().manual_seed(5)
    first, second = task.sample(20, g), task.sample(20, g)
    assert torch.equal(first, a) and not torch.equal(first, second)  # the generator advances


def test_batch_shifts_by_one_and_targets_only_the_labels():
    task = small_task(n_pairs=4)
    tokens = task.sample(7, torch.Generator().manual_seed(0))
    batch = task.batch(tokens)
    assert isinstance(batch, InContextBatch)
    x, y = batch
    assert x.shape == y.shape == (7, 8)
    assert torch.equal(x, tokens[:, :-1])
    for b in range(7):
        for t in range(8):
            next_token = int(tokens[b, t + 1])
            if task.group_of(torch.tensor(next_token)) >= 0:  # the next token is an item
                assert y[b, t] == IGNORE_INDEX
            else:
                assert y[b, t] == next_token
    for k in range(4):
        assert torch.equal(y[:, 2 * k + 1], tokens[:, 2 * k + 2])  # the label of pair k
    assert (y == IGNORE_INDEX).sum() == 7 * 4
    assert torch.equal(tokens, task.sample(7, torch.Generator().manual_seed(0)))  # tokens untouched


def test_in_context_batches_are_addressable_by_step_and_use_training_assignments_only():
    task = InContextTask(n_groups=2, items_per_group=4, n_labels=6, n_pairs=6)
    batches = InContextBatches(task, 32, seed=2)
    assert torch.equal(batches(3).x, batches(3).x) and torch.equal(batches(3).y, batches(3).y)
    assert torch.equal(batches(3).x, InContextBatches(task, 32, seed=2)(3).x)
    assert not torch.equal(batches(3).x, batches(4).x)
    assert not torch.equal(batches(3).x, InContextBatches(task, 32, seed=3)(3).x)
    train, test = task.assignments("train").tolist(), task.assignments("test").tolist()
    for step in range(6):
        x, y = batches(step)
        assert x.shape == y.shape == (32, 12)
        assert torch.equal(y, task.batch(torch.cat([x, y[:, -1:]], dim=1)).y)
        for sequence in torch.cat([x, y[:, -1:]], dim=1):
            assignment = shown_assignment(task, sequence)
            assert consistent_with(assignment, train)
            if len(assignment) == 2:
                assert [assignment[0], assignment[1]] not in test
    assert "batch_size=32" in repr(batches)


# ---- errors of the task ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(n_groups=0), "n_groups must be a positive int"),
        (dict(n_groups=1), "n_groups must be at least 2"),
        (dict(items_per_group=True), "items_per_group must be a positive int"),
        (dict(n_labels=2.0), "n_labels must be a positive int"),
        (dict(n_pairs=0), "n_pairs must be a positive int"),
        (dict(n_groups=3, n_labels=2), "n_labels=2 cannot give 3 groups distinct labels"),
        (dict(n_groups=5, n_labels=20), "too many"),
        (dict(held_out=0.0), r"held_out must lie in \(0, 1\)"),
        (dict(held_out=1.0), r"held_out must lie in \(0, 1\)"),
        (dict(seed=-1), "seed must be a non-negative int"),
        (dict(seed=False), "seed must be a non-negative int"),
    ],
)
def test_bad_task_sizes_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        small_task(**changes)


def test_bad_splits_samples_and_batches_are_refused():
    task = small_task()
    with pytest.raises(ValueError, match="split must be one of"):
        task.assignments("valid")
    with pytest.raises(ValueError, match="split must be one of"):
        task.sample(3, torch.Generator(), split="validation")
    for n in (0, -2, True, 2.0):
        with pytest.raises(ValueError, match="n must be a positive int"):
            task.sample(n, torch.Generator())
    tokens = task.sample(3, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"tokens must be \(B, 11\)"):
        task.batch(tokens[:, :-1])
    with pytest.raises(ValueError, match=r"tokens must be \(B, 11\)"):
        task.batch(tokens[0])
    with pytest.raises(ValueError, match="held_out=0.9 of 3 rotation classes leaves none for training"):
        InContextTask(n_groups=2, n_labels=4, held_out=0.9)  # 3 classes, all held out
    with pytest.raises(ValueError, match="give 1 rotation class of assignments; at least 2"):
        InContextTask(n_groups=2, n_labels=2)


def test_bad_in_context_batches_are_refused():
    task = small_task()
    with pytest.raises(ValueError, match="task must be an InContextTask"):
        InContextBatches("task", 4)
    for size in (0, True, 4.0):
        with pytest.raises(ValueError, match="batch_size must be a positive int"):
            InContextBatches(task, size)
    for seed in (-1, True, 1.5):
        with pytest.raises(ValueError, match="seed must be a non-negative int"):
            InContextBatches(task, 4, seed=seed)
    batches = InContextBatches(task, 4)
    for step in (-1, False, 2.0):
        with pytest.raises(ValueError, match="step must be a non-negative int"):
            batches(step)


# ---- the ideal reader ------------------------------------------------------------------------------


def simulate_ideal_reader(groups, labels, k, n, seed):
    """Accuracy of the ideal reader, by simulation: distinct labels per group, ``k`` demonstrations
    of uniform groups, a query of a uniform group; right when its group was shown, otherwise a
    uniform guess among the labels not shown."""
    g = torch.Generator().manual_seed(seed)
    assignment = torch.rand(n, labels, generator=g).argsort(dim=1)[:, :groups]  # (n, G) distinct
    demos = torch.randint(groups, (n, k), generator=g)
    query = torch.randint(groups, (n,), generator=g)
    seen = (demos == query[:, None]).any(dim=1)
    shown_labels = torch.zeros(n, labels, dtype=torch.bool)
    for j in range(k):
        shown_labels[torch.arange(n), assignment.gather(1, demos[:, j : j + 1]).squeeze(1)] = True
    scores = torch.rand(n, labels, generator=g).masked_fill(shown_labels, -1.0)
    guess = scores.argmax(dim=1)
    right = seen | (guess == assignment.gather(1, query[:, None]).squeeze(1))
    return right.double().mean().item()


def test_ideal_accuracy_without_demonstrations_is_chance():
    for groups, labels in [(2, 3), (2, 16), (3, 5), (4, 9)]:
        task = InContextTask(n_groups=groups, n_labels=labels, items_per_group=1)
        assert ideal_accuracy(task, 0) == pytest.approx(1 / labels, abs=1e-12)


def test_ideal_accuracy_for_two_groups_is_the_closed_form():
    # two groups: if the query's group was not shown (probability 1/2^k), the other one was (k >= 1)
    task = InContextTask(n_groups=2, n_labels=16, items_per_group=1)
    for k in range(1, 12):
        assert ideal_accuracy(task, k) == pytest.approx(1 - 0.5**k + 0.5**k / 15, abs=1e-12)


@pytest.mark.parametrize("groups, labels, k", [(3, 5, 2), (3, 4, 4), (4, 6, 3), (2, 5, 1)])
def test_ideal_accuracy_matches_a_simulation_of_the_ideal_reader(groups, labels, k):
    n = 100_000
    task = InContextTask(n_groups=groups, n_labels=labels, items_per_group=1)
    p = ideal_accuracy(task, k)
    simulated = simulate_ideal_reader(groups, labels, k, n, seed=groups * 100 + labels * 10 + k)
    assert abs(simulated - p) < 4.5 * math.sqrt(p * (1 - p) / n)


def test_ideal_accuracy_grows_with_k_towards_one():
    for groups, labels in [(2, 16), (3, 5), (4, 9)]:
        task = InContextTask(n_groups=groups, n_labels=labels, items_per_group=1)
        curve = [ideal_accuracy(task, k) for k in range(40)]
        assert all(0 < a <= 1 for a in curve)
        assert all(b >= a - 1e-15 for a, b in zip(curve, curve[1:]))
        assert curve[1] > curve[0] and curve[-1] > 0.99


def test_ideal_accuracy_refuses_a_bad_k():
    task = small_task()
    for k in (-1, 1.0, True, "2"):
        with pytest.raises(ValueError, match="k must be a non-negative int"):
            ideal_accuracy(task, k)


# ---- accuracy and loss by demonstrations -----------------------------------------------------------


class Oracle(GPT):
    """The ideal reader as a GPT: at an item it scores the label of the latest earlier item of the
    same group high; if there is none, all labels not yet shown equally (up to a tie-breaking
    noise of 1e-6), the labels shown lower, every other token far lower."""

    def __init__(self, task):
        super().__init__(
            GPTConfig(
                vocab_size=task.vocab_size, context=task.length - 1, d_model=4, n_heads=1, n_layers=1, dropout=0.0
            )
        )
        self.task, self.modes, self.calls = task, [], 0

    def forward(self, tokens, need_weights=False):
        self.modes.append(self.training)
        task, (B, n) = self.task, tokens.shape
        first, L = int(task.label_ids[0]), task.n_labels
        noise = torch.Generator().manual_seed(1000 + self.calls)
        self.calls += 1
        rows = torch.arange(B)
        logits = torch.full((B, n, task.vocab_size), -1e4)
        last = torch.full((B, task.n_groups), -1)  # the label each group showed
        for t in range(1, n, 2):  # the items
            if t >= 3:  # the pair before: (t - 2, t - 1)
                last[rows, task.group_of(tokens[:, t - 2])] = tokens[:, t - 1] - first
            shown = torch.zeros(B, L, dtype=torch.bool)
            for g in range(task.n_groups):
                has = last[:, g] >= 0
                shown[rows[has], last[has, g]] = True
            scores = (torch.rand(B, L, generator=noise) * 1e-6).masked_fill(shown, -20.0)
            known = last[rows, task.group_of(tokens[:, t])]
            scores[rows[known >= 0], known[known >= 0]] = 20.0
            logits[:, t, first : first + L] = scores
        return logits


@pytest.mark.parametrize("changes", [dict(n_groups=3, n_labels=5, n_pairs=6), dict(n_groups=2, n_labels=4, n_pairs=5)])
def test_an_ideal_reader_model_reaches_the_ideal_accuracy(changes):
    task = InContextTask(items_per_group=4, **changes)
    model = Oracle(task)
    n = 3000
    accuracy = accuracy_by_demonstrations(model, task, n=n)
    assert accuracy.shape == (task.n_pairs,) and accuracy.dtype == torch.float64
    for k in range(task.n_pairs):
        p = ideal_accuracy(task, k)
        assert abs(accuracy[k].item() - p) < 4.5 * math.sqrt(p * (1 - p) / n) + 1e-12, (k, accuracy[k], p)
    loss = loss_by_demonstrations(model, task, n=500)
    assert loss.shape == (task.n_pairs,)
    assert loss[0].item() == pytest.approx(math.log(task.n_labels), abs=1e-5)  # k = 0: uniform over labels
    assert (loss[1:] < loss[0]).all()


def test_measurements_run_in_eval_mode_and_restore_the_mode():
    task = small_task()
    model = Oracle(task)
    model.train()
    accuracy_by_demonstrations(model, task, n=10)
    loss_by_demonstrations(model, task, n=10)
    assert model.modes == [False, False] and model.training
    model.eval()
    accuracy_by_demonstrations(model, task, n=10)
    assert model.modes[-1] is False and not model.training


def test_accuracy_and_loss_use_the_requested_split_and_seed():
    task = small_task()
    seen = []

    class Recorder(Oracle):
        def forward(self, tokens, need_weights=False):
            seen.append(tokens.clone())
            return super().forward(tokens, need_weights)

    model = Recorder(task)
    accuracy_by_demonstrations(model, task, n=200, split="train", seed=4)
    accuracy_by_demonstrations(model, task, n=200, split="train", seed=4)
    accuracy_by_demonstrations(model, task, n=200, split="test", seed=4)
    assert torch.equal(seen[0], seen[1]) and seen[0].shape == (200, 2 * task.n_pairs)
    for tokens, split in ((seen[0], "train"), (seen[2], "test")):
        rows = task.assignments(split).tolist()
        for sequence in tokens:
            assert consistent_with(shown_assignment(task, sequence), rows)


def test_an_untrained_gpt_gives_a_curve_of_shares_and_a_loss_near_log_vocabulary():
    task = small_task()
    model = small_gpt(task)
    n = 40
    accuracy = accuracy_by_demonstrations(model, task, n=n)
    assert accuracy.shape == (task.n_pairs,)
    assert ((accuracy >= 0) & (accuracy <= 1)).all()
    assert torch.allclose(accuracy * n, (accuracy * n).round(), atol=1e-9)  # counts out of n
    loss = loss_by_demonstrations(model, task, n=n)
    assert loss.shape == (task.n_pairs,) and torch.isfinite(loss).all()
    # GPT-2's initialisation gives logits of scale ~0.02 * sqrt(d_model): nearly uniform
    assert (loss - math.log(task.vocab_size)).abs().max() < 0.1


def test_measurements_refuse_a_model_or_n_that_does_not_fit():
    task = small_task()
    for measure in (accuracy_by_demonstrations, loss_by_demonstrations, label_attention):
        name = measure.__name__
        extra = dict(layer=0) if measure is label_attention else {}
        with pytest.raises(ValueError, match=f"{name}: model must be a GPT, got Linear"):
            measure(nn.Linear(2, 2), task, **extra)
        with pytest.raises(ValueError, match=f"{name}: task must be an InContextTask"):
            measure(small_gpt(task), "task", **extra)
        with pytest.raises(ValueError, match="does not fit the task"):
            measure(small_gpt(task, vocab_size=task.vocab_size + 1), task, **extra)
        with pytest.raises(ValueError, match="does not fit the task"):
            measure(small_gpt(task, context=task.length - 2), task, **extra)
        for n in (0, True, 2.5):
            with pytest.raises(ValueError, match="n must be a positive int"):
                measure(small_gpt(task), task, n=n, **extra)
    accuracy_by_demonstrations(small_gpt(task, context=task.length + 5), task, n=2)  # a longer context fits


# ---- label attention -------------------------------------------------------------------------------


class FixedAttention(GPT):
    """A GPT whose attention weights are chosen: layer 0 puts every head on [BOS]; in layer 1
    head 0 spreads evenly over the visible positions, head 1 looks at [BOS], head 2 at the
    position before."""

    def __init__(self, task):
        super().__init__(
            GPTConfig(
                vocab_size=task.vocab_size, context=task.length - 1, d_model=6, n_heads=3, n_layers=2, dropout=0.0
            )
        )
        self.seen, self.modes = [], []

    def forward(self, tokens):
        B, n = tokens.shape
        return torch.zeros(B, n, self.config.vocab_size)

    def attention_weights(self, tokens):
        B, n = tokens.shape
        logits = self.forward(tokens)
        self.seen.append(tokens.clone())
        self.modes.append(self.training)
        uniform = torch.ones(n, n).tril() / torch.arange(1, n + 1)[:, None]
        bos = torch.zeros(n, n)
        bos[:, 0] = 1
        previous = torch.zeros(n, n)
        previous[torch.arange(n), (torch.arange(n) - 1).clamp(min=0)] = 1
        layer0 = torch.stack([bos, bos, bos]).expand(B, 3, n, n)
        layer1 = torch.stack([uniform, bos, previous]).expand(B, 3, n, n)
        return logits, [layer0, layer1]


def expected_shares(task, tokens):
    """The shares of the three heads of :class:`FixedAttention`'s layer 1, by a loop over positions."""
    names = ("same group label", "other group label", "same group item", "other")
    totals = {name: torch.zeros(3, dtype=torch.float64) for name in names}
    for sequence in tokens.tolist():
        query = len(sequence) - 1
        own = int(task.group_of(torch.tensor(sequence[query])))
        weights = [[1 / (query + 1)] * (query + 1), [1.0] + [0.0] * query, [0.0] * (query - 1) + [1.0, 0.0]]
        for j in range(query + 1):
            if j > 0 and j % 2 == 0:  # a label: of its item's group
                group = int(task.group_of(torch.tensor(sequence[j - 1])))
                name = "same group label" if group == own else "other group label"
            elif j % 2 == 1 and j != query and int(task.group_of(torch.tensor(sequence[j]))) == own:
                name = "same group item"
            else:
                name = "other"
            for head in range(3):
                totals[name][head] += weights[head][j]
    return {name: total / len(tokens) for name, total in totals.items()}


def test_label_attention_sorts_controlled_weights_into_the_four_parts():
    task = InContextTask(n_groups=3, items_per_group=3, n_labels=5, n_pairs=5)
    model = FixedAttention(task)
    model.train()
    shares = label_attention(model, task, 1, n=60)
    assert model.modes == [False] and model.training
    tokens = model.seen[-1]
    assert tokens.shape == (60, 10)
    expected = expected_shares(task, tokens)
    assert set(shares) == set(expected)
    for name in expected:
        assert shares[name].shape == (3,)
        torch.testing.assert_close(shares[name].double(), expected[name], rtol=0, atol=1e-6)
    assert shares["other"][1].item() == pytest.approx(1.0)  # [BOS] is "other"
    assert 0 < shares["same group label"][2].item() < 1  # the sample has both cases
    on_bos = label_attention(model, task, 0, n=60)
    for name in expected:
        assert on_bos[name].tolist() == pytest.approx([1.0] * 3 if name == "other" else [0.0] * 3)


def test_label_attention_of_a_random_gpt_gives_shares_summing_to_one_per_head():
    task = small_task()
    model = small_gpt(task, n_heads=4)
    for layer in (0, 1):
        shares = label_attention(model, task, layer, n=30)
        stacked = torch.stack(list(shares.values()))  # (4 parts, heads)
        assert stacked.shape == (4, 4)
        assert ((stacked >= -1e-6) & (stacked <= 1 + 1e-6)).all()
        torch.testing.assert_close(stacked.sum(dim=0), torch.ones(4), rtol=0, atol=1e-5)


def test_label_attention_refuses_a_bad_layer():
    task = small_task()
    model = small_gpt(task)
    for layer in (-1, 2, True, 1.0):
        with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\)"):
            label_attention(model, task, layer, n=4)


# ---- removing heads --------------------------------------------------------------------------------


def attention_module(seed=0, d_model=12, n_heads=3):
    torch.manual_seed(seed)
    attention = MultiHeadAttention(d_model, n_heads).double()
    with torch.no_grad():
        for linear in (attention.w_q, attention.w_k, attention.w_v, attention.w_o):
            linear.bias.normal_()
    return attention


def per_head_contributions(attention, x, mask=None):
    """``(h, B, n, d_model)``: what each head adds to the output, from the returned weights and the
    value projection, and the output."""
    B, n, _ = x.shape
    output, weights = attention(x, x, x, mask, need_weights=True)
    h, d_k = attention.n_heads, attention.d_k
    v = attention.w_v(x).view(B, n, h, d_k).transpose(1, 2)  # (B, h, n, d_k)
    heads = weights @ v
    w_o = attention.w_o.weight
    parts = torch.stack([heads[:, i] @ w_o[:, i * d_k : (i + 1) * d_k].T for i in range(h)])
    return parts, output


@pytest.mark.parametrize("need_weights", [True, False])
def test_a_removed_head_leaves_the_sum_of_the_other_heads(need_weights):
    attention = attention_module()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = torch.ones(5, 5, dtype=torch.bool).triu(1)[None]  # (1, n, n): shared by the batch
    with torch.no_grad():
        parts, output = per_head_contributions(attention, x, mask)
        torch.testing.assert_close(parts.sum(dim=0) + attention.w_o.bias, output)  # the decomposition itself
        for removed in ([1], [0, 2], (2,)):
            with heads_removed(attention, removed):
                out, _ = attention(x, x, x, mask, need_weights=need_weights)
            kept = [i for i in range(3) if i not in removed]
            torch.testing.assert_close(out, parts[kept].sum(dim=0) + attention.w_o.bias)
            assert not torch.allclose(out, output)


def test_removing_a_head_equals_zeroing_its_block_of_w_o_by_hand():
    attention = attention_module(seed=1, d_model=8, n_heads=4)
    by_hand = attention_module(seed=1, d_model=8, n_heads=4)
    with torch.no_grad():
        by_hand.w_o.weight[:, 2:4] = 0.0  # head 1: columns d_k .. 2 d_k
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    with torch.no_grad(), heads_removed(attention, [1]):
        out, weights = attention(x, x, x)
        expected, expected_weights = by_hand(x, x, x)
        assert torch.equal(attention.w_o.weight, by_hand.w_o.weight)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights)  # where heads look is unchanged


def test_removing_every_head_leaves_the_output_bias():
    attention = attention_module()
    x = torch.randn(2, 4, 12, dtype=torch.float64)
    with torch.no_grad(), heads_removed(attention, range(3)):
        out, _ = attention(x, x, x)
    assert torch.equal(out, attention.w_o.bias.expand(2, 4, 12))


def test_heads_removed_restores_the_weights_bit_for_bit():
    attention = attention_module()
    parameter = attention.w_o.weight
    before = parameter.detach().clone()
    others = {name: p.detach().clone() for name, p in attention.named_parameters()}
    with heads_removed(attention, iter([2, 0, 2])):  # any iterable, repeats allowed
        assert (parameter[:, 0:4] == 0).all() and (parameter[:, 8:12] == 0).all()
        assert torch.equal(parameter[:, 4:8], before[:, 4:8])
        assert torch.equal(attention.w_o.bias, others["w_o.bias"])
    assert attention.w_o.weight is parameter and torch.equal(parameter, before)
    with pytest.raises(RuntimeError, match="inside the block"):
        with heads_removed(attention, [1]):
            assert (parameter[:, 4:8] == 0).all()
            raise RuntimeError("inside the block")
    assert torch.equal(parameter, before)
    assert all(torch.equal(p, others[name]) for name, p in attention.named_parameters())


def test_heads_removed_works_inside_a_gpt_and_changes_its_output():
    task = small_task()
    model = small_gpt(task).eval()
    x = task.batch(task.sample(4, torch.Generator().manual_seed(0))).x
    with torch.no_grad():
        plain = model(x)
        with heads_removed(model.blocks.layers[0].self_attn, [0]):
            ablated = model(x)
        again = model(x)
    assert not torch.allclose(plain, ablated)
    assert torch.equal(plain, again)


def test_heads_removed_refuses_bad_modules_and_heads():
    attention = attention_module()
    before = attention.w_o.weight.detach().clone()
    with pytest.raises(ValueError, match="expected a MultiHeadAttention, got Linear"):
        with heads_removed(nn.Linear(4, 4), [0]):
            pass
    for heads in ([3], [-1], [0, 5], [True], [1.0], [1, True]):  # True is no head, even beside 1
        with pytest.raises(ValueError, match=r"heads_removed: each head must be an int in \[0, 3\), got "):
            with heads_removed(attention, heads):
                pass
    assert torch.equal(attention.w_o.weight, before)


# ---- attention weights of the GPT and the encoder --------------------------------------------------


def test_gpt_returns_causal_attention_weights_per_layer_with_the_same_logits():
    task = small_task()
    model = small_gpt(task, n_layers=3, n_heads=4).eval()
    x = task.batch(task.sample(3, torch.Generator().manual_seed(2))).x
    n = x.shape[1]
    with torch.no_grad():
        plain = model(x)
        logits, weights = model.attention_weights(x)
    torch.testing.assert_close(logits, plain, rtol=1e-5, atol=1e-5)
    assert isinstance(weights, list) and len(weights) == 3
    for w in weights:
        assert w.shape == (3, 4, n, n)
        assert (w >= 0).all()
        torch.testing.assert_close(w.sum(dim=-1), torch.ones(3, 4, n))
        assert (w.triu(1) == 0).all()  # no look at later positions
        assert (w[..., 0, 0] == 1).all()  # the first sees only itself
    assert not torch.allclose(weights[0], weights[1])


def test_encoder_returns_its_weights_and_the_same_output():
    torch.manual_seed(0)
    encoder = Encoder(2, 16, 2, 32, 0.0, norm_first=True).eval()
    x = torch.randn(2, 6, 16)
    mask = torch.tensor([[False] * 6, [False] * 4 + [True] * 2]).unsqueeze(1)  # (B, 1, m) padding
    with torch.no_grad():
        plain = encoder(x, mask)
        out, weights = encoder(x, mask, need_weights=True)
    torch.testing.assert_close(out, plain, rtol=1e-5, atol=1e-5)
    assert len(weights) == 2 and all(w.shape == (2, 2, 6, 6) for w in weights)
    for w in weights:
        assert (w[1, :, :, 4:] == 0).all()  # the padding gets nothing
        torch.testing.assert_close(w.sum(dim=-1), torch.ones(2, 2, 6))
        assert (w[0].triu(1) > 0).any()  # not causal


# ---- the language-model loss with ignored targets --------------------------------------------------


class TableModel(nn.Module):
    """Logits read from a table: a bigram model."""

    def __init__(self, vocab, seed=0):
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed)))

    def forward(self, x):
        return self.table[x]


def loop_cross_entropy(logits, y, smoothing=0.0):
    total, count = 0.0, 0
    for b in range(y.shape[0]):
        for t in range(y.shape[1]):
            if y[b, t] == IGNORE_INDEX:
                continue
            log_p = logits[b, t].double().log_softmax(dim=-1)
            total += -(1 - smoothing) * log_p[y[b, t]].item() - smoothing * log_p.mean().item()
            count += 1
    return total / count, count


def test_language_model_loss_averages_over_the_positions_not_ignored():
    model = TableModel(9)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(9, (3, 7), generator=g)
    y = torch.randint(9, (3, 7), generator=g)
    y[0, 1] = y[1, 4] = y[1, 5] = y[2, 0] = IGNORE_INDEX
    loss, count = language_model_loss()(model, (x, y))
    expected, expected_count = loop_cross_entropy(model(x).detach(), y)
    assert count == expected_count == 21 - 4
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # with nothing ignored it is the plain mean over every position
    full = torch.randint(9, (3, 7), generator=g)
    loss, count = language_model_loss()(model, (x, full))
    plain = sum(-model(x)[b, t].double().log_softmax(-1)[full[b, t]].item() for b in range(3) for t in range(7)) / 21
    assert count == 21 and loss.item() == pytest.approx(plain, rel=1e-6)


def test_language_model_loss_smooths_only_the_scored_positions_in_training():
    model = TableModel(6, seed=3)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(6, (2, 5), generator=g), torch.randint(6, (2, 5), generator=g)
    y[:, ::2] = IGNORE_INDEX
    loss_fn = language_model_loss(smoothing=0.2)
    model.train()
    loss, count = loss_fn(model, (x, y))
    assert count == 4
    assert loss.item() == pytest.approx(loop_cross_entropy(model(x).detach(), y, 0.2)[0], rel=1e-6)
    model.eval()
    loss, _ = loss_fn(model, (x, y))
    assert loss.item() == pytest.approx(loop_cross_entropy(model(x).detach(), y)[0], rel=1e-6)


def test_language_model_loss_scores_one_position_per_pair_of_an_in_context_batch():
    task = small_task()
    model = small_gpt(task).eval()
    batch = InContextBatches(task, 6)(0)
    with torch.no_grad():
        loss, count = language_model_loss()(model, batch)
        logits = model(batch.x)
    assert count == 6 * task.n_pairs
    expected = F.cross_entropy(logits[:, 1::2].reshape(-1, task.vocab_size), batch.y[:, 1::2].reshape(-1))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


# ---- the head that reads a label's word, and the loss for fit -----------------------------------


def test_previous_item_attention_reads_the_weight_from_each_label_to_its_word():
    task = small_task()
    torch.manual_seed(0)
    model = GPT(GPTConfig(task.vocab_size, context=task.length - 1, d_model=16, n_heads=2, n_layers=2, dropout=0.0))
    from transformer_book.incontext import previous_item_attention

    shares = previous_item_attention(model, task, 1, n=50)
    x = task.batch(task.sample(50, torch.Generator().manual_seed(1), split="test")).x
    model.eval()
    with torch.no_grad():
        _, weights = model.attention_weights(x)
    expected = torch.zeros(2)
    count = 0
    for t in range(2, x.shape[1], 2):
        expected += weights[1][:, :, t, t - 1].mean(dim=0)
        count += 1
    torch.testing.assert_close(shares, expected / count)
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\)"):
        previous_item_attention(model, task, 2)


def test_icl_loss_scores_labels_and_logs_accuracies_in_eval_mode_only():
    from transformer_book.incontext import accuracy_by_demonstrations, icl_loss

    task = small_task()
    torch.manual_seed(0)
    model = GPT(GPTConfig(task.vocab_size, context=task.length - 1, d_model=16, n_heads=2, n_layers=1, dropout=0.0))
    batch = task.batch(task.sample(400, torch.Generator().manual_seed(1), split="test"))
    log = []
    loss_fn = icl_loss(log)
    model.train()
    loss, n = loss_fn(model, batch)
    assert log == [] and n == 400 * task.n_pairs
    expected = F.cross_entropy(model(batch.x)[:, 1::2].reshape(-1, task.vocab_size), batch.y[:, 1::2].reshape(-1))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    model.eval()
    loss_fn(model, batch)
    assert len(log) == 1 and log[0].shape == (task.n_pairs,)
    torch.testing.assert_close(log[0], accuracy_by_demonstrations(model, task, n=400, seed=1))
    with pytest.raises(ValueError, match="log must be a list"):
        icl_loss(log=())
