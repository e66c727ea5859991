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
from transformer_book.training import _to_device
from transformer_book.wordpiece import CLS_ID, MASK_ID, PAD_ID, SEP_ID, UNK_ID, WordPieceTokenizer

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
        ["Alpha is a letter .", "It has-marks , like 1,000 and 2.5 !", "Does it ?", "Yes",
         "The letter [UNK] is used .", "Legend : GP", "= Goals ; A =", "Assists", "Last one ."],
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
    mean, sd = (3000 - 1) / 2, math.sqrt((3000 ** 2 - 1) / 12)
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
    pairs = [SentencePair("a b c", "d", True), SentencePair("e f g h i j", "k l m n", False),
             SentencePair("o", "p q", False)]
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
    inputs, targets = mask_tokens(tokens, maskable=maskable, mask_id=MASK_ID, vocab_size=V,
                                  first_normal_id=FIRST_NORMAL, generator=torch.Generator().manual_seed(0))
    return tokens, maskable, inputs, targets


def test_maskable_positions_exclude_the_specials():
    tokens = torch.tensor([[CLS_ID, 7, UNK_ID, SEP_ID, 9, SEP_ID, PAD_ID]])
    assert maskable_positions(tokens, [PAD_ID, CLS_ID, SEP_ID]).tolist() == [[False, True, True, False, True,
                                                                              False, False]]
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
    everything, targets = mask_tokens(tokens, generator=torch.Generator().manual_seed(5), select_prob=1.0,
                                      mask_prob=1.0, random_prob=0.0, **kwargs)
    assert (everything == MASK_ID).all() and torch.equal(targets, tokens)


def test_mask_tokens_errors():
    tokens = torch.full((2, 4), 7)
    good = dict(maskable=torch.ones(2, 4, dtype=torch.bool), mask_id=MASK_ID, vocab_size=10, first_normal_id=5,
                generator=torch.Generator())
    cases = [
        (dict(tokens=tokens.int()), r"tokens must be a \(B, n\) int64 tensor, got shape \(2, 4\), dtype torch.int32"),
        (dict(tokens=tokens[0]), r"tokens must be a \(B, n\) int64 tensor"),
        (dict(maskable=torch.ones(2, 5, dtype=torch.bool)), r"maskable must be a bool tensor of the tokens' shape"),
        (dict(maskable=torch.ones(2, 4)), "maskable must be a bool tensor"),
        (dict(select_prob=0.0), r"select_prob must lie in \(0, 1\], got 0"),
        (dict(select_prob=1.2), r"select_prob must lie in \[0, 1\], got 1.2"),
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
    assert sum(not torch.equal(first[p][:5 + p], second[p][:5 + p]) for p in range(50)) > 40


def test_validation_batches_repeat_exactly(one_thread):
    batches = PretrainingBatches(EncodedPairs.from_examples(example_pairs()), 16, vocab_size=40, seed=4,
                                 shuffle=False)
    first, second = list(batches), list(batches)
    assert len(first) == len(batches) == 4
    for x, y, step in zip(first, second, range(4)):
        assert all(torch.equal(a, b) for a, b in zip(x, y))
        assert all(torch.equal(a, b) for a, b in zip(x, batches(step + 4)))  # every pass the same
    assert sum((rows_of(b).tolist() for b in first), []) == list(range(50))  # in the pairs' order


def test_batch_moves_to_a_device_as_a_named_tuple(one_thread):
    batch = PretrainingBatches(EncodedPairs.from_examples(example_pairs()), 4, vocab_size=40)(0)
    moved = _to_device(batch, torch.device("cpu"))
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
    with pytest.raises(ValueError, match="seed must be a non-negative int, got -3"):
        PretrainingBatches(pairs, 4, vocab_size=40, seed=-3)
    with pytest.raises(ValueError, match="EncodedPairs: ids must be a 1-D integer array"):
        EncodedPairs(np.zeros(5), np.array([0, 5]), np.array([3]), np.array([True]))
