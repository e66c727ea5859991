r"""Translation metrics (chapter 7): corpus BLEU and chrF through sacrebleu, and BLEU by
source length; the diversity of generated text (chapter 8); exact match and F1 of extracted
answer spans (chapter 14).

BLEU and chrF scores are computed on *detokenised* text with sacrebleu's
standard tokeniser, so that the numbers are comparable with published ones:

.. math::

    \mathrm{BLEU} = \mathrm{BP} \cdot \exp\Bigl(\frac{1}{4}\sum_{n=1}^{4} \log p_n\Bigr),
    \qquad \mathrm{BP} = \min\bigl(1,\ e^{\,1 - r/c}\bigr)

with :math:`p_n` the clipped n-gram precisions over the corpus, :math:`c` the hypotheses'
length and :math:`r` the references' length.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformer_book import checks

__all__ = ["corpus_bleu", "corpus_chrf", "bleu_by_length", "paired_bootstrap", "distinct_n", "span_scores"]


def _check_pair(hypotheses: Sequence[str], references: Sequence[str], where: str) -> None:
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        if not isinstance(texts, Sequence) or isinstance(texts, str):
            raise ValueError(
                f"{where}: {name} must be a sequence of strings (a list), one per sentence, "
                f"got a {type(texts).__name__}"
            )
        if not all(isinstance(t, str) for t in texts):
            raise ValueError(f"{where}: {name} must be a sequence of strings, one per sentence")
    if len(hypotheses) != len(references):
        raise ValueError(f"{where}: {len(hypotheses)} hypotheses for {len(references)} references")
    if not hypotheses:
        raise ValueError(f"{where}: no sentences to score")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], *, lowercase: bool = False) -> float:
    """Corpus BLEU (0-100) of detokenised ``hypotheses`` against one reference each.

    Cased by default, the standard for reporting. ``lowercase=True`` compares lower-cased
    text, as tutorials that score lower-cased tokens do; it is higher, never comparable with
    the cased score.

    Raises:
        ValueError: for unequal lengths, an empty corpus or non-string sentences.
    """
    import sacrebleu

    _check_pair(hypotheses, references, "corpus_bleu")
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)], lowercase=lowercase).score)


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF (0-100), the character n-gram F-score, of ``hypotheses`` against one
    reference each.

    Raises:
        ValueError: for unequal lengths, an empty corpus or non-string sentences.
    """
    import sacrebleu

    _check_pair(hypotheses, references, "corpus_chrf")
    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)


def bleu_by_length(
    hypotheses: Sequence[str],
    references: Sequence[str],
    sources: Sequence[str],
    edges: Sequence[int] = (10, 20, 30),
) -> list[dict[str, float | int | str]]:
    """Corpus BLEU within buckets of source length (in whitespace-separated words).

    With ``edges = (10, 20, 30)`` the buckets are ``1-10``, ``11-20``, ``21-30`` and ``31+``
    words. Empty buckets are left out.

    Returns:
        A list with one dict per non-empty bucket, shortest bucket first, such as
        ``{"bucket": "11-20", "sentences": 57, "bleu": 23.4}``.

    Raises:
        ValueError: for unequal lengths, non-increasing or non-positive edges.
    """
    _check_pair(hypotheses, references, "bleu_by_length")
    if len(sources) != len(hypotheses):
        raise ValueError(f"bleu_by_length: {len(sources)} sources for {len(hypotheses)} hypotheses")
    edges = list(edges)
    if not edges or any(e < 1 for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"bleu_by_length: edges must be positive and increasing, got {edges}")
    lows = [1] + [e + 1 for e in edges]
    names = [f"{lo}-{hi}" for lo, hi in zip(lows, edges)] + [f"{lows[-1]}+"]
    members: list[list[int]] = [[] for _ in names]
    for index, source in enumerate(sources):
        length = len(source.split())
        bucket = next((b for b, edge in enumerate(edges) if length <= edge), len(edges))
        members[bucket].append(index)
    rows = []
    for name, indices in zip(names, members):
        if indices:
            bleu = corpus_bleu([hypotheses[i] for i in indices], [references[i] for i in indices])
            rows.append({"bucket": name, "sentences": len(indices), "bleu": bleu})
    return rows


def paired_bootstrap(
    baseline: Sequence[str], system: Sequence[str], references: Sequence[str], *, n_samples: int = 1000
) -> dict[str, float]:
    """Is ``system``'s BLEU different from ``baseline``'s by more than chance? Paired bootstrap
    resampling (Koehn, 2004), through sacrebleu's implementation of the Moses test.

    Both systems are scored on ``n_samples`` resamples (with replacement) of the same test
    sentences; the p-value is the share of resamples whose centred difference is at least as
    large as the observed one (two-sided). The resampling is seeded (sacrebleu's
    ``SACREBLEU_SEED``, 12345 by default), so the result repeats.

    Returns:
        ``{"baseline_bleu", "system_bleu", "p_value", "system_mean", "system_ci"}``; the mean and
        the half-width of the 95% confidence interval are the system's over the resamples.

    Raises:
        ValueError: for unequal lengths, an empty corpus, non-string sentences or
            ``n_samples < 1``.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    _check_pair(baseline, references, "paired_bootstrap")
    _check_pair(system, references, "paired_bootstrap")
    checks.positive_int("paired_bootstrap", n_samples=n_samples)
    test = PairedTest(
        [("baseline", list(baseline)), ("system", list(system))],
        {"BLEU": BLEU()},
        [list(references)],
        test_type="bs",
        n_samples=n_samples,
    )
    _, scores = test()
    base, result = scores["BLEU"]
    return {
        "baseline_bleu": float(base.score),
        "system_bleu": float(result.score),
        "p_value": float(result.p_value),
        "system_mean": float(result.mean),
        "system_ci": float(result.ci),
    }


def distinct_n(sentences: Sequence[str], n: int) -> float:
    r"""Diversity of generated text (Li et al., 2016): distinct word n-grams over all n-grams,

    .. math:: \text{distinct-}n = \frac{|\{\text{n-grams in all sentences}\}|}{\#\,\text{n-grams in all sentences}}

    counted over whitespace-separated words: 1 when no n-gram repeats, near 0 for text that
    says the same thing again and again. Sentences shorter than ``n`` words add nothing.

    Raises:
        ValueError: ``n < 1``, non-string sentences, or no n-gram at all.
    """
    checks.positive_int("distinct_n", n=n)
    if isinstance(sentences, str) or not all(isinstance(t, str) for t in sentences):
        raise ValueError("distinct_n: sentences must be a sequence of strings")
    grams = [tuple(words[i : i + n]) for words in (t.split() for t in sentences) for i in range(len(words) - n + 1)]
    if not grams:
        raise ValueError(f"distinct_n: the sentences hold no {n}-gram")
    return len(set(grams)) / len(grams)


def _answer_words(text: str) -> list[str]:
    text = "".join(c if c.isalnum() or c.isspace() else " " for c in text.lower())
    return [w for w in text.split() if w not in ("a", "an", "the")]


def span_scores(predictions: Sequence[str], answers: Sequence[str]) -> dict[str, float]:
    r"""Exact match and F1 of predicted answers, in percent, as SQuAD scores them (Rajpurkar et
    al., 2016): both texts are lower-cased, punctuation and the articles *a*, *an*, *the* removed,
    and split at spaces; exact match asks for the same words, F1 is the harmonic mean of the
    precision and recall of the shared words (counted with multiplicity),

    .. math:: F_1 = \frac{2 P R}{P + R}, \qquad P = \frac{|p \cap g|}{|p|}, \quad R = \frac{|p \cap g|}{|g|},

    averaged over the questions (one answer each). Two texts left empty count as a match.

    Returns:
        ``{"exact_match", "f1"}``.

    Raises:
        ValueError: sequences of different lengths, non-strings, or no question.
    """
    _check_pair(predictions, answers, "span_scores")
    exact = f1 = 0.0
    for prediction, answer in zip(predictions, answers):
        p, g = _answer_words(prediction), _answer_words(answer)
        exact += p == g
        if not p or not g:
            f1 += float(p == g)
            continue
        common = sum(min(p.count(w), g.count(w)) for w in set(p))
        if common:
            precision, recall = common / len(p), common / len(g)
            f1 += 2 * precision * recall / (precision + recall)
    return {"exact_match": 100 * exact / len(answers), "f1": 100 * f1 / len(answers)}
