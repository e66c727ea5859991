"""Tests of transformer_book.tokenizers.subword: the BPE tokeniser with the book's special ids."""

import itertools

import pytest
import torch

from transformer_book.tokenizers.subword import EOS_ID, PAD_ID, SOS_ID, UNK_ID, SubwordTokenizer

# A small generated corpus: every word is built from a few syllables, so that BPE has
# frequent pairs to merge and rare combinations left in pieces.
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "ße", "ös"]
WORDS = ["".join(p) for p in itertools.product(SYLLABLES, repeat=2)]
SENTENCES = [" ".join(WORDS[(7 * i + 3 * k) % len(WORDS)] for k in range(3 + i % 5)) + "." for i in range(400)]


@pytest.fixture(scope="module")
def tokenizer():
    return SubwordTokenizer.train(SENTENCES, vocab_size=60)


def test_special_ids_and_size(tokenizer):
    assert len(tokenizer) == tokenizer.vocab_size == 60
    assert tokenizer.id_to_piece([PAD_ID, SOS_ID, EOS_ID, UNK_ID]) == ["<pad>", "<sos>", "<eos>", "<unk>"]


def test_round_trip_gives_back_the_sentence(tokenizer):
    for sentence in SENTENCES[:50]:
        ids = tokenizer.encode(sentence)
        assert all(i > UNK_ID for i in ids)  # no specials, no unknowns for training text
        assert tokenizer.decode(ids) == sentence


def test_pieces_are_subwords_that_spell_the_sentence(tokenizer):
    sentence = SENTENCES[3]
    pieces = tokenizer.pieces(sentence)
    assert "".join(pieces).replace("\u2581", " ").strip() == sentence
    assert len(pieces) < len(sentence.replace(" ", ""))  # merges happened: fewer pieces than characters
    assert len(pieces) >= len(sentence.split())  # at least one piece per word


def test_decode_stops_at_eos_and_drops_pad_and_sos(tokenizer):
    ids = tokenizer.encode(SENTENCES[0])
    row = [SOS_ID] + ids + [EOS_ID] + tokenizer.encode(SENTENCES[1]) + [PAD_ID, PAD_ID]
    assert tokenizer.decode(row) == SENTENCES[0]
    assert tokenizer.decode(torch.tensor(row)) == SENTENCES[0]  # a decoder's output row


def test_add_eos_and_batch_encoding(tokenizer):
    batch = tokenizer.encode_batch(SENTENCES[:3], add_eos=True)
    assert batch == [tokenizer.encode(s) + [EOS_ID] for s in SENTENCES[:3]]
    assert tokenizer.encode(SENTENCES[0], add_eos=True)[-1] == EOS_ID


def test_unseen_characters_become_unk_and_are_counted(tokenizer):
    ids = tokenizer.encode("kalo ☃ mine")
    assert UNK_ID in ids
    assert "<unk>" in tokenizer.decode(ids)
    assert tokenizer.unknown_rate(["kalo mine"]) == 0.0
    rate = tokenizer.unknown_rate(["☃ ☃", "kalo"])
    assert 0.0 < rate < 1.0


def test_training_is_reproducible_and_save_load_round_trips(tokenizer, tmp_path):
    again = SubwordTokenizer.train(SENTENCES, vocab_size=60)
    assert again.to_bytes() == tokenizer.to_bytes()
    path = tmp_path / "sub" / "bpe.model"
    tokenizer.save(path)
    loaded = SubwordTokenizer.load(path)
    assert loaded.encode(SENTENCES[5]) == tokenizer.encode(SENTENCES[5])


def test_a_larger_vocabulary_gives_fewer_tokens():
    small = SubwordTokenizer.train(SENTENCES, vocab_size=40)
    large = SubwordTokenizer.train(SENTENCES, vocab_size=90)
    count = lambda tok: sum(len(tok.encode(s)) for s in SENTENCES)
    assert count(large) < count(small)


def test_bad_input_names_the_problem(tokenizer):
    with pytest.raises(ValueError, match="vocab_size"):
        SubwordTokenizer.train(SENTENCES, vocab_size=3)
    with pytest.raises(ValueError, match="too large.*largest possible"):
        SubwordTokenizer.train(["ab ab", "ba"], vocab_size=500)
    with pytest.raises(ValueError, match="no non-empty sentences"):
        SubwordTokenizer.train(["", "  "], vocab_size=10)
    with pytest.raises(ValueError, match="sentence 1"):
        SubwordTokenizer.train(["ab", 5], vocab_size=10)
    with pytest.raises(ValueError, match="model_type"):
        SubwordTokenizer.train(SENTENCES, vocab_size=50, model_type="wordpiece")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([5, 60])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([-1])
    with pytest.raises(ValueError, match="nested"):
        tokenizer.decode([[5, 6]])
    with pytest.raises(ValueError, match="expected a str"):
        tokenizer.encode(b"bytes")
    with pytest.raises(ValueError, match="one str"):
        tokenizer.encode_batch("a sentence")
    with pytest.raises(ValueError, match="not a valid SentencePiece model"):
        SubwordTokenizer(b"not a model")
