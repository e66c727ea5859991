"""Byte-level BPE (chapter 16) against Hugging Face ``tokenizers``, GPT-2's published definitions,
hand computations and a slow reference trainer that recounts every pair at every step."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

from transformer_book.tokenizers.bytebpe import (
    PRETOKENIZE_PATTERN,
    ByteLevelBPE,
    bytes_to_unicode,
    learn_merges,
    merge_pair,
    pretokenize,
)

tokenizers = pytest.importorskip("tokenizers")

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parent.parent
EOT = "<|endoftext|>"

# --------------------------------------------------------------------------- generated text

_SYLLABLES = [
    "ka",
    "to",
    "ri",
    "mu",
    "sen",
    "da",
    "lo",
    "ver",
    "in",
    "ta",
    "the",
    "er",
    "an",
    "ü",
    "ß",
    "ä",
    "Ὀδυσ",
    "σεύς",
    "λο",
    "é",
    "ch",
    "😀",
    "st",
]
_TAILS = ["", "", "", "", ",", ".", "'s", "'ll", "!", "?!", " 42", " 1999", ":", " -"]


def _words(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def _corpus(seed: int, n_lines: int, words: list[str], *, special: str | None = None) -> list[str]:
    """Pseudo-text: Zipf-weighted repeats of a few hundred words (so pair counts tie), with
    punctuation, contractions, digits, runs of spaces and newlines, and now and then a special."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    lines = []
    for _ in range(n_lines):
        line = " ".join(w + rng.choice(_TAILS) for w in rng.choices(words, weights, k=rng.randint(3, 14)))
        line = line[0].upper() + line[1:] if rng.random() < 0.3 else line
        lines.append(
            line + rng.choice(["\n", "  \n", "", "\n\n", "\t"]) + (special if special and rng.random() < 0.1 else "")
        )
    return lines


WORDS = _words(random.Random(0), 250)
TRAIN = _corpus(1, 500, WORDS, special=EOT)  # about 4,000 words
HELD_OUT = _corpus(2, 150, WORDS + _words(random.Random(3), 80), special=EOT)  # with unseen words


def _hf_train(texts: list[str], vocab_size: int, min_frequency: int, special_tokens: list[str]):
    tk = tokenizers
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _hf_merges(tokenizer) -> list[tuple[str, str]]:
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


@pytest.fixture(scope="module")
def trained() -> ByteLevelBPE:
    return ByteLevelBPE.train(TRAIN, 500, min_frequency=2, special_tokens=[EOT])


# --------------------------------------------------------------------------- bytes as characters


def test_bytes_to_unicode_is_a_bijection_onto_256_printable_characters() -> None:
    table = bytes_to_unicode()
    assert list(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert all(c.isprintable() and not c.isspace() and len(c) == 1 for c in table.values())
    fixed = [*range(33, 127), *range(161, 173), *range(174, 256)]  # '!'..'~', '¡'..'¬', '®'..'ÿ'
    assert len(fixed) == 188
    assert all(table[b] == chr(b) for b in fixed)
    others = [b for b in range(256) if b not in fixed]  # 0-32, 127-160, 173
    assert len(others) == 68
    assert [table[b] for b in others] == [chr(256 + i) for i in range(68)]
    assert (table[0], table[ord(" ")], table[ord("\n")], table[127], table[173]) == ("Ā", "Ġ", "Ċ", "ġ", "Ń")


def test_bytes_to_unicode_is_the_alphabet_of_tokenizers() -> None:
    assert sorted(bytes_to_unicode().values()) == sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())


# --------------------------------------------------------------------------- pre-tokenisation


def test_the_pattern_is_gpt2s() -> None:
    assert PRETOKENIZE_PATTERN == r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


PRETOKENIZE_SAMPLES = [
    "Hello  world!",
    "   leading spaces",
    "trailing   ",
    "a\n\nb\n",
    " \n \t x",
    "tab\tand\r\nCRLF\r\n",
    "I'm you're he'll she'd it's we've DON'T 'tis o'clock",
    "1234567 3.14 x2 ²³ ٣٤ Ⅻ",
    "...!!!?? --- ++ (a) [b] {c} <d>",
    "Ὀδυσσεύς and Ἀθηνᾶ",
    "Grüß Gott, Straße, Größe",
    "naïve café",
    "😀😀 👨‍👩‍👧 🇩🇪 👍🏽",
    "\x00\x01\x1b[0m\x7f\x85",
    "\u00a0nbsp\u2003em\u3000ideo\u2028line",
    "日本語のテキスト",
    "Привет, мир",
    "مرحبا بالعالم",
    "'s 's's a'b",
    "",
    " ",
    "\n",
]


@pytest.mark.parametrize("text", PRETOKENIZE_SAMPLES)
def test_pretokenize_equals_tokenizers_byte_level(text: str) -> None:
    reference = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert pretokenize(text) == [piece for piece, _ in reference.pre_tokenize_str(text)]


def test_pretokenize_equals_tokenizers_on_every_assigned_code_point() -> None:
    """Letters, digits, spaces and the rest, one class per code point, as ``tokenizers`` sees them.

    Code points assigned after Unicode 16 are left out: ``regex`` may know them, ``tokenizers``
    0.23 does not (the module docstring says so)."""
    if tuple(int(x) for x in unicodedata.unidata_version.split(".")) > (16, 0, 0):
        pytest.skip(f"Python's Unicode database is {unicodedata.unidata_version}, newer than tokenizers' 16.0")
    assigned = [
        chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) not in ("Cn", "Co")
    ]
    text = "".join(f"a{c}1{c} " for c in assigned)
    reference = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert pretokenize(text) == [piece for piece, _ in reference.pre_tokenize_str(text)]


def test_pretokenize_by_hand() -> None:
    assert pretokenize("Hello  world!") == ["Hello", "Ġ", "Ġworld", "!"]
    assert pretokenize("it's 42") == ["it", "'s", "Ġ42"]
    assert pretokenize(" é") == ["ĠÃ©"]  # the two UTF-8 bytes of é, 0xC3 0xA9


# --------------------------------------------------------------------------- the merge step


def _merged_by_hand(word: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out, i = [], 0
    while i < len(word):
        if tuple(word[i : i + 2]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def test_merge_pair_by_hand() -> None:
    word = [1, 2, 1, 2, 3]
    changes = merge_pair(word, (1, 2), 9)
    assert word == [9, 9, 3]
    net = Counter()
    for pair, delta in changes:
        net[pair] += delta
    assert {p: d for p, d in net.items() if d} == {(2, 1): -1, (9, 9): +1, (2, 3): -1, (9, 3): +1}
    word = [5, 5, 5]
    merge_pair(word, (5, 5), 7)
    assert word == [7, 5]  # left to right, not overlapping


def test_merge_pair_changes_are_the_recounted_pair_counts() -> None:
    rng = random.Random(0)
    for _ in range(300):
        word = [rng.randint(0, 3) for _ in range(rng.randint(1, 12))]
        pair, new_id = (rng.randint(0, 3), rng.randint(0, 3)), 99
        before = Counter(zip(word, word[1:]))
        expected = _merged_by_hand(word, pair, new_id)
        changes = merge_pair(word, pair, new_id)
        assert word == expected
        after = Counter(zip(word, word[1:]))
        for q in set(before) | set(after) | {p for p, _ in changes}:
            if q != pair:
                assert after[q] == before[q] + sum(d for p, d in changes if p == q)


# --------------------------------------------------------------------------- agreement with tokenizers

SETTINGS = [(400, 2, [EOT]), (700, 3, [EOT, "<pad>"]), (5000, 2, []), (600, 0, [])]


@pytest.mark.parametrize(("vocab_size", "min_frequency", "special_tokens"), SETTINGS)
def test_merges_vocab_and_encodings_equal_tokenizers(
    vocab_size: int, min_frequency: int, special_tokens: list[str]
) -> None:
    ours = ByteLevelBPE.train(TRAIN, vocab_size, min_frequency=min_frequency, special_tokens=special_tokens)
    theirs = _hf_train(TRAIN, vocab_size, min_frequency, special_tokens)
    assert ours.merges == _hf_merges(theirs)
    assert ours.vocab == theirs.get_vocab()
    assert len(ours) == theirs.get_vocab_size()
    encodings = [e.ids for e in theirs.encode_batch(HELD_OUT)]
    assert sum(a == b for a, b in zip(ours.encode_batch(HELD_OUT), encodings)) / len(HELD_OUT) == 1.0
    assert [ours.decode(ids) for ids in encodings] == theirs.decode_batch(encodings, skip_special_tokens=False)
    if vocab_size == 5000:  # the corpus runs out of pairs seen twice before the vocabulary is full
        assert len(ours) < vocab_size


def test_it_is_a_tokenizer_of_the_package(trained: ByteLevelBPE) -> None:
    from transformer_book import contracts

    assert contracts.conforms(trained, contracts.Tokenizer) and len(trained) == 500


def test_a_special_token_in_the_text_is_one_id(trained: ByteLevelBPE) -> None:
    ids = trained.encode(f"a{EOT} b{EOT}")
    assert ids.count(trained.vocab[EOT]) == 2 and trained.vocab[EOT] == 0
    assert trained.decode(ids) == f"a{EOT} b{EOT}"


def _slow_merges(texts: list[str], vocab_size: int, min_frequency: int, special_tokens: list[str]):
    """BPE the obvious way: recount every pair of every word at every step; the most frequent pair
    wins, the smallest ids (left, right) on a tie. Also returns how many merges a tie decided."""
    tokens = [*special_tokens, *sorted(bytes_to_unicode().values())]
    ids = {t: i for i, t in enumerate(tokens)}
    counts = Counter(piece for text in texts for piece in pretokenize(text))
    words = {tuple(ids[c] for c in w): n for w, n in counts.items()}
    merges, ties = [], 0
    while len(tokens) < vocab_size:
        pairs = Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs or max(pairs.values()) < max(min_frequency, 1):
            break
        best = max(pairs.values())
        tied = sorted(p for p, c in pairs.items() if c == best)
        ties += len(tied) > 1
        pair = tied[0]
        tokens.append(tokens[pair[0]] + tokens[pair[1]])
        merges.append((tokens[pair[0]], tokens[pair[1]]))
        words = {tuple(_merged_by_hand(list(w), pair, len(tokens) - 1)): n for w, n in words.items()}
    return merges, ties


def test_merges_equal_a_slow_reference_that_recounts_every_pair(trained: ByteLevelBPE) -> None:
    merges, ties = _slow_merges(TRAIN, 500, 2, [EOT])
    assert ties > 20  # the corpus makes ties, so the tie rule is exercised
    assert trained.merges == merges


def test_encode_word_applies_merges_by_rank_by_hand() -> None:
    assert ByteLevelBPE([("a", "b"), ("b", "c"), ("ab", "c")]).tokens("abc") == ["abc"]
    assert ByteLevelBPE([("b", "c"), ("a", "b"), ("ab", "c")]).tokens("abc") == ["a", "bc"]
    assert ByteLevelBPE([("a", "a")]).tokens("aaa") == ["aa", "a"]  # a tie: the leftmost pair first
    assert ByteLevelBPE([("a", "a"), ("aa", "aa")]).tokens("aaaaa") == ["aaaa", "a"]
    tokenizer = ByteLevelBPE([("Ġ", "t"), ("Ġt", "h"), ("Ġth", "e")])
    assert tokenizer.encode_word("Ġthe") == [tokenizer.vocab["Ġthe"]]


def test_encode_word_equals_tokenizers_bpe_model_for_arbitrary_merge_lists() -> None:
    """Merges in any order (not only a trained one), some spelling the same string twice."""
    rng = random.Random(0)
    for _ in range(100):
        tokens, merges = ["a", "b", "c"], []
        for _ in range(rng.randint(1, 25)):
            pair = (rng.choice(tokens), rng.choice(tokens))
            if pair not in merges:
                merges.append(pair)
                tokens += [] if "".join(pair) in tokens else ["".join(pair)]
        ours = ByteLevelBPE(merges)
        theirs = tokenizers.models.BPE(vocab=dict(ours.vocab), merges=list(merges))
        for _ in range(20):
            word = "".join(rng.choice("abc") for _ in range(rng.randint(1, 15)))
            assert ours.encode_word(word) == [t.id for t in theirs.tokenize(word)], (merges, word)


def test_ids_are_specials_then_bytes_by_code_point_then_merges() -> None:
    tokenizer = ByteLevelBPE([("a", "b"), ("ab", "Ġ")], special_tokens=["<s>", "</s>"])
    alphabet = sorted(bytes_to_unicode().values())
    assert tokenizer.vocab["<s>"] == 0 and tokenizer.vocab["</s>"] == 1
    assert [tokenizer.vocab[c] for c in alphabet] == list(range(2, 258))
    assert tokenizer.vocab["!"] == 2 and tokenizer.vocab["Ā"] == 2 + 188  # byte 33 first, byte 0 after the 188
    assert tokenizer.vocab["ab"] == 258 and tokenizer.vocab["abĠ"] == 259 and len(tokenizer) == 260


# --------------------------------------------------------------------------- bytes: no unknown token

ROUND_TRIP = [
    "Ich muss zurück zu meinem Schiff und zu meiner Mannschaft. Grüß Gott, Straße!",
    "Ὀδυσσεύς, Ἀθηνᾶ, Πηνελόπεια",
    "emoji 😀👍🏽 👨‍👩‍👧 🇩🇪",
    "控制字符 \x00\x01\x07\x1b[0m\x7f\x85\u200b\ufeff",
    "unseen: Квантовая хромодинамика, ℵ₀ ≤ ∞, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "   many   spaces\n\n\ttabs\r\n",
    "",
    f"{EOT}x{EOT}",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_decode_encode_is_the_identity(trained: ByteLevelBPE, text: str) -> None:
    ids = trained.encode(text)
    assert all(0 <= i < len(trained) for i in ids)
    assert trained.decode(ids) == text
    assert "".join(trained.tokens(text)).replace(EOT, "") == "".join(pretokenize(text.replace(EOT, "")))


def test_a_character_never_seen_is_its_bytes(trained: ByteLevelBPE) -> None:
    table = bytes_to_unicode()
    for text in ("😺", "ℵ", "𝔘"):
        assert not any(text in line for line in TRAIN)
        byte_ids = [trained.vocab[table[b]] for b in text.encode("utf-8")]
        assert ByteLevelBPE([]).encode(text) == [i - 1 for i in byte_ids]  # no merges, no special: the bytes
        pieces = trained.id_to_token(trained.encode(text))  # 😺 shares its first bytes with 😀, seen in training
        assert "".join(pieces) == "".join(table[b] for b in text.encode("utf-8"))
    assert trained.encode("ℵ𝔘") == [trained.vocab[table[b]] for b in "ℵ𝔘".encode()]


def test_decode_replaces_invalid_utf8_like_tokenizers(trained: ByteLevelBPE) -> None:
    table = bytes_to_unicode()
    euro = "€".encode()  # e2 82 ac
    assert trained.decode([trained.vocab[table[b]] for b in euro[:2]]) == "\ufffd"
    assert trained.decode([trained.vocab[table[0xFF]], trained.vocab[table[ord("a")]]]) == "\ufffda"
    theirs = _hf_train(TRAIN, 500, 2, [EOT])
    rng = random.Random(0)
    sequences = [[rng.randrange(len(trained)) for _ in range(rng.randint(0, 10))] for _ in range(300)]
    assert [trained.decode(s) for s in sequences] == theirs.decode_batch(sequences, skip_special_tokens=False)


def test_decode_takes_a_tensor(trained: ByteLevelBPE) -> None:
    torch = pytest.importorskip("torch")
    ids = trained.encode("Grüß Gott")
    assert trained.decode(torch.tensor(ids)) == "Grüß Gott"


# --------------------------------------------------------------------------- determinism and saving


def test_training_is_deterministic(trained: ByteLevelBPE) -> None:
    again = ByteLevelBPE.train(iter(TRAIN), 500, min_frequency=2, special_tokens=[EOT])
    assert again.merges == trained.merges and again.vocab == trained.vocab


def test_training_does_not_depend_on_the_hash_seed(trained: ByteLevelBPE) -> None:
    code = (
        "import json, sys; from transformer_book.tokenizers.bytebpe import ByteLevelBPE; "
        "texts = json.loads(sys.stdin.read()); "
        "print(ByteLevelBPE.train(texts, 500, min_frequency=2, special_tokens=['<|endoftext|>']).to_json())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(TRAIN),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=True,
    ).stdout
    assert ByteLevelBPE.from_json(out).merges == trained.merges


def test_json_and_file_round_trip(trained: ByteLevelBPE, tmp_path: Path) -> None:
    copy = ByteLevelBPE.from_json(trained.to_json())
    assert copy.merges == trained.merges and copy.vocab == trained.vocab
    assert copy.special_tokens == trained.special_tokens
    trained.save(tmp_path / "bpe.json")
    loaded = ByteLevelBPE.load(tmp_path / "bpe.json")
    assert loaded.encode_batch(HELD_OUT) == trained.encode_batch(HELD_OUT)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vocab_size": 255}, "at least 256 \\+ 0 special tokens = 256"),
        ({"vocab_size": 256, "special_tokens": [EOT]}, "= 257"),
        ({"vocab_size": 300.0}, "vocab_size"),
        ({"vocab_size": 300, "min_frequency": -1}, "min_frequency"),
        ({"vocab_size": 300, "special_tokens": [EOT, EOT]}, "distinct"),
        ({"vocab_size": 300, "special_tokens": [""]}, "non-empty"),
        ({"vocab_size": 300, "special_tokens": ["Ġ"]}, "byte symbols"),
        ({"vocab_size": 300, "special_tokens": EOT}, "sequence of str"),
    ],
)
def test_train_refuses_bad_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"ByteLevelBPE.train: .*{message}"):
        ByteLevelBPE.train(["some text"], **kwargs)


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([], "texts is empty"),
        (["", ""], "all 2 texts are empty"),
        (["ok", 3], "text 1: expected a str"),
        ("one string", "iterable of str"),
        (["bad \ud800"], "not valid Unicode"),
        (None, "iterable of str"),
    ],
)
def test_train_refuses_bad_texts(texts: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"ByteLevelBPE.train: .*{message}"):
        ByteLevelBPE.train(texts, 300)


def test_learn_merges_refuses_bad_word_counts() -> None:
    with pytest.raises(ValueError, match="learn_merges: word_counts"):
        learn_merges({}, 300)
    with pytest.raises(ValueError, match="learn_merges: each entry"):
        learn_merges({"a b": 2}, 300)  # a space is not a byte symbol: 'Ġ' is
    with pytest.raises(ValueError, match="learn_merges: each entry"):
        learn_merges({"ab": 0}, 300)
    assert learn_merges({"ab": 2, "Ġab": 1}, 300) == [("a", "b")]


def test_decode_and_encode_refuse_bad_input(trained: ByteLevelBPE) -> None:
    with pytest.raises(ValueError, match=r"ByteLevelBPE.decode: ids \[500\] are outside the vocabulary \[0, 500\)"):
        trained.decode([1, 500])
    with pytest.raises(ValueError, match="ByteLevelBPE.decode: ids \\[-1\\]"):
        trained.decode([-1])
    with pytest.raises(ValueError, match="ByteLevelBPE.decode"):
        trained.decode([1.0])
    with pytest.raises(ValueError, match="ByteLevelBPE.encode: expected a str"):
        trained.encode(b"bytes")
    with pytest.raises(ValueError, match="ByteLevelBPE.encode_batch"):
        trained.encode_batch("one string")
    with pytest.raises(ValueError, match="ByteLevelBPE.encode_word"):
        trained.encode_word("a b")
    with pytest.raises(ValueError, match="pretokenize: expected a str"):
        pretokenize(None)
    with pytest.raises(ValueError, match="merge_pair"):
        merge_pair((1, 2), (1, 2), 3)


def test_bad_merges_and_json_are_refused() -> None:
    with pytest.raises(ValueError, match="ByteLevelBPE: merge 1 must be a pair of tokens already in the vocabulary"):
        ByteLevelBPE([("a", "b"), ("abc", "d")])
    with pytest.raises(ValueError, match="ByteLevelBPE: merge 0"):
        ByteLevelBPE([("a", "b", "c")])
    with pytest.raises(ValueError, match="from_json: not JSON"):
        ByteLevelBPE.from_json("{")
    with pytest.raises(ValueError, match="from_json: expected the JSON of ByteLevelBPE.to_json"):
        ByteLevelBPE.from_json('{"merges": []}')


# --------------------------------------------------------------------------- long pre-tokens (issue 41)

from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_book.tokenizers.bytebpe import _symbols


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.sampled_from(["ka", "to", "ri", "the", "er", "an", "ü", "st", "a", "e", "😀", "ß"]), min_size=1, max_size=60
    )
)
def test_the_heap_merges_a_long_word_as_encode_word_does(trained, pieces):
    """The O(n log n) path for long pre-tokens applies the same merges in the same order as the
    displayed loop (lowest rank first, leftmost on a tie)."""
    word = _symbols("".join(pieces))
    assert trained._merge_long(trained._check_word(word)) == trained.encode_word(word)


def test_encoding_a_long_unbroken_word_grows_about_linearly(trained):
    """One pre-token of n bytes (no spaces) once cost O(n^2): 20 s for 16,000 characters. Eight
    times the length must now cost well under the 64 times a quadratic loop would. Timed in this
    process's CPU seconds, which other processes on a busy machine (CI runs the website's tests
    beside these) do not inflate as they do wall-clock time."""
    import time

    def seconds(n: int) -> float:
        text = ("katoriderthestan" * (n // 16 + 1))[:n]
        trained._cache.clear()
        began = time.process_time()
        ids = trained.encode(text)
        assert trained.decode(ids) == text
        return time.process_time() - began

    seconds(2_000)  # warm up
    small, large = min(seconds(25_000) for _ in range(2)), min(seconds(200_000) for _ in range(2))
    assert large < 20 * small, (small, large)
    assert large < 5.0, large  # 1 MB is then well under the 10 s target on one core


def test_a_repeated_merge_is_refused():
    with pytest.raises(ValueError, match=r"merge 2 \('a', 'b'\) repeats merge 0"):
        ByteLevelBPE([("a", "b"), ("c", "d"), ("a", "b")])


def test_a_damaged_tokenizer_file_is_named(tmp_path, trained):
    path = tmp_path / "trained.json"
    path.write_bytes(b"\xff\xfe not text")
    with pytest.raises(ValueError, match=f"ByteLevelBPE.load: {re.escape(str(path))} is not UTF-8 text"):
        ByteLevelBPE.load(path)
    path.write_text("[" * 100_000)
    with pytest.raises(ValueError, match=f"ByteLevelBPE.load: {re.escape(str(path))}: .*nested too deeply"):
        ByteLevelBPE.load(path)
    path.write_text(trained.to_json()[:-40])  # cut short
    with pytest.raises(ValueError, match=f"ByteLevelBPE.load: {re.escape(str(path))}: .*not JSON"):
        ByteLevelBPE.load(path)
