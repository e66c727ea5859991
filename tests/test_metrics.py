"""BLEU, chrF and BLEU by source length, checked against hand computations."""

import math

import pytest

from transformer_book.metrics import bleu_by_length, corpus_bleu, corpus_chrf, distinct_n, paired_bootstrap


def test_bleu_by_hand_brevity_penalty_only():
    # Every n-gram of the 6-word hypothesis is in the 7-word reference: all p_n = 1, so
    # BLEU = BP = exp(1 - 7/6).
    bleu = corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat today"])
    assert bleu == pytest.approx(100 * math.exp(1 - 7 / 6), abs=1e-9)


def test_bleu_by_hand_with_a_wrong_word():
    # hypothesis "a b c x", reference "a b c d": p1 = 3/4, p2 = 2/3, p3 = 1/2, p4 = 0/1.
    # sacrebleu's default 'exp' smoothing replaces the zero count of p4 by 1/2^k with k = 1
    # zero so far: p4 = (1/2)/1. Lengths are equal, so BP = 1.
    bleu = corpus_bleu(["a b c x"], ["a b c d"])
    expected = 100 * math.exp((math.log(3 / 4) + math.log(2 / 3) + math.log(1 / 2) + math.log(1 / 2)) / 4)
    assert bleu == pytest.approx(expected, abs=1e-9)


def test_identical_corpora_score_100_and_disjoint_ones_near_0():
    sentences = ["a man rides a horse .", "two dogs play in the snow ."]
    assert corpus_bleu(sentences, sentences) == pytest.approx(100.0)
    assert corpus_chrf(sentences, sentences) == pytest.approx(100.0)
    assert corpus_bleu(["xyz qqq"], ["a man rides a horse ."]) < 1.0
    assert corpus_chrf(["xyz qqq"], ["a man rides a horse ."]) < 5.0


@pytest.mark.parametrize("function", [corpus_bleu, corpus_chrf])
def test_bad_input_names_the_problem(function):
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        function(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no sentences"):
        function([], [])
    with pytest.raises(ValueError, match="sequence of strings"):
        function("a b", "a b")


def test_bleu_by_length_buckets_sentences_by_source_length():
    sources = ["w " * 3, "w " * 12, "w " * 25, "w " * 40, "w " * 5]
    hypotheses = ["the cat sat on the mat", "a b c x", "x y", "one two three", "the cat sat on the mat"]
    references = ["the cat sat on the mat today", "a b c d", "x y", "one two three", "the cat sat on the mat"]
    rows = bleu_by_length(hypotheses, references, sources, edges=(10, 20, 30))
    assert [r["bucket"] for r in rows] == ["1-10", "11-20", "21-30", "31+"]
    assert [r["sentences"] for r in rows] == [2, 1, 1, 1]
    # Bucket 1-10 is its own corpus: the hypotheses' 12 words against 13 reference words.
    assert rows[0]["bleu"] == pytest.approx(
        corpus_bleu(hypotheses[0:1] + hypotheses[4:5], references[0:1] + references[4:5])
    )
    assert rows[0]["bleu"] == pytest.approx(100 * math.exp(1 - 13 / 12), abs=1e-9)
    assert rows[1]["bleu"] == pytest.approx(corpus_bleu(["a b c x"], ["a b c d"]))


def test_bleu_by_length_leaves_out_empty_buckets_and_checks_edges():
    rows = bleu_by_length(["a b c d"], ["a b c d"], ["w w"], edges=(10, 20))
    assert rows == [{"bucket": "1-10", "sentences": 1, "bleu": pytest.approx(100.0)}]
    with pytest.raises(ValueError, match="increasing"):
        bleu_by_length(["a"], ["a"], ["a"], edges=(20, 10))
    with pytest.raises(ValueError, match="1 sources for 2 hypotheses"):
        bleu_by_length(["a", "b"], ["a", "b"], ["a"])


def test_lowercase_bleu_ignores_case_only():
    hypotheses, references = ["A Dog runs in the Park"], ["a dog runs in the park"]
    assert corpus_bleu(hypotheses, references, lowercase=True) == pytest.approx(100.0)
    assert corpus_bleu(hypotheses, references) < 50.0


def test_paired_bootstrap_separates_a_real_difference_from_none():
    references = [
        f"a man in a {c} shirt is riding a {v} down the street"
        for c in ("red", "blue", "green", "black")
        for v in ("bike", "horse", "car", "scooter", "skateboard")
    ] * 3
    good = list(references)
    bad = [r.replace("riding", "eating").replace("street", "lake") for r in references]
    # Two systems with the same mistakes on complementary halves of the sentences: equal in
    # expectation, so the test must not call them different.
    even = [b if i % 2 == 0 else g for i, (g, b) in enumerate(zip(good, bad))]
    odd = [b if i % 2 == 1 else g for i, (g, b) in enumerate(zip(good, bad))]
    similar = paired_bootstrap(even, odd, references, n_samples=200)
    assert abs(similar["baseline_bleu"] - similar["system_bleu"]) < 1.0
    assert similar["p_value"] > 0.2
    worse = paired_bootstrap(good, bad, references, n_samples=200)
    assert worse["system_bleu"] < worse["baseline_bleu"] and worse["p_value"] < 0.01
    assert worse["system_ci"] >= 0 and abs(worse["system_mean"] - worse["system_bleu"]) < 5
    assert paired_bootstrap(good, bad, references, n_samples=200) == worse  # seeded: repeats
    with pytest.raises(ValueError, match="n_samples"):
        paired_bootstrap(good, bad, references, n_samples=0)
    with pytest.raises(ValueError, match="hypotheses for"):
        paired_bootstrap(good[:-1], bad, references)


def test_distinct_n_by_hand():
    sentences = ["the cat sat", "the cat ran", "a dog"]
    # unigrams: the cat sat the cat ran a dog -> 8, distinct 6; bigrams: 5, distinct 4
    assert distinct_n(sentences, 1) == pytest.approx(6 / 8)
    assert distinct_n(sentences, 2) == pytest.approx(4 / 5)
    assert distinct_n(["a a a a"], 1) == pytest.approx(1 / 4)
    assert distinct_n(sentences, 3) == pytest.approx(1.0)  # "a dog" adds no trigram
    with pytest.raises(ValueError, match="no 4-gram"):
        distinct_n(sentences, 4)
    with pytest.raises(ValueError, match="positive int"):
        distinct_n(sentences, 0)
