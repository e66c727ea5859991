"""Tests of word tokenisation and the vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_book.tokenizers.text import Vocab, tokenize_words

# --------------------------------------------------------------------------------------
# tokenize_words
# --------------------------------------------------------------------------------------


def test_tokenize_words_sentence():
    text = "I must go back to my ship, and to my crew."
    assert tokenize_words(text) == ["i", "must", "go", "back", "to", "my", "ship", "and", "to", "my", "crew"]


def test_tokenize_words_capitals_digits_punctuation_apostrophes():
    text = "Don't STOP: 42 rock'n'roll fans -- the dogs' bowls (x2)! O'Neil's 'quoted' word?"
    assert tokenize_words(text) == [
        "don't",  # apostrophe inside a word is kept
        "stop",  # lower-cased
        "rock'n'roll",
        "fans",
        "the",
        "dogs",  # trailing apostrophe dropped
        "bowls",
        "x",  # digits dropped
        "o'neil's",
        "quoted",  # surrounding quotes dropped
        "word",
    ]


def test_tokenize_words_empty_and_no_words():
    assert tokenize_words("") == []
    assert tokenize_words("123 -- 4.5 !?") == []


@pytest.mark.parametrize("bad", [None, b"bytes", 42, ["a", "b"]])
def test_tokenize_words_rejects_non_str(bad):
    with pytest.raises(ValueError, match="str.*" + type(bad).__name__):
        tokenize_words(bad)


def test_tokenize_words_typographic_apostrophe_stays_inside_the_word():
    # The Odyssey writes possessives with U+2019; they must not split off a junk "s".
    assert tokenize_words("my father\u2019s ship") == ["my", "father's", "ship"]
    assert tokenize_words("my father's ship") == tokenize_words("my father\u2019s ship")


def test_tokenize_words_keeps_non_ascii_letters_inside_words():
    assert tokenize_words("Café Müller, naïve!") == ["café", "müller", "naïve"]


# --------------------------------------------------------------------------------------
# Vocab
# --------------------------------------------------------------------------------------

WORDS = "b a c a b d a e e".split()  # a:3, b:2, e:2, c:1, d:1


def test_vocab_build_orders_by_frequency_then_alphabetically():
    vocab = Vocab.build(WORDS)
    assert vocab.itos == ["a", "b", "e", "c", "d"]
    assert vocab.stoi == {"a": 0, "b": 1, "e": 2, "c": 3, "d": 4}
    assert vocab.counts.tolist() == [3, 2, 2, 1, 1]
    assert len(vocab) == 5
    assert "e" in vocab and "z" not in vocab
    assert vocab["e"] == 2


def test_vocab_build_ties_are_alphabetical_whatever_the_input_order():
    assert Vocab.build(["z", "y", "x"]).itos == ["x", "y", "z"]
    assert Vocab.build(["y", "x", "z"]).itos == ["x", "y", "z"]


def test_vocab_build_min_count():
    assert Vocab.build(WORDS, min_count=2).itos == ["a", "b", "e"]
    assert Vocab.build(WORDS, min_count=3).itos == ["a"]
    assert len(Vocab.build(WORDS, min_count=4)) == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_vocab_build_invalid_min_count(bad):
    with pytest.raises(ValueError, match="min_count"):
        Vocab.build(WORDS, min_count=bad)


def test_vocab_encode_without_unknown():
    vocab = Vocab.build(WORDS)
    ids = vocab.encode(["d", "a", "e", "a"])
    assert ids.dtype == np.int64
    assert ids.tolist() == [4, 0, 2, 0]
    with pytest.raises(KeyError, match="'zebra'"):
        vocab.encode(["a", "zebra"])
    with pytest.raises(KeyError, match="'zebra'"):
        vocab["zebra"]
    assert vocab.encode([]).dtype == np.int64 and vocab.encode([]).size == 0


def test_vocab_encode_with_unknown():
    vocab = Vocab.build(WORDS)
    assert vocab.encode(["a", "zebra", "c"], unknown=-1).tolist() == [0, -1, 3]


def test_vocab_decode_round_trip():
    vocab = Vocab.build(WORDS)
    tokens = ["e", "c", "a", "d", "b", "a"]
    assert vocab.decode(vocab.encode(tokens)) == tokens
    assert vocab.decode(range(len(vocab))) == vocab.itos
    assert vocab.decode(np.array([1, 0], dtype=np.int32)) == ["b", "a"]


def test_vocab_constructor_validation():
    with pytest.raises(ValueError, match="distinct"):
        Vocab(["a", "b", "a"])
    with pytest.raises(ValueError, match="2 counts for 3 tokens"):
        Vocab(["a", "b", "c"], [1, 2])


def test_tokenize_words_keeps_combining_marks_in_their_word():
    import unicodedata

    decomposed = unicodedata.normalize("NFD", "Un café crème")  # e + U+0301, as some keyboards type it
    assert tokenize_words(decomposed) == tokenize_words("Un café crème") == ["un", "café", "crème"]
    assert tokenize_words("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]  # vowel signs and virama stay inside
    assert tokenize_words("ὡπλίσσατο δόρπον") == [unicodedata.normalize("NFC", w) for w in ("ὡπλίσσατο", "δόρπον")]
