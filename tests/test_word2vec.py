"""Tests of window contexts, subsampling, negative sampling and the word2vec trainer (chapters 10-11).

Expected values come from loops written here, from formulas evaluated by hand, or from
autograd; statistical tests use fixed seeds and tolerances of several standard errors.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from transformer_book.embeddings import word2vec as word2vec_module
from transformer_book.embeddings.contexts import (
    cbow_windows,
    encode_corpus,
    flat_cbow_windows,
    keep_probabilities,
    skipgram_pairs,
    window_pairs,
)
from transformer_book.embeddings.cooccurrence import cooccurrence_matrix
from transformer_book.embeddings.word2vec import (
    AliasSampler,
    Word2VecConfig,
    noise_distribution,
    sgns_gradients,
    sgns_loss,
    softmax_loss,
    train_word2vec,
)
from transformer_book.tokenizers.text import Vocab

FOX = "The quick brown fox jumps over the lazy dog".split()


def test_window_pairs_reproduce_the_quick_brown_fox_table():
    # the table for a window of 2, written out by reading the sentence
    expected = [
        ("The", "quick"), ("The", "brown"),
        ("quick", "The"), ("quick", "brown"), ("quick", "fox"),
        ("brown", "The"), ("brown", "quick"), ("brown", "fox"), ("brown", "jumps"),
        ("fox", "quick"), ("fox", "brown"), ("fox", "jumps"), ("fox", "over"),
        ("jumps", "brown"), ("jumps", "fox"), ("jumps", "over"), ("jumps", "the"),
        ("over", "fox"), ("over", "jumps"), ("over", "the"), ("over", "lazy"),
        ("the", "jumps"), ("the", "over"), ("the", "lazy"), ("the", "dog"),
        ("lazy", "over"), ("lazy", "the"), ("lazy", "dog"),
        ("dog", "the"), ("dog", "lazy"),
    ]  # fmt: skip
    assert window_pairs(FOX, 2) == expected
    assert len(window_pairs(FOX, 1)) == 2 * (len(FOX) - 1)
    assert window_pairs(["alone"], 3) == []


@pytest.mark.parametrize("window", [0, -2, 2.0, True])
def test_window_must_be_a_positive_int(window):
    with pytest.raises(ValueError, match="window"):
        window_pairs(FOX, window)


def test_keep_probabilities_formula():
    counts = np.array([900, 90, 9, 1])
    t = 0.01
    f = counts / 1000
    expected = [min(1.0, (t / x) ** 0.5 + t / x) for x in f]
    np.testing.assert_allclose(keep_probabilities(counts, t), expected)
    assert keep_probabilities(counts, t)[0] == pytest.approx((0.01 / 0.9) ** 0.5 + 0.01 / 0.9)
    np.testing.assert_array_equal(keep_probabilities(counts, 0.0), np.ones(4))
    with pytest.raises(ValueError, match="threshold"):
        keep_probabilities(counts, -1e-3)
    with pytest.raises(ValueError, match="positive counts"):
        keep_probabilities(np.array([3, 0]), 1e-3)


def _vocab(sentences, min_count=1):
    return Vocab.build((w for s in sentences for w in s), min_count=min_count)


def test_encode_corpus_drops_unknown_words_and_keeps_sentences():
    sentences = [["a", "b", "rare"], ["b", "a"], ["rare"]]
    vocab = Vocab(["a", "b"], [2, 2])
    corpus = encode_corpus(sentences, vocab)
    np.testing.assert_array_equal(corpus.ids, [0, 1, 1, 0])
    np.testing.assert_array_equal(corpus.sentence_ids, [0, 0, 1, 1])
    assert corpus.n_tokens == 6 and len(corpus) == 4
    with pytest.raises(ValueError, match="empty"):
        encode_corpus([], vocab)
    with pytest.raises(ValueError, match="none of the corpus"):
        encode_corpus([["rare"]], vocab)
    with pytest.raises(ValueError, match="is a str"):
        encode_corpus(["a b"], vocab)


def _brute_force_pairs(sentences, vocab, window):
    pairs = Counter()
    for sentence in sentences:
        ids = [vocab[w] for w in sentence if w in vocab]
        for t in range(len(ids)):
            for s in range(max(0, t - window), min(len(ids), t + window + 1)):
                if s != t:
                    pairs[ids[t], ids[s]] += 1
    return pairs


GENERATORS = {
    "numpy": lambda seed: np.random.default_rng(seed),
    "torch": lambda seed: torch.Generator().manual_seed(seed),
}
"""The two kinds of generator the pair builders take: NumPy's (arrays back) and torch's (tensors
back, built on the generator's device: how a GPU run draws its examples)."""


def _np(x):
    return x.numpy() if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_skipgram_pairs_full_window_equal_a_loop_and_stay_in_their_sentence(kind):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(12)]
    sentences = [list(rng.choice(words, size=rng.integers(1, 15))) for _ in range(40)]
    vocab = Vocab.build(w for s in sentences for w in s if w != "w11")  # w11 is out of vocabulary
    corpus = encode_corpus(sentences, vocab)
    centres, contexts = map(_np, skipgram_pairs(corpus, 3, GENERATORS[kind](1), reduced=False))
    assert Counter(zip(centres.tolist(), contexts.tolist())) == _brute_force_pairs(sentences, vocab, 3)


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_reduced_window_uses_distance_d_with_probability_linear_in_d(kind):
    L = 4
    corpus = encode_corpus([["a", "b"] * 50_000], Vocab(["a", "b"], [50_000, 50_000]))
    # in one long sentence of alternating words, distance parity is visible in the pair
    centres, contexts = map(_np, skipgram_pairs(corpus, L, GENERATORS[kind](0)))
    n = len(corpus)
    expected_pairs = sum(2 * (n - d) * (L - d + 1) / L for d in range(1, L + 1))
    assert abs(len(centres) - expected_pairs) < 5 * np.sqrt(expected_pairs)
    odd = (centres != contexts).mean()  # odd distances pair a with b
    expected_odd = sum((L - d + 1) for d in (1, 3)) / sum(L - d + 1 for d in range(1, L + 1))
    assert odd == pytest.approx(expected_odd, abs=0.005)


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_subsampling_keeps_each_word_at_its_rate(kind):
    counts = np.array([80_000, 20_000])
    vocab = Vocab(["the", "cat"], counts)
    rng = np.random.default_rng(0)
    sentence = list(rng.permutation(["the"] * 80_000 + ["cat"] * 20_000))
    corpus = encode_corpus([sentence], vocab)
    keep = keep_probabilities(counts, 0.05)
    centres = _np(skipgram_pairs(corpus, 1, GENERATORS[kind](1), keep=keep, reduced=False)[0])
    # with a full window of 1 in one sentence, each kept word is a centre twice (except the ends)
    kept = np.bincount(centres, minlength=2) / 2
    np.testing.assert_allclose(kept / counts, keep, atol=0.01)
    assert keep[0] < 0.5 < keep[1]


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_cbow_windows_hold_the_same_contexts_as_skipgram_pairs(kind):
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(9)]
    sentences = [list(rng.choice(words, size=rng.integers(1, 12))) for _ in range(30)]
    vocab = _vocab(sentences)
    corpus = encode_corpus(sentences, vocab)
    centres, contexts = map(_np, cbow_windows(corpus, 2, GENERATORS[kind](0), reduced=False))
    assert contexts.shape == (len(centres), 4)
    flat = Counter((c, x) for c, row in zip(centres.tolist(), contexts.tolist()) for x in row if x >= 0)
    assert flat == _brute_force_pairs(sentences, vocab, 2)
    assert (contexts >= 0).any(axis=1).all()  # one-word sentences give no example
    singles = sum(len(s) == 1 for s in sentences)
    assert len(centres) == len(corpus) - singles
    # columns: the left neighbours first (nearest last), then the right ones (nearest first)
    sentence = encode_corpus([["a", "b", "c", "d", "e"]], Vocab(list("abcde"), [1] * 5))
    c, ctx = map(_np, cbow_windows(sentence, 2, GENERATORS[kind](0), reduced=False))
    np.testing.assert_array_equal(ctx[2], [0, 1, 3, 4])
    np.testing.assert_array_equal(ctx[0], [-1, -1, 1, 2])


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("reduced", [False, True])
@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_flat_cbow_windows_are_the_padded_windows_without_their_padding(kind, reduced, shuffle):
    """The same draws as cbow_windows (subsampling, window sizes), then the permutation drawn
    after them; each window's words in the padded row's order, -1 slots left out."""
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(12)]
    sentences = [list(rng.choice(words, size=rng.integers(1, 15))) for _ in range(60)]
    vocab = _vocab(sentences)
    corpus = encode_corpus(sentences, vocab)
    keep = keep_probabilities(np.asarray(vocab.counts), 0.05)
    flat = flat_cbow_windows(corpus, 3, GENERATORS[kind](7), keep=keep, reduced=reduced, shuffle=shuffle)
    generator = GENERATORS[kind](7)
    centres, contexts = map(_np, cbow_windows(corpus, 3, generator, keep=keep, reduced=reduced))
    if shuffle:
        order = (
            torch.randperm(len(centres), generator=generator).numpy()
            if kind == "torch"
            else generator.permutation(len(centres))
        )
        assert not np.array_equal(order, np.arange(len(order)))
        centres, contexts = centres[order], contexts[order]
    assert len(flat) == len(centres) > 100
    np.testing.assert_array_equal(flat.centres.numpy(), centres)
    starts = flat.starts.numpy()
    np.testing.assert_array_equal(starts, flat.starts_host)
    for i in range(len(centres)):
        np.testing.assert_array_equal(flat.ids[starts[i] : starts[i + 1]].numpy(), contexts[i][contexts[i] >= 0])
        assert (flat.window[starts[i] : starts[i + 1]] == i).all()
    assert starts[-1] == len(flat.ids) == (contexts >= 0).sum()
    # a batch: its centres, its words, offsets into them, windows counted from its start
    centre, ids, offsets, window = flat.batch(10, 20)
    np.testing.assert_array_equal(centre.numpy(), centres[10:20])
    np.testing.assert_array_equal(ids.numpy(), contexts[10:20][contexts[10:20] >= 0])
    np.testing.assert_array_equal(offsets.numpy(), starts[10:20] - starts[10])
    np.testing.assert_array_equal(window.numpy(), np.repeat(np.arange(10), np.diff(starts[10:21])))


def test_flat_cbow_windows_skip_sentences_of_one_word():
    corpus = encode_corpus([["a"], ["b", "c"], ["d"]], Vocab(list("abcd"), [1] * 4))
    flat = flat_cbow_windows(corpus, 2, np.random.default_rng(0), reduced=False)
    np.testing.assert_array_equal(flat.centres.numpy(), [1, 2])
    np.testing.assert_array_equal(flat.ids.numpy(), [2, 1])
    empty = flat_cbow_windows(encode_corpus([["a"], ["b"]], Vocab(list("ab"), [1, 1])), 2, np.random.default_rng(0))
    assert len(empty) == 0 and len(empty.ids) == 0
    with pytest.raises(ValueError, match="window must be a positive int"):
        flat_cbow_windows(corpus, 0, np.random.default_rng(0))


@pytest.mark.parametrize("cap", [1000.0, 2.0])
def test_cbow_input_updates_summed_per_word_equal_a_loop(cap):
    """Every context word receives the gradient of its window's mean, each occurrence once (a
    word twice in one window twice), the sum scaled by min(1, cap / occurrences): by the sparse
    product (CPU) and by copying to every slot (GPU), both against a loop."""
    generator = torch.Generator().manual_seed(0)
    vocab_size, batch, d = 30, 12, 4
    lengths = torch.randint(1, 7, (batch,), generator=generator)
    window = torch.arange(batch).repeat_interleave(lengths)
    rows = torch.randint(0, 8, (len(window),), generator=generator)  # a few words, often repeated
    rows[:2] = 3  # word 3 twice in window 0
    grad_h = torch.randn(batch, d, generator=generator, dtype=torch.float64)
    expected = torch.zeros(vocab_size, d, dtype=torch.float64)
    for w in rows.unique().tolist():
        slots = [j for j in range(len(rows)) if rows[j] == w]
        expected[w] = min(1.0, cap / len(slots)) * sum(grad_h[window[j]] for j in slots)
    words, update = word2vec_module._summed_context_gradients(rows, window, grad_h, cap)
    assert torch.equal(words, rows.unique())
    torch.testing.assert_close(torch.zeros_like(expected).index_add_(0, words, update), expected)
    copied = word2vec_module._copied_context_gradients(rows, window, grad_h, vocab_size, cap)
    assert copied.shape == (len(rows), d)
    torch.testing.assert_close(torch.zeros_like(expected).index_add_(0, rows, copied), expected)
    if cap < 1000:
        assert not torch.allclose(expected, torch.zeros_like(expected).index_add_(0, rows, grad_h[window]))


@pytest.mark.parametrize(
    "weighting,weight", [("harmonic", lambda d, L: 1 / d), ("linear", lambda d, L: (L - d + 1) / L)]
)
def test_weighted_cooccurrence_equals_a_loop(weighting, weight):
    rng = np.random.default_rng(0)
    ids = rng.integers(-1, 6, size=300)
    L = 3
    expected = np.zeros((6, 6))
    for t in range(len(ids)):
        for s in range(max(0, t - L), min(len(ids), t + L + 1)):
            if s != t and ids[t] >= 0 and ids[s] >= 0:
                expected[ids[t], ids[s]] += weight(abs(s - t), L)
    np.testing.assert_allclose(cooccurrence_matrix(ids, 6, L, weighting=weighting).toarray(), expected)
    with pytest.raises(ValueError, match="unknown weighting"):
        cooccurrence_matrix(ids, 6, L, weighting="gaussian")


def test_noise_distribution_and_alias_sampler():
    counts = np.array([1000, 100, 10, 1])
    p = noise_distribution(counts)
    np.testing.assert_allclose(p, counts**0.75 / (counts**0.75).sum())
    np.testing.assert_allclose(noise_distribution(counts, 0.0), np.full(4, 0.25))
    draws = AliasSampler(p).sample(400_000, torch.Generator().manual_seed(0))
    assert draws.dtype == torch.int64 and draws.min() >= 0 and draws.max() <= 3
    freq = np.bincount(draws.numpy(), minlength=4) / len(draws)
    np.testing.assert_allclose(freq, p, atol=5 * np.sqrt(p * (1 - p) / len(draws)).max())
    with pytest.raises(ValueError, match="probability vector"):
        AliasSampler(np.array([0.5, 0.6]))


@pytest.mark.parametrize("groups", [6, 3, 1])
def test_sgns_gradients_equal_autograd(groups):
    torch.manual_seed(0)
    B, k, d = 6, 4, 5
    v = torch.randn(B, d, dtype=torch.float64, requires_grad=True)
    u_pos = torch.randn(B, d, dtype=torch.float64, requires_grad=True)
    u_neg = torch.randn(groups, k, d, dtype=torch.float64, requires_grad=True)
    loss = sgns_loss(v, u_pos, u_neg)
    loss.backward()
    grad_v, grad_pos, grad_neg, per_pair = sgns_gradients(v.detach(), u_pos.detach(), u_neg.detach())
    torch.testing.assert_close(grad_v, v.grad)
    torch.testing.assert_close(grad_pos, u_pos.grad)
    torch.testing.assert_close(grad_neg, u_neg.grad)
    torch.testing.assert_close(per_pair.sum(), loss.detach())
    # the loss of pair 0 by hand
    m = B // groups
    hand = -torch.log(torch.sigmoid(v[0] @ u_pos[0])) - sum(
        torch.log(torch.sigmoid(-(u_neg[0, i] @ v[0]))) for i in range(k)
    )
    torch.testing.assert_close(per_pair[0], hand.detach())
    if 1 < groups < B:
        with pytest.raises(ValueError, match="cannot share"):
            sgns_loss(v[: m * groups - 1], u_pos[: m * groups - 1], u_neg)


def test_softmax_loss_is_cross_entropy_over_the_whole_vocabulary():
    torch.manual_seed(0)
    v, w_out = torch.randn(3, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64)
    targets = torch.tensor([0, 6, 2])
    scores = v @ w_out.T
    hand = -sum(scores[i, targets[i]] - torch.logsumexp(scores[i], 0) for i in range(3))
    torch.testing.assert_close(softmax_loss(v, w_out, targets), hand)
    with pytest.raises(ValueError, match="int64"):
        softmax_loss(v, w_out, targets.int())


def _topic_corpus(n_sentences=600, seed=0):
    """Sentences drawn from one of two topics of 10 words each: words of a topic share contexts."""
    rng = np.random.default_rng(seed)
    topics = [[f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]]
    return [list(rng.choice(topics[s % 2], size=12)) for s in range(n_sentences)], topics


def _topic_separation(vectors, vocab, topics):
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    a = unit[[vocab[w] for w in topics[0]]]
    b = unit[[vocab[w] for w in topics[1]]]
    within = ((a @ a.T).sum() - 10) / 90
    across = (a @ b.T).mean()
    return within, across


@pytest.mark.parametrize("examples_on_device", [False, True])
@pytest.mark.parametrize("architecture", ["skipgram", "cbow"])
def test_word2vec_learns_which_words_share_contexts(architecture, examples_on_device, monkeypatch):
    """Both ways of making an epoch's examples: NumPy on the CPU (the CPU's way), and torch's
    generator on the training device (a GPU's way, forced here on the CPU)."""
    if examples_on_device:
        original = word2vec_module._epoch_examples
        monkeypatch.setattr(word2vec_module, "_epoch_examples", lambda *args: original(*args[:-1], True))
    sentences, topics = _topic_corpus()
    vocab = _vocab(sentences)
    corpus = encode_corpus(sentences, vocab)
    config = Word2VecConfig(
        architecture=architecture,
        dim=16,
        window=3,
        negatives=3,
        epochs=3,
        batch_size=256,
        shared_negatives=4,
        sample=0.0,
    )
    result = train_word2vec(corpus, vocab.counts, config, progress=False)
    assert result.w_in.shape == (20, 16) and result.w_in.dtype == np.float32
    assert np.isfinite(result.w_in).all() and np.isfinite(result.w_out).all()
    within, across = _topic_separation(result.w_in, vocab, topics)
    assert within > 0.5 and across < within - 0.5
    assert result.losses[-1] < result.losses[0]
    assert result.examples > 0 and result.words_per_second > 0


@pytest.mark.parametrize("architecture", ["skipgram", "cbow"])
def test_epoch_examples_on_the_device_are_the_built_examples_shuffled(architecture):
    """The on-device path returns exactly what the example builder draws with the same generator
    state, in a shuffled order, as tensors; the NumPy path stays what the chapters ran (CBOW's
    windows come flat, without the padding of cbow_windows's rows)."""
    sentences, _ = _topic_corpus(60)
    vocab = _vocab(sentences)
    corpus = encode_corpus(sentences, vocab)
    config = Word2VecConfig(architecture=architecture, window=3)
    make = skipgram_pairs if architecture == "skipgram" else cbow_windows
    keep = keep_probabilities(np.asarray(vocab.counts), 0.05)

    def examples(drawn):
        """(centres, each example's context as an int or a tuple of ids)"""
        if architecture == "skipgram":
            return drawn[0], drawn[1].tolist()
        starts = drawn.starts.tolist()
        return drawn.centres, [tuple(drawn.ids[a:b].tolist()) for a, b in zip(starts, starts[1:])]

    built_centres, built_contexts = map(torch.as_tensor, make(corpus, 3, torch.Generator().manual_seed(4), keep=keep))
    if architecture == "cbow":
        built_contexts = [tuple(x for x in row if x >= 0) for row in built_contexts.tolist()]
    else:
        built_contexts = built_contexts.tolist()
    centres, contexts = examples(
        word2vec_module._epoch_examples(
            corpus, config, keep, np.random.default_rng(0), torch.Generator().manual_seed(4), True
        )
    )
    assert isinstance(centres, torch.Tensor) and len(centres) == len(built_centres)
    assert Counter(zip(centres.tolist(), contexts)) == Counter(zip(built_centres.tolist(), built_contexts))
    assert not torch.equal(centres, built_centres)  # shuffled
    numpy_centres, _ = examples(
        word2vec_module._epoch_examples(
            corpus, config, keep, np.random.default_rng(0), torch.Generator().manual_seed(4), False
        )
    )
    rng = np.random.default_rng(0)
    expected, _ = make(corpus, 3, rng, keep=keep)
    assert torch.equal(numpy_centres, torch.as_tensor(expected)[torch.as_tensor(rng.permutation(len(expected)))])


def test_word2vec_is_reproducible_with_a_seed():
    sentences, _ = _topic_corpus(100)
    vocab = _vocab(sentences)
    corpus = encode_corpus(sentences, vocab)
    config = Word2VecConfig(dim=8, window=2, negatives=2, epochs=2, batch_size=64, seed=3)
    first = train_word2vec(corpus, vocab.counts, config, progress=False)
    second = train_word2vec(corpus, vocab.counts, config, progress=False)
    np.testing.assert_array_equal(first.w_in, second.w_in)
    np.testing.assert_array_equal(first.w_out, second.w_out)
    other = train_word2vec(
        corpus,
        vocab.counts,
        Word2VecConfig(dim=8, window=2, negatives=2, epochs=2, batch_size=64, seed=4),
        progress=False,
    )
    assert not np.array_equal(first.w_in, other.w_in)


def test_the_progress_bar_ends_full_though_epochs_draw_different_counts(capsys):
    # subsampling and the reduced window draw a different number of examples each epoch, so the
    # total planned from the first epoch is off; the bar must still end at 100%, at what was read
    sentences, _ = _topic_corpus(200)
    vocab = _vocab(sentences)
    corpus = encode_corpus(sentences, vocab)
    config = Word2VecConfig(dim=8, window=3, negatives=2, epochs=3, sample=1e-2, batch_size=64, seed=0)
    result = train_word2vec(corpus, vocab.counts, config, progress=True)
    last = [line.rsplit("\r", 1)[-1] for line in capsys.readouterr().err.split("\n") if "|" in line][-1]
    assert last.lstrip().startswith(f"{config.architecture}: 100%|"), last
    shown = last.split("|")[2].split("[")[0].strip()  # "n/total" in tqdm's units
    done, total = shown.split("/")
    assert done == total, last
    assert result.examples > 0


def test_word2vec_rejects_bad_input():
    sentences, _ = _topic_corpus(20)
    vocab = _vocab(sentences)
    corpus = encode_corpus(sentences, vocab)
    with pytest.raises(ValueError, match="too small for 20 negative samples"):
        train_word2vec(corpus, vocab.counts, Word2VecConfig(negatives=20), progress=False)
    with pytest.raises(ValueError, match="corpus ids must lie in"):
        train_word2vec(corpus, vocab.counts[:5], Word2VecConfig(negatives=2), progress=False)
    lonely = encode_corpus([["a0"], ["a1"], ["a2"], ["a3"]], Vocab(["a0", "a1", "a2", "a3"], [1, 1, 1, 1]))
    with pytest.raises(ValueError, match="no training example"):
        train_word2vec(lonely, np.ones(4), Word2VecConfig(negatives=2, sample=0.0), progress=False)
    with pytest.raises(RuntimeError, match="loss became"):
        train_word2vec(
            corpus, vocab.counts, Word2VecConfig(dim=8, lr=1e30, negatives=2, batch_size=64, sample=0.0), progress=False
        )


@pytest.mark.parametrize(
    "field,value",
    [
        ("architecture", "glove"),
        ("dim", 0),
        ("window", -1),
        ("negatives", 0),
        ("epochs", 1.5),
        ("lr", -0.1),
        ("lr", float("nan")),
        ("min_lr_ratio", 0.0),
        ("sample", -1.0),
        ("noise_power", 2.0),
        ("row_step_cap", 0.5),
        ("batch_size", True),
        ("shared_negatives", 0),
    ],
)
def test_word2vec_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        Word2VecConfig(**{field: value})


def test_cooccurrence_of_an_encoded_corpus_is_sparse_and_symmetric():
    sentences, _ = _topic_corpus(50)
    vocab = _vocab(sentences)
    corpus = encode_corpus(sentences, vocab)
    counts = cooccurrence_matrix(corpus.ids, len(vocab), 2)
    assert sp.issparse(counts)
    assert (counts != counts.T).nnz == 0
