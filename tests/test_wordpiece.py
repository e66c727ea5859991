"""Tests of transformer_book.tokenizers.wordpiece: BERT's uncased WordPiece tokenizer with fixed special ids.

Expectations come from a plain-Python byte-pair learner and a plain-Python greedy
longest-match encoder written here, and from hand-built sentences, never from the code under test.
"""

import itertools
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch

from transformer_book.tokenizers.wordpiece import (
    CLS_ID,
    MASK_ID,
    PAD_ID,
    SEP_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    WordPieceTokenizer,
)

# A small generated corpus: words built from a few syllables, so that there are frequent
# pairs to merge, many ties among them, and rare combinations left in pieces.
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "so", "pe"]
WORDS = ["".join(p) for p in itertools.product(SYLLABLES, repeat=2)] + [
    "".join(p) for p in itertools.product(SYLLABLES[:4], repeat=3)
]
SENTENCES = [" ".join(WORDS[(7 * i + 3 * k) % len(WORDS)] for k in range(3 + i % 5)) + "." for i in range(400)]
VOCAB_SIZE = 80


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer.train(SENTENCES, vocab_size=VOCAB_SIZE)


def corpus_words(sentences):
    """The corpus's words as BERT's pre-tokenizer cuts them (here: letters, and '.' on its own)."""
    return Counter(w for s in sentences for w in s.replace(".", " . ").split())


def reference_vocabulary(word_counts, vocab_size, min_frequency=2):
    """Byte-pair merges in plain Python: the specials, the characters (word starts, then
    ## continuations, each sorted), then the most frequent adjacent pair merged, again and
    again; ties go to the pair of the lowest ids."""
    starts = sorted({w[0] for w in word_counts})
    continuations = sorted({"##" + c for w in word_counts for c in w[1:]})
    vocab = list(SPECIAL_TOKENS) + starts + continuations
    ids = {piece: i for i, piece in enumerate(vocab)}
    split = {w: [w[0]] + ["##" + c for c in w[1:]] for w in word_counts}
    while len(vocab) < vocab_size:
        pairs = Counter()
        for word, count in word_counts.items():
            for a, b in zip(split[word], split[word][1:]):
                pairs[a, b] += count
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], -ids[p[0]], -ids[p[1]]))
        if pairs[best] < min_frequency:
            break
        merged = best[0] + best[1][2:]
        vocab.append(merged)
        ids[merged] = len(vocab) - 1
        for word, symbols in split.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            split[word] = out
    return vocab


def greedy_longest_match(word, vocab):
    """BERT's WordPiece encoding of one word: the longest vocabulary entry that starts the rest."""
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            return ["[UNK]"]
    return pieces


def test_special_tokens_have_ids_0_to_4(tokenizer):
    assert (PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID) == (0, 1, 2, 3, 4)
    assert tokenizer.id_to_token(range(5)) == list(SPECIAL_TOKENS) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert len(tokenizer) == tokenizer.vocab_size == VOCAB_SIZE
    assert repr(tokenizer) == f"WordPieceTokenizer({VOCAB_SIZE} pieces, uncased)"


def test_vocabulary_is_byte_pair_merges_with_continuation_pieces(tokenizer):
    expected = reference_vocabulary(corpus_words(SENTENCES), VOCAB_SIZE)
    vocab = tokenizer.vocab()
    assert sorted(vocab, key=vocab.get) == expected
    assert tokenizer.token_to_id("##a") is not None and tokenizer.token_to_id("a") is None  # no word starts with a


def test_min_frequency_stops_the_merges():
    sentences = ["abab abab cd"] * 3 + ["xy"]
    small = WordPieceTokenizer.train(sentences, vocab_size=100, min_frequency=4)
    expected = reference_vocabulary(Counter({"abab": 6, "cd": 3, "xy": 1}), 100, min_frequency=4)
    assert sorted(small.vocab(), key=small.vocab().get) == expected
    assert len(small) == len(expected) < 100
    assert "ab" in expected and "abab" in expected and "cd" not in expected  # cd occurs 3 times only


def test_training_is_deterministic_across_runs_and_thread_counts(tokenizer):
    # Hugging Face's own WordPieceTrainer gives a different vocabulary on almost every run here
    assert WordPieceTokenizer.train(SENTENCES, vocab_size=VOCAB_SIZE).to_str() == tokenizer.to_str()
    assert WordPieceTokenizer.train(reversed(SENTENCES), vocab_size=VOCAB_SIZE).vocab() == tokenizer.vocab()
    code = (
        "import sys, json; from transformer_book.tokenizers.wordpiece import WordPieceTokenizer; "
        "sys.stdout.write(json.dumps(WordPieceTokenizer.train(json.load(sys.stdin), vocab_size=80).vocab()))"
    )
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")  # another process, one thread
    out = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(SENTENCES), env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == tokenizer.vocab()


def test_words_are_encoded_by_greedy_longest_match(tokenizer):
    vocab = tokenizer.vocab()
    rare = "kalominerutasope"  # 8 syllables: never seen whole
    pieces = tokenizer.tokens(rare)
    assert pieces == greedy_longest_match(rare, vocab)
    assert len(pieces) > 1 and not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:])
    assert pieces[0] + "".join(p[2:] for p in pieces[1:]) == rare
    for sentence in SENTENCES[:40]:
        words = sentence.replace(".", " . ").split()
        expected = [p for w in words for p in greedy_longest_match(w, vocab)]
        assert tokenizer.tokens(sentence) == expected
        assert tokenizer.encode(sentence) == [vocab[p] for p in expected]


def test_text_is_lower_cased_and_accents_stripped(tokenizer):
    assert tokenizer.tokens("KaLo MÍNE.") == tokenizer.tokens("kalo mine.")
    assert tokenizer.tokens("kalo.mine") == ["kalo", ".", "mine"]  # punctuation is a word of its own


def test_round_trip_on_lower_case_text():
    sentences = [
        "i do not know, it is fine.",
        "where is the red house?",
        "the cat sat on the mat!",
        "odysseus went home, and the house was quiet.",
    ] * 5
    tok = WordPieceTokenizer.train(sentences, vocab_size=120)
    for sentence in set(sentences):
        ids = tok.encode(sentence)
        assert all(i >= len(SPECIAL_TOKENS) for i in ids)
        assert tok.decode(ids) == sentence
        assert tok.decode(torch.tensor(ids)) == sentence  # a model's output row
        assert tok.id_to_token(np.array(ids)) == tok.tokens(sentence)


def test_decode_writes_specials_and_drops_padding(tokenizer):
    a, b = tokenizer.encode("kalo mine"), tokenizer.encode("ruta")
    row = [CLS_ID] + a + [SEP_ID] + b + [SEP_ID, PAD_ID, PAD_ID]
    assert tokenizer.decode(row) == "[CLS] kalo mine [SEP] ruta [SEP]"
    assert tokenizer.decode(row, skip_special=True) == "kalo mine ruta"
    assert tokenizer.decode([MASK_ID] + b) == "[MASK] ruta"


def test_literal_special_tokens_stay_whole_and_are_not_learned():
    sentences = ["kalo [UNK] mile."] * 30 + ["[MASK] tela"] * 5
    tok = WordPieceTokenizer.train(sentences, vocab_size=60)
    assert tok.tokens("kalo [UNK] mile") == ["kalo", "[UNK]", "mile"]
    assert tok.encode("[UNK] [MASK]") == [UNK_ID, MASK_ID]
    # the letters of "[UNK]" and "[MASK]" were never counted: u, n, s and the brackets are unknown
    assert all(tok.token_to_id(t) is None for t in ("u", "##u", "n", "##n", "s", "##s", "[", "]", "##k"))
    assert tok.tokens("[unk]") == ["[UNK]", "[UNK]", "[UNK]"]  # lower case: an ordinary word, unknown chars


def test_unknown_rate_counts_words_with_unseen_characters(tokenizer):
    assert tokenizer.token_to_id("kalo") is not None and tokenizer.token_to_id("mine") is not None
    assert tokenizer.tokens("kalo ☃ mine") == ["kalo", "[UNK]", "mine"]
    assert tokenizer.tokens("ka☃lo") == ["[UNK]"]  # one unseen character makes the whole word unknown
    assert tokenizer.unknown_rate(["kalo mine"]) == 0.0
    assert tokenizer.unknown_rate(["kalo ☃ mine"]) == pytest.approx(1 / 3)
    assert tokenizer.unknown_rate(["kalo ☃ mine", "ÿ"]) == pytest.approx(2 / 4)
    assert tokenizer.unknown_rate([]) == 0.0
    assert tokenizer.encode_batch(["kalo", "☃"]) == [tokenizer.encode("kalo"), [UNK_ID]]


def test_save_load_and_string_round_trips(tokenizer, tmp_path):
    path = tmp_path / "sub" / "wordpiece.json"
    tokenizer.save(path)
    loaded = WordPieceTokenizer.load(path)
    assert loaded.vocab() == tokenizer.vocab()
    assert loaded.encode(SENTENCES[5]) == tokenizer.encode(SENTENCES[5])
    again = WordPieceTokenizer.from_str(tokenizer.to_str())
    assert again.tokens("KALO ☃ [MASK]") == ["kalo", "[UNK]", "[MASK]"]


def test_bad_input_names_the_problem(tokenizer):
    with pytest.raises(ValueError, match="vocab_size must be an int >= 6, got 5"):
        WordPieceTokenizer.train(SENTENCES, vocab_size=5)
    with pytest.raises(ValueError, match=r"vocab_size=10 is too small.*need 15"):
        WordPieceTokenizer.train(["abcdef ghij"], vocab_size=10)  # 5 specials + a g + ##b..##f ##h..##j
    with pytest.raises(ValueError, match="min_frequency"):
        WordPieceTokenizer.train(SENTENCES, vocab_size=50, min_frequency=0)
    with pytest.raises(ValueError, match="no words"):
        WordPieceTokenizer.train(["", "  ", "[UNK]"], vocab_size=50)
    with pytest.raises(ValueError, match="text 1: expected a str, got int"):
        WordPieceTokenizer.train(["ab", 5], vocab_size=50)
    with pytest.raises(ValueError, match="got one str"):
        WordPieceTokenizer.train("a text", vocab_size=50)
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 80\)"):
        tokenizer.decode([5, 80])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.id_to_token([-1])
    with pytest.raises(ValueError, match="nested"):
        tokenizer.decode([[5, 6]])
    with pytest.raises(ValueError, match="encode: expected a str, got bytes"):
        tokenizer.encode(b"bytes")
    with pytest.raises(ValueError, match="tokens: expected a str"):
        tokenizer.tokens(None)
    with pytest.raises(ValueError, match="one str"):
        tokenizer.encode_batch("a sentence")
    with pytest.raises(ValueError, match="not a tokenizer's JSON"):
        WordPieceTokenizer.from_str("{not json")
    with pytest.raises(ValueError, match="expected a tokenizers.Tokenizer"):
        WordPieceTokenizer("not a tokenizer")
    bad = json.loads(tokenizer.to_str())
    bad["model"]["vocab"]["[MASK]"], bad["model"]["vocab"]["[PAD]"] = 0, 4
    for token in bad["added_tokens"]:
        token["id"] = {"[MASK]": 0, "[PAD]": 4}.get(token["content"], token["id"])
    with pytest.raises(ValueError, match=r"special tokens .* have ids \(4, 1, 2, 3, 0\)"):
        WordPieceTokenizer.from_str(json.dumps(bad))
