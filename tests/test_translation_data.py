"""Tests of the translation data: the Multi30k and Tatoeba loaders (on files the tests write,
standing in for the fetched ones), padding and collation, and length-bucketed batches."""

import gzip
import zipfile

import numpy as np
import pytest
import torch

from transformer_book import data
from transformer_book.data import translation
from transformer_book.data.batching import BucketedBatches, Seq2SeqBatch, collate_pairs, encode_pairs, pad_sequences
from transformer_book.data.download import DataError
from transformer_book.models import shift_right
from transformer_book.tokenizers.subword import EOS_ID, PAD_ID, SOS_ID


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Point the loaders' fetch at files in tmp_path, named as in the catalogue."""
    written = {}

    def fake_fetch(corpus, file=None, *, download=True):
        return written[f"{corpus}/{file}"]

    def write(corpus, name, content: bytes):
        path = tmp_path / corpus / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        written[f"{corpus}/{name}"] = path

    monkeypatch.setattr(translation, "fetch", fake_fetch)
    return write


def _gz(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8"))


def _zip(members: dict) -> bytes:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


# ----------------------------------------------------------------------------- loaders


def test_multi30k_pairs_german_with_english(files):
    files("multi30k", "val.de.gz", _gz("Ein Hund läuft.\nZwei Männer\u2028lachen.\n"))
    files("multi30k", "val.en.gz", _gz("A dog runs.\nTwo men laugh.\n"))
    pairs = data.load_multi30k("val")
    # U+2028 inside a line must not split it: the sides would lose their alignment
    assert pairs == [("Ein Hund läuft.", "A dog runs."), ("Zwei Männer\u2028lachen.", "Two men laugh.")]


def test_multi30k_test_split_reads_the_2016_flickr_files(files):
    files("multi30k", "test_2016_flickr.de.gz", _gz("Hallo\n"))
    files("multi30k", "test_2016_flickr.en.gz", _gz("Hello"))  # no final newline: still one line
    assert data.load_multi30k("test") == [("Hallo", "Hello")]


def test_empty_lines_drop_their_pair_with_a_warning(files):
    files("multi30k", "train.de.gz", _gz("eins\n\ndrei\nvier\n"))
    files("multi30k", "train.en.gz", _gz("one\ntwo\n\nfour\n"))
    with pytest.warns(data.DataWarning, match=r"dropped 2 pairs with an empty side \(lines 2, 3\)"):
        pairs = data.load_multi30k("train")
    assert pairs == [("eins", "one"), ("vier", "four")]


def test_misaligned_sides_raise(files):
    files("multi30k", "val.de.gz", _gz("a\nb\nc\n"))
    files("multi30k", "val.en.gz", _gz("a\nb\n"))
    with pytest.raises(DataError, match="3 lines but the English side 2"):
        data.load_multi30k("val")


def test_truncated_or_corrupt_gzip_raises_naming_the_file(files):
    good = _gz("Ein Hund\n" * 200)
    files("multi30k", "val.de.gz", good[: len(good) // 2])
    files("multi30k", "val.en.gz", _gz("A dog\n" * 200))
    with pytest.raises(DataError, match=r"multi30k/val\.de\.gz.*corrupt or truncated"):
        data.load_multi30k("val")
    files("multi30k", "val.de.gz", b"this is not gzip at all")
    with pytest.raises(DataError, match=r"multi30k/val\.de\.gz"):
        data.load_multi30k("val")
    files("multi30k", "val.de.gz", gzip.compress(b"\xff\xfe bad utf-8\n"))
    with pytest.raises(DataError, match="UnicodeDecodeError"):
        data.load_multi30k("val")


def test_unknown_split_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown split 'dev'.*train, val, test"):
        data.load_multi30k("dev")


def test_tatoeba_reads_english_tab_german_into_german_english_pairs(files):
    files(
        "tatoeba_deu_eng",
        "deu-eng.zip",
        _zip({"deu.txt": "Hi.\tHallo!\r\nRun!\tLauf!\tCC-BY 2.0 (France) Attribution\n\n", "_about.txt": "x"}),
    )
    assert data.load_tatoeba() == [("Hallo!", "Hi."), ("Lauf!", "Run!")]
    assert "tatoeba.org" in data.TATOEBA_ATTRIBUTION


def test_tatoeba_malformed_line_and_bad_archive(files):
    files("tatoeba_deu_eng", "deu-eng.zip", _zip({"deu.txt": "Hi.\tHallo!\nno tab here\n"}))
    with pytest.raises(DataError, match="line 2: expected 'English<TAB>German'"):
        data.load_tatoeba()
    files("tatoeba_deu_eng", "deu-eng.zip", _zip({"other.txt": "x"}))
    with pytest.raises(DataError, match="no deu.txt"):
        data.load_tatoeba()
    files("tatoeba_deu_eng", "deu-eng.zip", b"PK\x03\x04 truncated")
    with pytest.raises(DataError, match="corrupt or truncated"):
        data.load_tatoeba()


def test_tatoeba_empty_side_is_dropped_with_a_warning(files):
    files("tatoeba_deu_eng", "deu-eng.zip", _zip({"deu.txt": "Hi.\t\nRun!\tLauf!\n"}))
    with pytest.warns(data.DataWarning, match="dropped 1 pairs"):
        assert data.load_tatoeba() == [("Lauf!", "Run!")]


# ----------------------------------------------------------------------------- collation


def test_pad_sequences():
    out = pad_sequences([[5, 6, 7], [8]], pad_id=0)
    assert out.dtype == torch.long
    assert out.tolist() == [[5, 6, 7], [8, 0, 0]]
    with pytest.raises(ValueError, match="no sequences"):
        pad_sequences([])
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        pad_sequences([[4], []])


def test_collate_builds_source_input_and_output_rows():
    batch = collate_pairs([([10, 11, 12], [20, 21]), ([13], [22, 23, 24, 25])])
    assert isinstance(batch, Seq2SeqBatch)
    assert batch.src.tolist() == [[10, 11, 12, EOS_ID], [13, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[SOS_ID, 20, 21, PAD_ID, PAD_ID], [SOS_ID, 22, 23, 24, 25]]
    assert batch.tgt_out.tolist() == [[20, 21, EOS_ID, PAD_ID, PAD_ID], [22, 23, 24, 25, EOS_ID]]
    assert batch.n_tokens == 3 + 5
    # tgt_in is the right shift of tgt_out wherever the loss looks (non-PAD targets); after a
    # row's EOS, shift_right would feed that EOS to a position whose target is PAD.
    kept = batch.tgt_out != PAD_ID
    assert torch.equal(batch.tgt_in[kept], shift_right(batch.tgt_out, SOS_ID)[kept])


def test_collate_rejects_empty_sides_and_specials():
    with pytest.raises(ValueError, match="no pairs"):
        collate_pairs([])
    with pytest.raises(ValueError, match="target of pair 1 is empty"):
        collate_pairs([([5], [6]), ([5], [])])
    with pytest.raises(ValueError, match=r"source of pair 0 already holds a special id \(\[2\]\)"):
        collate_pairs([([5, EOS_ID], [6])])


class _CharTokenizer:
    """One id per character (ids from 4), enough to test encode_pairs."""

    def encode_batch(self, texts):
        return [[4 + ord(c) % 50 for c in t] for t in texts]


def test_encode_pairs_drops_long_and_empty_pairs_with_warnings():
    pairs = [("abc", "de"), ("abcdefgh", "x"), ("ab", "")]
    with pytest.warns(UserWarning) as caught:
        kept = encode_pairs(pairs, _CharTokenizer(), max_len=5)
    messages = " | ".join(str(w.message) for w in caught)
    assert "dropped 1 of 3 pairs longer than max_len=5" in messages
    assert "dropped 1 of 3 pairs with a side of no tokens" in messages
    assert len(kept) == 1 and len(kept[0][0]) == 3
    with pytest.raises(ValueError, match="max_len"):
        encode_pairs(pairs, _CharTokenizer(), max_len=1)


# ----------------------------------------------------------------------------- bucketed batches


def _examples(n=500, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (list(rng.integers(4, 90, rng.integers(1, 30))), list(rng.integers(4, 90, rng.integers(1, 30))))
        for _ in range(n)
    ]


def test_every_example_once_per_epoch_within_the_token_budget():
    examples = _examples()
    batches = BucketedBatches(examples, max_tokens=200, seed=3)
    for epoch in range(2):
        indices = np.concatenate(batches.epoch(epoch))
        assert sorted(indices.tolist()) == list(range(len(examples)))
        for b in batches.epoch(epoch):
            assert len(b) * batches.lengths[b].max() <= 200
    assert not all(np.array_equal(a, b) for a, b in zip(batches.epoch(0), batches.epoch(1)))


def test_bucketing_pads_less_than_random_batches():
    examples = _examples()
    bucketed = BucketedBatches(examples, max_tokens=300, seed=0).padding_share()
    random_order = BucketedBatches(examples, max_tokens=300, seed=0, bucket=False).padding_share()
    assert bucketed < 0.1 < random_order


def test_batches_shared_by_threads_are_those_of_one_thread():
    # fit's prefetching reads batches from another thread; four threads asking for steps of many
    # epochs at once must get what one thread gets, and leave the object as one thread would.
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    examples = _examples(n=300)
    reference = BucketedBatches(examples, max_tokens=120, seed=5)
    steps = list(range(0, 40 * len(reference), 7))
    expected = [reference.locate(step) for step in steps]
    for trial in range(3):
        shared = BucketedBatches(examples, max_tokens=120, seed=5)
        order = list(np.random.default_rng(trial).permutation(len(steps)))
        with ThreadPoolExecutor(4) as pool:
            found = dict(zip(order, pool.map(lambda i, shared=shared: shared.locate(steps[i]), order)))
        assert [found[i] for i in range(len(steps))] == expected
        assert [shared.locate(step) for step in steps] == expected  # not corrupted afterwards
    copy = pickle.loads(pickle.dumps(shared))  # the lock is not pickled
    assert copy.locate(steps[-1]) == expected[-1]


def test_batches_are_a_pure_function_of_the_step():
    examples = _examples()
    first = BucketedBatches(examples, max_tokens=250, seed=7)
    second = BucketedBatches(examples, max_tokens=250, seed=7)
    steps = [0, 1, len(first) - 1, len(first), 3 * len(first) + 5]
    for step in reversed(steps):  # a fresh object asked out of order (as when resuming)
        assert torch.equal(second(step).src, first(step).src)
    epoch, index = first.locate(len(first))
    assert (epoch, index) == (1, 0)
    assert torch.equal(first(len(first)).tgt_out, first.batch(first.epoch(1)[0]).tgt_out)
    other_seed = BucketedBatches(examples, max_tokens=250, seed=8)
    assert not torch.equal(other_seed(0).src, first(0).src) or other_seed(0).src.shape != first(0).src.shape


def test_evaluation_batches_are_sorted_and_fixed():
    examples = _examples(100)
    batches = BucketedBatches(examples, max_tokens=400, shuffle=False)
    order = np.concatenate(batches.epoch(0))
    assert np.all(np.diff(batches.lengths[order]) >= 0)
    assert sum(b.src.shape[0] for b in batches) == 100
    assert torch.equal(batches(0).src, batches(len(batches)).src)  # no new epochs without shuffling


def test_max_sentences_caps_the_batch():
    batches = BucketedBatches(_examples(), max_tokens=10_000, max_sentences=16)
    assert max(len(b) for b in batches.epoch(0)) == 16


def test_bucketed_batches_bad_input():
    with pytest.raises(ValueError, match="no examples"):
        BucketedBatches([], 100)
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        BucketedBatches(_examples(5), 0)
    with pytest.raises(ValueError, match=r"max_tokens=10 is smaller than the longest pair \(31 positions"):
        BucketedBatches([([4] * 30, [5])], 10)
    with pytest.raises(ValueError, match="step must be a non-negative int"):
        BucketedBatches(_examples(5), 100)(-1)
    with pytest.raises(ValueError, match="BucketedBatches.epoch: epoch must be a non-negative int, got -1"):
        BucketedBatches(_examples(5), 100).epoch(-1)


def test_bucketed_batches_check_a_step_once(monkeypatch):
    """The batch of a step checks the step, and then finds its epoch without checking the epochs
    it computes (the public epoch and locate still check theirs)."""
    from transformer_book import checks

    seen = []
    real = checks.non_negative_int
    monkeypatch.setattr(
        checks, "non_negative_int", lambda where, **values: seen.append((where, *values)) or real(where, **values)
    )
    batches = BucketedBatches(_examples(), max_tokens=200, seed=3)
    step = 3 * len(batches) + 1  # epoch 3: epochs 0 to 3 are built
    epoch, index = batches.locate(step)
    assert seen == [("BucketedBatches", "step")] and epoch >= 2
    seen.clear()
    batch = batches(step)
    assert seen == [("BucketedBatches", "step")]
    expected = batches.batch(batches.epoch(epoch)[index])
    assert torch.equal(batch.src, expected.src) and torch.equal(batch.tgt_out, expected.tgt_out)


# ----------------------------------------------------------------------------- language-model windows


def test_random_windows_are_next_token_pairs_and_repeat_by_step():
    from transformer_book.data import RandomWindows

    ids = torch.arange(100)
    windows = RandomWindows(ids, context=8, batch_size=5, seed=1)
    x, y = windows(3)
    assert x.shape == y.shape == (5, 8)
    assert torch.equal(y, x + 1)  # y is x shifted by one position
    assert torch.equal(x[:, 1:], x[:, :-1] + 1)  # contiguous windows
    assert x.min() >= 0 and y.max() <= 99
    assert torch.equal(RandomWindows(ids, 8, 5, seed=1)(3)[0], x)  # a pure function of (seed, step)
    assert not torch.equal(windows(4)[0], x)
    with pytest.raises(ValueError, match="too few"):
        RandomWindows(torch.arange(8), context=8, batch_size=2)
    with pytest.raises(ValueError, match="1-D integer"):
        RandomWindows(torch.zeros(50), context=8, batch_size=2)


# --------------------------------------------------------------------------------------
# split_linked_groups: no sentence of the test part is trained on, on either side
# --------------------------------------------------------------------------------------


def _linked_corpus():
    # 300 groups: group g has English sentences e{g}a, e{g}b and German g{g}a, g{g}b, g{g}c linked
    # into one component by pairs that share a side (a chain a-a, a-b, b-b, c-b).
    pairs = []
    for g in range(300):
        pairs += [
            (f"G{g} a.", f"E{g} a."),
            (f"G{g} a.", f"E{g} b."),
            (f"G{g} b.", f"E{g} b."),
            (f"g{g}  C.", f"E{g} B."),
        ]
    return pairs


def test_split_linked_groups_keeps_every_group_whole():
    pairs = _linked_corpus()
    split = data.split_linked_groups(pairs, val_size=40, test_size=80, seed=3)
    assert len(split.test) == 80 and len(split.val) == 40 and split.held_out == 0  # groups of 4 fill them exactly
    assert sorted(split.train + split.val + split.test) == sorted(pairs)
    group = lambda pair: pair[1].split()[0].lower()  # e.g. "e17"
    parts = [{group(p) for p in part} for part in (split.train, split.val, split.test)]
    assert not parts[0] & parts[1] and not parts[0] & parts[2] and not parts[1] & parts[2]
    sentences = lambda part: {" ".join(s.casefold().split()) for pair in part for s in pair}
    assert not sentences(split.train) & sentences(split.test)  # on either side, any case
    assert [pairs.index(p) for p in split.train] == sorted(pairs.index(p) for p in split.train)  # corpus order
    again = data.split_linked_groups(pairs, val_size=40, test_size=80, seed=3)
    other = data.split_linked_groups(pairs, val_size=40, test_size=80, seed=4)
    assert again == split and other.test != split.test


def test_split_linked_groups_holds_out_the_groups_of_reserved_sentences():
    pairs = _linked_corpus()
    split = data.split_linked_groups(pairs, val_size=4, test_size=4, hold_out=["e5 B.", "G7 B."])
    assert split.held_out == 8
    kept = split.train + split.val + split.test
    assert len(kept) == len(pairs) - 8
    assert not any(p[1].startswith(("E5 ", "E7 ")) for p in kept)


def test_split_linked_groups_refuses_sizes_that_leave_no_training_data():
    pairs = _linked_corpus()
    with pytest.raises(ValueError, match="none is left for training"):
        data.split_linked_groups(pairs, val_size=600, test_size=600)
    with pytest.raises(ValueError, match="test_size must be a positive int"):
        data.split_linked_groups(pairs, val_size=10, test_size=0)
    with pytest.raises(ValueError, match="val_size must be a positive int"):
        data.split_linked_groups(pairs, val_size=2.5, test_size=10)
