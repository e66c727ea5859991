"""Tests of transformer_book.data.pretraining: WikiText-2 documents, next-sentence pairs, BERT's
pair layout and truncation, masked-LM corruption and the step-addressable batches.

Proportions are checked against binomial bounds computed here (|p_hat - p| < 5 sigma) on
fixed seeds; layouts against hand-built examples.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transformer_book.data import pretraining
from transformer_book.data.pretraining import (
    IGNORE_INDEX,
    EncodedPairs,
    PretrainingBatch,
    PretrainingBatches,
    SentencePair,
    encode_pair,
    encode_sentence_pairs,
    make_sentence_pairs,
    mask_tokens,
    maskable_positions,
    wikitext2_documents,
)
from transformer_book.tokenizers.wordpiece import CLS_ID, MASK_ID, PAD_ID, SEP_ID, UNK_ID, WordPieceTokenizer
from transformer_book.training import to_device

FIRST_NORMAL = 5


def within_binomial(successes: int, trials: int, p: float, sigmas: float = 5.0) -> bool:
    sigma = math.sqrt(p * (1 - p) / trials)
    return abs(successes / trials - p) < sigmas * sigma


# ----------------------------------------------------------------------------- documents

FAKE_WIKITEXT = (
    " \n = Alpha = \n \n"
    " Alpha is a letter . It has @-@ marks , like 1 @,@ 000 and 2 @.@ 5 ! Does it ? Yes \n \n"
    " = = Usage = = \n \n"
    " The letter <unk> is used . \n"
    " Legend : GP \n = Goals ; A = \n Assists \n \n"
    " = = = Deeper = = = \n \n"
    " Last one . \n \n"
    " = Beta = \n \n Only one sentence . \n \n"
    " = Gamma = \n \n First . Second . \n"
)


def test_documents_from_a_hand_written_file(fetched):
    path, calls = fetched
    path.write_text(FAKE_WIKITEXT, encoding="utf-8")
    assert wikitext2_documents("valid", download=False) == [
        [
            "Alpha is a letter .",
            "It has-marks , like 1,000 and 2.5 !",
            "Does it ?",
            "Yes",
            "The letter [UNK] is used .",
            "Legend : GP",
            "= Goals ; A =",
            "Assists",
            "Last one .",
        ],
        ["First .", "Second ."],  # Beta has one sentence: dropped
    ]
    assert calls == [("wikitext2", "valid.txt", False)]
    with pytest.raises(ValueError, match="wikitext2_documents: unknown split 'dev'; known splits: train, valid"):
        wikitext2_documents("dev")


def test_wikitext2_valid_documents():
    """The real valid split (TB_DATA_DIR points at the shared data; CI sets it)."""
    documents = wikitext2_documents("valid", download=False)
    assert len(documents) == 60  # the 60 articles of Merity et al. (2016)
    assert sum(len(d) for d in documents) == 8133
    assert documents[0][1] == "It is closely related to the American lobster , H. americanus ."
    assert min(len(d) for d in documents) >= 2
    sentences = [s for d in documents for s in d]
    assert not any(marker in s for s in sentences for marker in ("@-@", "@,@", "@.@", "<unk>", "= ="))
    assert sum(s.count("[UNK]") for s in sentences) > 1000
    ends = [s.split()[-1] for s in sentences]
    assert sum(e in (".", "?", "!") for e in ends) / len(ends) > 0.95  # the rest end their paragraph


# ----------------------------------------------------------------------------- sentence pairs


def fake_documents(sizes):
    return [[f"d{d}s{i}" for i in range(size)] for d, size in enumerate(sizes)]


def where(sentence):
    d, s = sentence[1:].split("s")
    return int(d), int(s)


def test_pairs_are_next_sentences_or_from_another_document():
    sizes = [3, 5, 1, 8, 2, 6]
    pairs = make_sentence_pairs(fake_documents(sizes), seed=3)
    # one pair per sentence with a next one, in document order
    assert [p.a for p in pairs] == [f"d{d}s{i}" for d, size in enumerate(sizes) for i in range(size - 1)]
    assert all(isinstance(p, SentencePair) for p in pairs)
    for a, b, is_next in pairs:
        (da, ia), (db, ib) = where(a), where(b)
        if is_next:
            assert (db, ib) == (da, ia + 1)
        else:
            assert db != da and 0 <= ib < sizes[db]
    assert 0 < sum(p.is_next for p in pairs) < len(pairs)


def test_half_of_the_pairs_are_true_next_sentences():
    pairs = make_sentence_pairs(fake_documents([101] * 200), seed=0)
    assert len(pairs) == 20_000
    assert within_binomial(sum(p.is_next for p in pairs), len(pairs), 0.5)
    skewed = make_sentence_pairs(fake_documents([101] * 200), seed=0, next_prob=0.2)
    assert within_binomial(sum(p.is_next for p in skewed), len(skewed), 0.2)
    assert all(p.is_next for p in make_sentence_pairs(fake_documents([4, 4]), next_prob=1.0))
    assert not any(p.is_next for p in make_sentence_pairs(fake_documents([4, 4]), next_prob=0))


def test_random_sentences_are_uniform_over_the_other_documents():
    sizes = [4001, 1000, 3000]
    pairs = make_sentence_pairs(fake_documents(sizes), seed=1, next_prob=0.0)
    from_doc0 = [where(p.b) for p in pairs if where(p.a)[0] == 0]
    assert len(from_doc0) == 4000
    # doc 1 holds 1000 of the 4000 other sentences
    assert within_binomial(sum(d == 1 for d, _ in from_doc0), len(from_doc0), 0.25)
    index = np.array([i for d, i in from_doc0 if d == 2], dtype=float)  # uniform on 0..2999
    mean, sd = (3000 - 1) / 2, math.sqrt((3000**2 - 1) / 12)
    assert abs(index.mean() - mean) < 5 * sd / math.sqrt(len(index))


def test_pairs_depend_only_on_the_seed():
    documents = fake_documents([5, 7, 3, 9])
    assert make_sentence_pairs(documents, seed=7) == make_sentence_pairs(documents, seed=7)
    assert make_sentence_pairs(documents, seed=7) != make_sentence_pairs(documents, seed=8)


def test_sentence_pair_errors():
    with pytest.raises(ValueError, match="at least 2 documents.*got 1"):
        make_sentence_pairs([["a", "b"]])
    with pytest.raises(ValueError, match=r"next_prob must lie in \[0, 1\], got 1.5"):
        make_sentence_pairs(fake_documents([2, 2]), next_prob=1.5)
    with pytest.raises(ValueError, match="document 1 must be a non-empty list"):
        make_sentence_pairs([["a", "b"], []])
    with pytest.raises(ValueError, match="document 0 holds a int"):
        make_sentence_pairs([["a", 3], ["c"]])
    with pytest.raises(ValueError, match="seed must be a non-negative int, got 0.5"):
        make_sentence_pairs(fake_documents([2, 2]), seed=0.5)


# ----------------------------------------------------------------------------- encoding


class WordIds:
    """A stand-in tokenizer: one id per space-separated word, ids from 10 on."""

    def __init__(self):
        self.ids = {}

    def encode(self, text):
        return [self.ids.setdefault(w, 10 + len(self.ids)) for w in text.split()]


def test_encode_pair_layout_and_segments():
    tok = WordIds()
    ids, segments = encode_pair(tok, "a b c", "d e", max_len=20)
    assert ids == [CLS_ID, 10, 11, 12, SEP_ID, 13, 14, SEP_ID]
    assert segments == [0, 0, 0, 0, 0, 1, 1, 1]


def test_truncation_cuts_the_longer_sentence_from_its_end():
    tok = WordIds()
    a, b = "a1 a2 a3 a4 a5 a6", "b1 b2 b3"
    ids, segments = encode_pair(tok, a, b, max_len=10)  # 6 + 3 + 3 = 12: two cut from a
    assert ids == [CLS_ID, 10, 11, 12, 13, SEP_ID, 16, 17, 18, SEP_ID]
    assert segments == [0] * 6 + [1] * 4
    ids, _ = encode_pair(tok, "a1 a2 a3", "b1 b2 b3", max_len=8)  # a tie: b loses the token
    assert ids == [CLS_ID, 10, 11, 12, SEP_ID, 16, 17, SEP_ID]
    ids, _ = encode_pair(tok, "a1 a2 a3 a4", "b1 b2 b3 b4", max_len=9)  # b first, then a, ...
    assert ids == [CLS_ID, 10, 11, 12, SEP_ID, 16, 17, 18, SEP_ID]
    ids, segments = encode_pair(tok, a, b, max_len=5)
    assert ids == [CLS_ID, 10, SEP_ID, 16, SEP_ID] and segments == [0, 0, 0, 1, 1]
    ids, _ = encode_pair(tok, a, b, max_len=12)  # fits exactly: nothing cut
    assert len(ids) == 12


def test_encode_pair_errors():
    tok = WordIds()
    with pytest.raises(ValueError, match="encode_pair: max_len must be an int >= 5.*got 4"):
        encode_pair(tok, "a", "b", max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        encode_pair(tok, "a", "b", max_len=True)
    with pytest.raises(ValueError, match="sentence b encodes to no tokens"):
        encode_pair(tok, "a", "   ", max_len=10)
    with pytest.raises(ValueError, match="encode_sentence_pairs: pair 1: sentence a encodes to no tokens"):
        encode_sentence_pairs(tok, [SentencePair("a", "b", True), SentencePair("", "b", False)], max_len=10)


def test_encoded_pairs_pack_the_pairs():
    tok = WordIds()
    pairs = [
        SentencePair("a b c", "d", True),
        SentencePair("e f g h i j", "k l m n", False),
        SentencePair("o", "p q", False),
    ]
    packed = encode_sentence_pairs(tok, pairs, max_len=8, chunk_size=2)
    assert len(packed) == 3
    assert packed.lengths.tolist() == [7, 8, 6]
    for i, pair in enumerate(pairs):
        assert packed[i] == (*encode_pair(tok, pair.a, pair.b, max_len=8), pair.is_next)
    assert list(packed)[-1] == packed[-1] == packed[2]
    with pytest.raises(IndexError, match="index 3 is outside the 3 pairs"):
        packed[3]
    again = EncodedPairs.from_examples(list(packed))
    for name in ("ids", "offsets", "first_lengths", "is_next"):
        np.testing.assert_array_equal(getattr(again, name), getattr(packed, name))
    with pytest.raises(ValueError, match="example 0 needs as many segments as ids"):
        EncodedPairs.from_examples([([2, 5, 3, 6, 3], [0, 1, 0, 1, 1], True)])
    with pytest.raises(ValueError, match="non-empty a and b"):
        EncodedPairs.from_examples([([2, 3, 6, 3], [0, 0, 1, 1], True)])
    with pytest.raises(ValueError, match=r"pair 1 is not laid out as \[CLS\] a \[SEP\] b \[SEP\]"):
        EncodedPairs.from_examples([([2, 5, 3, 6, 3], [0, 0, 0, 1, 1], True), ([2, 5, 5, 6, 3], [0, 0, 0, 1, 1], True)])


def test_encoding_with_a_trained_wordpiece_tokenizer():
    sentences = ["the cat sat on the mat .", "a dog ran in the park .", "the [UNK] was odd ."] * 10
    tok = WordPieceTokenizer.train(sentences, vocab_size=60)
    ids, segments = encode_pair(tok, "The cat sat.", "A [UNK] ran.", max_len=32)
    assert tok.id_to_token(ids) == ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "a", "[UNK]", "ran", ".", "[SEP]"]
    assert segments == [0] * 6 + [1] * 5
    packed = encode_sentence_pairs(tok, [SentencePair("The cat sat.", "A [UNK] ran.", True)], max_len=32)
    assert packed[0] == (ids, segments, True)


# ----------------------------------------------------------------------------- masking

V = 20  # a small vocabulary: a random replacement draws the original id 1 time in 15


@pytest.fixture(scope="module")
def masked():
    """~216k maskable positions: 400 rows of [CLS] ... [SEP] ... [SEP] and padding."""
    rng = np.random.default_rng(0)
    rows, n = 400, 600
    tokens = torch.from_numpy(rng.integers(FIRST_NORMAL, V, size=(rows, n)))
    tokens[:, 0] = CLS_ID
    tokens[:, 300] = SEP_ID
    tokens[torch.arange(rows), torch.from_numpy(rng.integers(500, n, size=rows))] = SEP_ID
    tokens[:, 100:110] = UNK_ID
    lengths = torch.from_numpy(rng.integers(520, n + 1, size=rows))
    tokens[torch.arange(n)[None, :] >= lengths[:, None]] = PAD_ID
    maskable = maskable_positions(tokens, [PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID])
    inputs, targets = mask_tokens(
        tokens,
        maskable=maskable,
        mask_id=MASK_ID,
        vocab_size=V,
        first_normal_id=FIRST_NORMAL,
        generator=torch.Generator().manual_seed(0),
    )
    return tokens, maskable, inputs, targets


def test_maskable_positions_exclude_the_specials():
    tokens = torch.tensor([[CLS_ID, 7, UNK_ID, SEP_ID, 9, SEP_ID, PAD_ID]])
    assert maskable_positions(tokens, [PAD_ID, CLS_ID, SEP_ID]).tolist() == [
        [False, True, True, False, True, False, False]
    ]
    with pytest.raises(ValueError, match="maskable_positions: tokens must be an integer tensor"):
        maskable_positions(tokens.float(), [0])


def test_fifteen_percent_of_the_maskable_positions_are_selected(masked):
    tokens, maskable, inputs, targets = masked
    selected = targets != IGNORE_INDEX
    assert int(maskable.sum()) > 200_000
    assert not selected[~maskable].any()  # specials and padding: never
    assert within_binomial(int(selected.sum()), int(maskable.sum()), 0.15)
    assert torch.equal(targets[selected], tokens[selected])
    assert torch.equal(inputs[~selected], tokens[~selected])
    assert (targets[~selected] == IGNORE_INDEX).all()


def test_selected_positions_are_masked_replaced_or_kept_80_10_10(masked):
    tokens, _, inputs, targets = masked
    selected = targets != IGNORE_INDEX
    n = int(selected.sum())
    original, now = tokens[selected], inputs[selected]
    masked_count = int((now == MASK_ID).sum())
    changed = (now != MASK_ID) & (now != original)
    kept = now == original
    p_same = 1 / (V - FIRST_NORMAL)  # a random replacement that draws the original id
    assert within_binomial(masked_count, n, 0.8)
    assert within_binomial(int(changed.sum()), n, 0.1 * (1 - p_same))
    assert within_binomial(int(kept.sum()), n, 0.1 + 0.1 * p_same)
    assert masked_count + int(changed.sum()) + int(kept.sum()) == n
    # replacements are never special and are uniform over the normal ids
    replaced = now[changed]
    assert int(replaced.min()) >= FIRST_NORMAL and int(replaced.max()) < V
    counts = torch.bincount(replaced - FIRST_NORMAL, minlength=V - FIRST_NORMAL)
    # given a change, each id other than the original is equally likely; over all originals
    # (uniform here) every normal id gets about 1/15 of the changes
    for count in counts.tolist():
        assert within_binomial(count, len(replaced), 1 / (V - FIRST_NORMAL))


def test_masking_depends_only_on_the_generator_state():
    tokens = torch.randint(FIRST_NORMAL, 100, (8, 50), generator=torch.Generator().manual_seed(1))
    maskable = torch.ones_like(tokens, dtype=torch.bool)
    kwargs = dict(maskable=maskable, mask_id=MASK_ID, vocab_size=100, first_normal_id=FIRST_NORMAL)
    first = mask_tokens(tokens, generator=torch.Generator().manual_seed(5), **kwargs)
    second = mask_tokens(tokens, generator=torch.Generator().manual_seed(5), **kwargs)
    other = mask_tokens(tokens, generator=torch.Generator().manual_seed(6), **kwargs)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert not torch.equal(first[1], other[1])
    everything, targets = mask_tokens(
        tokens, generator=torch.Generator().manual_seed(5), select_prob=1.0, mask_prob=1.0, random_prob=0.0, **kwargs
    )
    assert (everything == MASK_ID).all() and torch.equal(targets, tokens)


def test_mask_tokens_errors():
    tokens = torch.full((2, 4), 7)
    good = dict(
        maskable=torch.ones(2, 4, dtype=torch.bool),
        mask_id=MASK_ID,
        vocab_size=10,
        first_normal_id=5,
        generator=torch.Generator(),
    )
    cases = [
        (dict(tokens=tokens.int()), r"tokens must be a \(B, n\) int64 tensor, got shape \(2, 4\), dtype torch.int32"),
        (dict(tokens=tokens[0]), r"tokens must be a \(B, n\) int64 tensor"),
        (dict(maskable=torch.ones(2, 5, dtype=torch.bool)), r"maskable must be a bool tensor of the tokens' shape"),
        (dict(maskable=torch.ones(2, 4)), "maskable must be a bool tensor"),
        (dict(select_prob=0.0), r"select_prob must lie in \(0, 1\], got 0"),
        (dict(select_prob=1.2), r"select_prob must lie in \(0, 1\], got 1.2"),
        (dict(mask_prob=0.8, random_prob=0.3), "mask_prob \\+ random_prob must be at most 1"),
        (dict(random_prob=-0.1), "random_prob must lie"),
        (dict(first_normal_id=10), r"first_normal_id must be an int in \[0, 10\), got 10"),
        (dict(mask_id=-1), "mask_id must be an int"),
        (dict(vocab_size=0), "vocab_size must be a positive int"),
        (dict(tokens=torch.full((2, 4), 10)), r"tokens hold ids in \[10, 10\], outside \[0, 10\)"),
        (dict(generator=0), "generator must be a torch.Generator"),
    ]
    for change, message in cases:
        kwargs = {"tokens": tokens, **good, **change}
        with pytest.raises(ValueError, match="mask_tokens: " + message):
            mask_tokens(kwargs.pop("tokens"), **kwargs)


# ----------------------------------------------------------------------------- batches


def example_pairs(count=50, seed=0):
    """Pairs of distinct lengths 5, 6, ..., so that a batch row's length names its pair."""
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(count):
        length = 5 + i
        n_first = 2 + int(rng.integers(1, length - 3))  # [CLS] a [SEP] with a non-empty a and b
        ids = rng.integers(FIRST_NORMAL, 40, size=length).tolist()
        ids[0], ids[n_first - 1], ids[-1] = CLS_ID, SEP_ID, SEP_ID
        ids[1] = UNK_ID if i % 3 == 0 else ids[1]
        examples.append((ids, [0] * n_first + [1] * (length - n_first), bool(i % 2)))
    return examples


def rows_of(batch):
    return (batch.tokens != PAD_ID).sum(dim=1) - 5  # the pair index: length - 5


def test_a_batch_lays_out_its_pairs(one_thread):
    examples = example_pairs()
    batches = PretrainingBatches(EncodedPairs.from_examples(examples), 8, vocab_size=40, seed=1)
    batch = batches(3)
    assert isinstance(batch, PretrainingBatch)
    assert batch.tokens.shape == batch.segments.shape == batch.targets.shape and batch.is_next.shape == (8,)
    assert all(t.dtype == torch.long for t in batch)
    lengths = (batch.tokens != PAD_ID).sum(dim=1)
    assert batch.tokens.shape[1] == int(lengths.max())  # padded to its own longest pair
    predictions = 0
    for row, index in enumerate(rows_of(batch).tolist()):
        ids, segments, is_next = examples[index]
        length = len(ids)
        assert batch.tokens[row, :length].ne(PAD_ID).all() and batch.tokens[row, length:].eq(PAD_ID).all()
        assert batch.segments[row].tolist() == segments + [0] * (batch.tokens.shape[1] - length)
        assert batch.is_next[row].item() == int(is_next)
        for t in range(batch.tokens.shape[1]):
            target, token = batch.targets[row, t].item(), batch.tokens[row, t].item()
            if t >= length or ids[t] in (CLS_ID, SEP_ID, UNK_ID):
                assert target == IGNORE_INDEX and (t >= length or token == ids[t])
            elif target == IGNORE_INDEX:
                assert token == ids[t]
            else:
                assert target == ids[t]
                predictions += 1
    assert batch.n_predictions == predictions > 0
    assert torch.equal(batch.padding, batch.tokens == PAD_ID)


def test_batches_are_a_pure_function_of_the_step(one_thread):
    pairs = EncodedPairs.from_examples(example_pairs())
    batches = PretrainingBatches(pairs, 8, vocab_size=40, seed=1)
    fresh = PretrainingBatches(pairs, 8, vocab_size=40, seed=1)
    for step in (0, 5, 6, 7, 13, 100):
        assert all(torch.equal(x, y) for x, y in zip(batches(step), fresh(step)))
    batches(100)  # visiting another epoch first changes nothing
    assert all(torch.equal(x, y) for x, y in zip(batches(5), fresh(5)))
    assert not torch.equal(batches(0).targets, batches(1).targets)
    other_seed = PretrainingBatches(pairs, 8, vocab_size=40, seed=2)
    assert not torch.equal(other_seed(0).tokens, batches(0).tokens)


def test_each_epoch_visits_every_pair_once_with_fresh_masks(one_thread):
    batches = PretrainingBatches(EncodedPairs.from_examples(example_pairs()), 8, vocab_size=40, seed=1)
    assert len(batches) == 7  # 50 pairs: 6 batches of 8 and one of 2
    epochs = [[rows_of(batches(e * 7 + i)).tolist() for i in range(7)] for e in range(2)]
    for order in epochs:
        assert sorted(sum(order, [])) == list(range(50))
        assert [len(b) for b in order] == [8] * 6 + [2]
    assert epochs[0] != epochs[1]  # reshuffled
    # the same pair in two epochs: masked afresh (dynamic masking)
    first = {p: batches(i).targets[r] for i, b in enumerate(epochs[0]) for r, p in enumerate(b)}
    second = {p: batches(7 + i).targets[r] for i, b in enumerate(epochs[1]) for r, p in enumerate(b)}
    assert sum(not torch.equal(first[p][: 5 + p], second[p][: 5 + p]) for p in range(50)) > 40


def test_validation_batches_repeat_exactly(one_thread):
    batches = PretrainingBatches(EncodedPairs.from_examples(example_pairs()), 16, vocab_size=40, seed=4, shuffle=False)
    first, second = list(batches), list(batches)
    assert len(first) == len(batches) == 4
    for x, y, step in zip(first, second, range(4)):
        assert all(torch.equal(a, b) for a, b in zip(x, y))
        assert all(torch.equal(a, b) for a, b in zip(x, batches(step + 4)))  # every pass the same
    assert sum((rows_of(b).tolist() for b in first), []) == list(range(50))  # in the pairs' order


def test_batch_moves_to_a_device_as_a_named_tuple(one_thread):
    batch = PretrainingBatches(EncodedPairs.from_examples(example_pairs()), 4, vocab_size=40)(0)
    moved = to_device(batch, torch.device("cpu"))
    assert type(moved) is PretrainingBatch
    assert all(torch.equal(a, b) for a, b in zip(moved, batch))
    assert moved.n_predictions == batch.n_predictions


def test_masking_proportions_over_batches(one_thread):
    """The batches' masking is mask_tokens': 15% of the non-special positions over many steps."""
    examples = example_pairs(count=120, seed=3)
    batches = PretrainingBatches(EncodedPairs.from_examples(examples), 32, vocab_size=40, seed=9)
    selected = maskable = masks = 0
    for step in range(40):
        batch = batches(step)
        chosen = batch.targets != IGNORE_INDEX
        selected += int(chosen.sum())
        masks += int((batch.tokens[chosen] == MASK_ID).sum())
        maskable += sum(sum(i not in (CLS_ID, SEP_ID, UNK_ID) for i in examples[p][0]) for p in rows_of(batch).tolist())
    assert within_binomial(selected, maskable, 0.15)
    assert within_binomial(masks, selected, 0.8)


def test_batch_errors():
    pairs = EncodedPairs.from_examples(example_pairs())
    with pytest.raises(ValueError, match="PretrainingBatches: batch_size must be a positive int, got 0"):
        PretrainingBatches(pairs, 0, vocab_size=40)
    with pytest.raises(ValueError, match=r"ids in \[1, 39\], outside \[0, 30\)"):
        PretrainingBatches(pairs, 4, vocab_size=30)
    with pytest.raises(ValueError, match="PretrainingBatches: mask_prob \\+ random_prob"):
        PretrainingBatches(pairs, 4, vocab_size=40, mask_prob=0.95)
    with pytest.raises(ValueError, match="pairs must be EncodedPairs"):
        PretrainingBatches(example_pairs(), 4, vocab_size=40)
    with pytest.raises(ValueError, match="no pairs"):
        PretrainingBatches(EncodedPairs.from_examples([]), 4, vocab_size=40)
    with pytest.raises(ValueError, match="step must be a non-negative int, got -1"):
        PretrainingBatches(pairs, 4, vocab_size=40)(-1)
    with pytest.raises(ValueError, match="PretrainingBatches.order: epoch must be a non-negative int, got -2"):
        PretrainingBatches(pairs, 4, vocab_size=40).order(-2)
    with pytest.raises(ValueError, match="seed must be a non-negative int, got -3"):
        PretrainingBatches(pairs, 4, vocab_size=40, seed=-3)
    with pytest.raises(ValueError, match="EncodedPairs: ids must be a 1-D integer array"):
        EncodedPairs(np.zeros(5), np.array([0, 5]), np.array([3]), np.array([True]))


# ----------------------------------------------------------------------------- packed documents


def word_documents(n_documents=40, seed=0):
    """Documents of sentences whose every word is unique and says where it stands: d3s4w1 is
    word 1 of sentence 4 of document 3."""
    rng = np.random.default_rng(seed)
    return [
        [" ".join(f"d{d}s{s}w{w}" for w in range(int(rng.integers(1, 9)))) for s in range(int(rng.integers(1, 25)))]
        for d in range(n_documents)
    ]


def places_of(tok, ids):
    """(document, sentence, word) of every id that is a word (not a special)."""
    words = {i: w for w, i in tok.ids.items()}
    out = []
    for i in ids:
        if i in words:
            d, s, w = words[i][1:].replace("s", " ").replace("w", " ").split()
            out.append((int(d), int(s), int(w)))
    return out


def test_packed_text_is_every_document_in_order_cut_at_sentences():
    docs = word_documents()
    tok = WordIds()
    packed = pretraining.pack_documents(tok, docs, max_len=20, nsp=False)
    assert (packed.first_lengths == packed.lengths).all() and (packed.lengths <= 20).all()
    read = []
    for ids, segments, _ in packed:
        assert ids[0] == CLS_ID and ids[-1] == SEP_ID and set(segments) == {0}
        places = places_of(tok, ids)
        assert len({d for d, _, _ in places}) == 1  # never across documents
        assert places[0][2] == 0  # starts a sentence (none is longer than 18)
        read += places
    expected = [
        (d, s, w) for d, doc in enumerate(docs) for s, sentence in enumerate(doc) for w in range(len(sentence.split()))
    ]
    assert read == expected  # nothing lost, nothing repeated
    batch = PretrainingBatches(packed, 8, vocab_size=10 + len(tok.ids))(0)
    assert (batch.segments == 0).all()


def test_a_sentence_longer_than_the_sequence_is_cut():
    tok = WordIds()
    docs = [[" ".join(f"d0s0w{w}" for w in range(30)), "d0s1w0"]]
    packed = pretraining.pack_documents(tok, docs, max_len=12, nsp=False)
    assert packed.lengths.tolist() == [12, 12, 12, 3]  # 10 + 10 + 10 pieces, then the next sentence
    assert [w for ids, _, _ in packed for _, _, w in places_of(tok, ids)] == list(range(30)) + [0]


def test_segment_pairs_follow_on_or_come_from_another_document():
    docs = word_documents(200)
    tok = WordIds()
    packed = pretraining.pack_documents(tok, docs, max_len=24, nsp=True, seed=0)
    assert (packed.lengths <= 24).all()
    own = []
    for ids, segments, is_next in packed:
        n_a = segments.count(0)
        a, b = places_of(tok, ids[:n_a]), places_of(tok, ids[n_a:])
        assert a and b and len({d for d, _, _ in a}) == 1 and len({d for d, _, _ in b}) == 1
        if is_next:
            assert a[0][0] == b[0][0]
            last, first = a[-1], b[0]
            sentence = docs[last[0]][last[1]].split()
            follows = (first[1:] == (last[1], last[2] + 1)) or (
                first[1:] == (last[1] + 1, 0) and last[2] == len(sentence) - 1
            )
            assert follows  # B continues A's text exactly
            own += a + b
        else:
            assert a[0][0] != b[0][0]  # B from another document
            own += a
    n_next = int(packed.is_next.sum())
    assert within_binomial(n_next, len(packed), 0.5)
    expected = [
        (d, s, w) for d, doc in enumerate(docs) for s, sentence in enumerate(doc) for w in range(len(sentence.split()))
    ]
    assert sorted(own) == expected  # the text of the documents, once each


def test_packing_depends_only_on_the_seed():
    docs = word_documents(30)
    first, again = (pretraining.pack_documents(WordIds(), docs, 20, seed=5) for _ in range(2))
    other = pretraining.pack_documents(WordIds(), docs, 20, seed=6)
    np.testing.assert_array_equal(first.ids, again.ids)
    np.testing.assert_array_equal(first.is_next, again.is_next)
    assert not np.array_equal(first.is_next, other.is_next) or not np.array_equal(first.ids, other.ids)


def test_pack_documents_errors():
    docs = word_documents(3)
    with pytest.raises(ValueError, match="max_len must be an int >= 5"):
        pretraining.pack_documents(WordIds(), docs, 4)
    with pytest.raises(ValueError, match="nsp must be a bool"):
        pretraining.pack_documents(WordIds(), docs, 20, nsp="yes")
    with pytest.raises(ValueError, match=r"next_prob must lie in \[0, 1\]"):
        pretraining.pack_documents(WordIds(), docs, 20, next_prob=1.5)
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        pretraining.pack_documents(WordIds(), docs, 20, seed=-1)
    with pytest.raises(ValueError, match="at least 2 documents"):
        pretraining.pack_documents(WordIds(), docs[:1], 20, nsp=True)
    pretraining.pack_documents(WordIds(), docs[:1], 20, nsp=False)  # text needs one document only
    with pytest.raises(ValueError, match="every sentence must be a str"):
        pretraining.pack_documents(WordIds(), [["a b", 3], ["c"]], 20)
    with pytest.raises(ValueError, match="no sentence encodes to any piece"):
        pretraining.pack_documents(WordIds(), [[""], [" "]], 20, nsp=False)
    with pytest.raises(ValueError, match="2 documents with text"):
        pretraining.pack_documents(WordIds(), [["a b"], [""]], 20, nsp=True)
