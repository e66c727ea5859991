"""Fine-tuning data for chapter 14: four tasks with labels that come from real text, and the
batches the heads of :mod:`transformer_book.models.finetuning` read.

* **single sentence** (:func:`sst2_examples`): SST-2's sentiment labels;
* **sentence pair** (:func:`pivot_paraphrase_pairs`, :func:`pair_examples`): *paraphrase*:
  two English sentences that Tatoeba translates into the same German sentence are paraphrases
  (the pivot method of Bannard and Callison-Burch, 2005), set against pairs of sentences that
  share many words but no translation;
* **tagging** (:func:`case_restoration_examples`): the case of every word of a lower-cased
  sentence (:data:`CASE_TAGS`), labels read off the original text;
* **span** (:func:`cloze_span_examples`): a sentence of an article with a name or a year hidden
  behind ``[MASK]``, and a passage of *other* sentences of the same article that contains it:
  the answer is its span in the passage. This is the cloze construction of reading-comprehension
  corpora from news (Hermann et al., 2015), built from WikiText-2 articles.

Every example is an :class:`Example` of ids that start with ``[CLS]``, which states the kind of
its target (``"class"``, ``"tags"`` or ``"span"``: the head that reads it); :class:`FineTuningBatches`
pads examples of one kind into :class:`FineTuningBatch` es of that kind, addressable by
training step, as :func:`~transformer_book.training.fit` needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from transformer_book import checks
from transformer_book.contracts import FINETUNING_KINDS, IGNORE_INDEX, BatchTokenizer, FineTuningBatch, Tokenizer
from transformer_book.data.pretraining import check_max_len, encode_pair, special_ids
from transformer_book.data.sst2 import load_sst2
from transformer_book.tokenizers.wordpiece import PAD_ID

__all__ = [
    "FineTuningBatch",
    "Example",
    "encode_sentence",
    "sst2_examples",
    "pivot_paraphrase_pairs",
    "pair_examples",
    "CASE_TAGS",
    "case_tag",
    "case_restoration_examples",
    "entity_spans",
    "SpanExample",
    "cloze_span_examples",
    "FineTuningBatches",
]


class Example(NamedTuple):
    """One encoded example: ``tokens`` (``[CLS] ... [SEP]`` ids), ``segments`` (as many ids,
    0 or 1), ``target`` of the stated ``kind`` (``"class"``: a class id; ``"tags"``: a tag id or
    ``IGNORE_INDEX`` per token; ``"span"``: the ``(start, end)`` positions of a span, end
    inclusive) and ``allowed`` (per token, where a span may lie; ``None`` for the tasks that
    have no span)."""

    tokens: list[int]
    segments: list[int]
    target: Any
    kind: str
    allowed: list[bool] | None = None


def encode_sentence(tokenizer: Tokenizer, text: str, max_len: int) -> list[int]:
    """``[CLS] text [SEP]`` as ids, the text's pieces cut to ``max_len - 2``.

    Raises:
        ValueError: ``max_len`` below 5, or a text that encodes to no piece.
    """
    check_max_len(max_len, "encode_sentence")
    ids = list(tokenizer.encode(text))
    if not ids:
        raise ValueError(f"encode_sentence: {text!r} encodes to no piece")
    cls, sep, _ = special_ids(tokenizer)
    return [cls, *ids[: max_len - 2], sep]


def sst2_examples(tokenizer: Tokenizer, split: str, max_len: int, *, download: bool = True) -> list[Example]:
    """SST-2's ``split`` (``"train"`` or ``"dev"``) as single-sentence examples whose target is
    the label (1 positive, 0 negative); see :func:`~transformer_book.data.load_sst2`."""
    rows = load_sst2(split, download=download)
    return [
        Example(ids, [0] * len(ids), label, "class")
        for ids, (_, label) in zip((encode_sentence(tokenizer, text, max_len) for text, _ in rows), rows)
    ]


def _words(text: str) -> frozenset[str]:
    return frozenset("".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split())


def pivot_paraphrase_pairs(
    pairs: Sequence[tuple[str, str]], *, test_fraction: float = 0.1, candidates: int = 30, seed: int = 0
) -> dict[str, list[tuple[str, str, int]]]:
    """Paraphrase pairs ``(a, b, label)`` from translation pairs ``(pivot, text)``, split into
    ``{"train": ..., "test": ...}``.

    Two different texts with the same pivot translation are paraphrases (label 1), one pair for
    every two texts of a pivot (a pair that two pivots share counts once). For each such pair, ``a`` is also paired (label 0) with a text
    not linked to it by any chain of shared pivots: for every word of ``a``, up to ``candidates`` texts holding
    that word are drawn at random, and the one whose words overlap most with ``a``'s (Jaccard
    index of the lower-cased words without punctuation) is taken: *It's warm today.* against
    *It's cold today.*, not against a random sentence (which is the fallback when no other
    group shares a word with ``a``; a split of a single group gets no negatives).
    Texts linked by pivots form groups (connected components); every group goes whole to the
    test split with probability ``test_fraction``, so no text is in both splits, and negatives
    come from the same split. Within a pair, the order of the two texts is random. All draws
    come from a generator seeded with ``seed``.

    Raises:
        ValueError: no pivot with two different texts, ``test_fraction`` outside (0, 1), or
            ``candidates`` not a positive int.
    """
    checks.probability("pivot_paraphrase_pairs", "test_fraction", test_fraction, zero=False)
    checks.positive_int("pivot_paraphrase_pairs", candidates=candidates)
    texts_of: dict[str, list[str]] = {}
    for pivot, text in pairs:
        group = texts_of.setdefault(pivot, [])
        if text not in group:
            group.append(text)
    texts = sorted({t for group in texts_of.values() for t in group})
    index = {t: i for i, t in enumerate(texts)}
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pivots_of: list[set[str]] = [set() for _ in texts]
    for pivot, group in texts_of.items():
        for t in group:
            pivots_of[index[t]].add(pivot)
            parent[root(index[t])] = root(index[group[0]])
    positives, seen = [], set()
    for pivot in sorted(texts_of):
        for a, b in zip(texts_of[pivot][::2], texts_of[pivot][1::2]):
            if frozenset((a, b)) not in seen:  # two pivots may share the same two texts
                seen.add(frozenset((a, b)))
                positives.append((a, b))
    if not positives:
        raise ValueError("pivot_paraphrase_pairs: no pivot has two different texts")
    rng = np.random.default_rng(seed)
    components = sorted({root(i) for i in range(len(texts))})
    in_test = dict(zip(components, rng.random(len(components)) < test_fraction))
    pools = {
        split: [i for i in range(len(texts)) if in_test[root(i)] == (split == "test")] for split in ("train", "test")
    }
    words = [_words(t) for t in texts]
    postings: dict[str, dict[str, list[int]]] = {"train": {}, "test": {}}
    for split, pool in pools.items():
        for j in pool:
            for w in sorted(words[j]):
                postings[split].setdefault(w, []).append(j)
    out: dict[str, list[tuple[str, str, int]]] = {"train": [], "test": []}
    for a, b in positives:
        i = index[a]
        split = "test" if in_test[root(i)] else "train"
        drawn = []
        for w in sorted(words[i]):  # up to `candidates` texts sharing each word
            posting = postings[split][w]
            drawn.extend(posting[k] for k in rng.integers(len(posting), size=min(candidates, len(posting))))
        drawn = [j for j in drawn if root(j) != root(i)]  # not linked to a by any chain of pivots
        if not drawn:  # no word in common with any other group
            pool = pools[split]
            drawn = [j for j in (pool[k] for k in rng.integers(len(pool), size=candidates)) if root(j) != root(i)]
        for first, second, label in [(a, b, 1)] + (
            [(a, texts[max(drawn, key=lambda j: (len(words[i] & words[j]) / max(1, len(words[i] | words[j])), -j))], 0)]
            if drawn
            else []
        ):
            out[split].append((first, second, label) if rng.random() < 0.5 else (second, first, label))
    return out


def pair_examples(tokenizer: Tokenizer, pairs: Sequence[tuple[str, str, int]], max_len: int) -> list[Example]:
    """Pairs ``(a, b, label)`` as ``[CLS] a [SEP] b [SEP]`` examples, laid out and truncated as
    in pretraining (:func:`~transformer_book.data.pretraining.encode_pair`)."""
    examples = []
    for a, b, label in pairs:
        ids, segments = encode_pair(tokenizer, a, b, max_len)
        examples.append(Example(ids, segments, int(label), "class"))
    return examples


CASE_TAGS = ("lower", "Capitalised", "UPPER", "MiXed")
"""Case restoration's four tags, in this order; all lower case, first letter upper and the rest
lower, every letter upper (two letters at least), and anything else (``McCartney``, ``iPhone``)."""


def case_tag(word: str) -> int | None:
    """The index in :data:`CASE_TAGS` of a word's case, or ``None`` for a word without letters
    (punctuation, numbers), which is not tagged; one upper-case letter alone counts as Capitalised."""
    letters = [c for c in word if c.isalpha()]
    if not letters:
        return None
    if all(c.islower() for c in letters):
        return 0
    if letters[0].isupper() and all(c.islower() for c in letters[1:]):
        return 1
    if all(c.isupper() for c in letters):
        return 2
    return 3


def _word_pieces(tokenizer: BatchTokenizer, words: Sequence[str]) -> list[list[int]]:
    return [list(ids) for ids in tokenizer.encode_batch(list(words))] if words else []


def case_restoration_examples(tokenizer: BatchTokenizer, sentences: Sequence[str], max_len: int) -> list[Example]:
    """Case restoration as tagging: each sentence (words separated by spaces) is read lower-cased
    and every word's first piece is tagged with the case the word had (:func:`case_tag`); the
    pieces that continue a word, words without letters, ``[UNK]`` and the specials get
    ``IGNORE_INDEX``. Words that do not fit in ``max_len - 2`` pieces are cut; a sentence left
    with no tagged word is skipped.
    """
    check_max_len(max_len, "case_restoration_examples")
    examples = []
    cls, sep, _ = special_ids(tokenizer)
    for sentence in sentences:
        words = [w for w in sentence.split() if w != "[UNK]"]
        tokens, targets = [cls], [IGNORE_INDEX]
        for word, pieces in zip(words, _word_pieces(tokenizer, [w.lower() for w in words])):
            if len(tokens) + len(pieces) > max_len - 1:
                break
            if not pieces:
                continue
            tag = case_tag(word)
            tokens.extend(pieces)
            targets.extend([IGNORE_INDEX if tag is None else tag] + [IGNORE_INDEX] * (len(pieces) - 1))
        if any(t != IGNORE_INDEX for t in targets):
            examples.append(Example(tokens + [sep], [0] * (len(tokens) + 1), targets + [IGNORE_INDEX], "tags"))
    return examples


_NAME_WORD = re.compile(r"[A-Z][A-Za-z]*\Z")
_YEAR = re.compile(r"1[0-9]{3}\Z|20[0-9]{2}\Z")


def entity_spans(words: Sequence[str], *, max_words: int = 3) -> list[tuple[int, int]]:
    """The names and years of a tokenised sentence, as word ranges ``[i, j)``: maximal runs of
    capitalised words (letters only) that do not start the sentence, at most ``max_words``
    long (longer runs are skipped), and four-digit years from 1000 to 2099."""
    spans, i = [], 1 if words else 0
    while i < len(words):
        if _YEAR.match(words[i]):
            spans.append((i, i + 1))
            i += 1
        elif _NAME_WORD.match(words[i]):
            j = i
            while j < len(words) and _NAME_WORD.match(words[j]):
                j += 1
            if j - i <= max_words:
                spans.append((i, j))
            i = j
        else:
            i += 1
    return spans


class SpanExample(NamedTuple):
    """A cloze question: the encoded :class:`Example` (``[CLS] question [SEP] passage [SEP]``,
    target the answer's first occurrence in the passage), the ``answer`` as words, the
    ``question`` with ``[MASK]``, the ``passage``, and ``candidates``: every name and year of
    the passage (:func:`entity_spans`), for baselines that choose among them."""

    example: Example
    answer: str
    question: str
    passage: str
    candidates: list[str]


def _find(words: Sequence[str], target: Sequence[str]) -> int:
    n = len(target)
    return next((i for i in range(len(words) - n + 1) if list(words[i : i + n]) == list(target)), -1)


def cloze_span_examples(
    tokenizer: BatchTokenizer,
    documents: Sequence[Sequence[str]],
    max_len: int,
    *,
    question_pieces: int = 40,
    per_passage: int = 2,
    seed: int = 0,
) -> list[SpanExample]:
    """Extractive cloze questions from articles.

    Each article is cut into passages of consecutive sentences of at most ``max_len - 3 -
    question_pieces`` pieces. For each passage, the questions are the article's *other*
    sentences (of at most ``question_pieces`` pieces, ``[MASK]`` included) that hold a name or a
    year (:func:`entity_spans`) that the passage holds too. One such entity is replaced by a single
    ``[MASK]``; the answer is its first occurrence in the passage, as a span of pieces. At most
    ``per_passage`` questions per passage are kept, drawn with a generator seeded with ``seed``,
    each question sentence at most once per passage.

    Raises:
        ValueError: ``max_len`` leaves no room for a passage.
    """
    check_max_len(max_len, "cloze_span_examples")
    passage_budget = max_len - 3 - question_pieces
    if passage_budget < 8:
        raise ValueError(
            f"cloze_span_examples: max_len={max_len} leaves {passage_budget} pieces for a passage "
            f"after a question of {question_pieces}; at least 8 are needed"
        )
    rng = np.random.default_rng(seed)
    cls, sep, mask = special_ids(tokenizer)
    out: list[SpanExample] = []
    for document in documents:
        sentence_words = [s.split() for s in document]
        flat_pieces = _word_pieces(tokenizer, [w for words in sentence_words for w in words])  # "[UNK]" stays one
        ends = np.cumsum([0] + [len(words) for words in sentence_words])
        pieces = [flat_pieces[a:b] for a, b in zip(ends[:-1], ends[1:])]
        entities = [[(i, j, " ".join(words[i:j])) for i, j in entity_spans(words)] for words in sentence_words]
        lengths = [sum(len(p) for p in ps) for ps in pieces]
        passages, current, size = [], [], 0
        for k, n in enumerate(lengths):
            if n > passage_budget:
                if current:
                    passages.append(current)
                current, size = [], 0
                continue
            if size + n > passage_budget and current:
                passages.append(current)
                current, size = [], 0
            current.append(k)
            size += n
        if current:
            passages.append(current)
        for passage in passages:
            inside = set(passage)
            p_words = [w for k in passage for w in sentence_words[k]]
            p_pieces = [p for k in passage for p in pieces[k]]
            candidates = [answer for k in passage for _, _, answer in entities[k]]
            found = set(candidates)
            options = [
                (q, i, j)
                for q in range(len(document))
                if q not in inside
                for i, j, answer in entities[q]
                if answer in found
            ]
            if not options:
                continue
            chosen, used = [], set()
            for index in rng.permutation(len(options)):
                q, i, j = options[index]
                if q in used:
                    continue
                q_pieces = [*(p for ps in pieces[q][:i] for p in ps), mask, *(p for ps in pieces[q][j:] for p in ps)]
                if len(q_pieces) > question_pieces:
                    continue
                used.add(q)
                chosen.append((q, i, j, q_pieces))
                if len(chosen) == per_passage:
                    break
            for q, i, j, q_pieces in chosen:
                answer_words = sentence_words[q][i:j]
                at = _find(p_words, answer_words)
                first = 2 + len(q_pieces) + sum(len(p) for p in p_pieces[:at])
                last = first + sum(len(p) for p in p_pieces[at : at + len(answer_words)]) - 1
                flat = [x for p in p_pieces for x in p]
                tokens = [cls, *q_pieces, sep, *flat, sep]
                segments = [0] * (len(q_pieces) + 2) + [1] * (len(flat) + 1)
                allowed = [False] * (len(q_pieces) + 2) + [True] * len(flat) + [False]
                question = " ".join([*sentence_words[q][:i], "[MASK]", *sentence_words[q][j:]])
                out.append(
                    SpanExample(
                        Example(tokens, segments, (first, last), "span", allowed),
                        " ".join(answer_words),
                        question,
                        " ".join(p_words),
                        candidates,
                    )
                )
    return out


def _is_id(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_target(index: int, example: Example) -> None:
    """A target of its example's kind: a class id, a list of tag ids, or a ``(start, end)`` pair
    (with ``allowed``)."""
    target, kind = example.target, example.kind
    if kind == "class" and not _is_id(target):
        raise ValueError(f"FineTuningBatches: example {index}'s class target must be an int, got {target!r}")
    if kind == "tags" and not (isinstance(target, (list, tuple)) and all(_is_id(t) for t in target)):
        raise ValueError(f"FineTuningBatches: example {index}'s tags target must be a list of ints, got {target!r}")
    if kind == "span":
        if not (isinstance(target, (list, tuple)) and len(target) == 2 and all(_is_id(t) for t in target)):
            raise ValueError(
                f"FineTuningBatches: example {index}'s span target must be a (start, end) pair of ints, got {target!r}"
            )
        if example.allowed is None:
            raise ValueError(f"FineTuningBatches: example {index} is a span without allowed positions")


class FineTuningBatches:
    """Padded batches of :class:`Example` s, addressable by training step.

    Epoch ``e`` visits the examples in an order drawn from ``(seed, e)`` (their own order with
    ``shuffle=False``), ``batch_size`` at a time (the last batch of an epoch may be smaller);
    ``batches(step)`` is the batch of global step ``step``, a pure function of the step, so that
    :func:`~transformer_book.training.fit` resumes exactly. Each batch is padded with ``[PAD]``
    (segment 0, target ``IGNORE_INDEX``, not allowed) to its own longest example, and states
    the examples' kind (``batch.kind``, also ``self.kind``). Iterating gives one epoch in order.

    With ``bucket = k > 1`` the batches hold examples of similar length, so that little of a
    step's work is padding: each epoch's order is cut into windows of ``k * batch_size``
    examples, each window is sorted by length and cut into batches, and the epoch's batches are
    then visited in an order drawn from ``(seed, e)`` too. Every example is still seen once per
    epoch; only who shares a batch changes.

    Raises:
        ValueError: no examples, a ``batch_size`` or ``bucket`` that is not a positive int,
            examples of different or unknown kinds, a target that is not of its example's
            kind, a span example without ``allowed``, or examples whose fields differ in length.
    """

    def __init__(
        self, examples: Sequence[Example], batch_size: int, *, seed: int = 0, shuffle: bool = True, bucket: int = 1
    ) -> None:
        checks.positive_int("FineTuningBatches", batch_size=batch_size, bucket=bucket)
        if len(examples) == 0:
            raise ValueError("FineTuningBatches: no examples")
        for index, e in enumerate(examples):
            checks.choice("FineTuningBatches", f"example {index}'s kind", e.kind, FINETUNING_KINDS)
        kinds = sorted({e.kind for e in examples})
        if len(kinds) != 1:
            raise ValueError(f"FineTuningBatches: examples mix the kinds {kinds}")
        self.kind = kinds[0]
        for index, e in enumerate(examples):
            _check_target(index, e)
            sizes = (
                {len(e.tokens), len(e.segments)}
                | ({len(e.target)} if self.kind == "tags" else set())
                | ({len(e.allowed)} if e.allowed is not None else set())
            )
            if len(sizes) != 1:
                raise ValueError(f"FineTuningBatches: example {index} has fields of lengths {sorted(sizes)}")
        self.examples, self.batch_size, self.seed, self.shuffle = list(examples), batch_size, seed, shuffle
        self.bucket = bucket
        self._epoch_batches: tuple[int, list[np.ndarray]] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return -(-len(self.examples) // self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """The order in which epoch ``epoch`` visits the examples."""
        if not self.shuffle:
            return np.arange(len(self.examples))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.examples))

    def collate(self, indices: Sequence[int]) -> FineTuningBatch:
        """The padded batch of the examples at ``indices``."""
        chosen = [self.examples[int(i)] for i in indices]
        n = max(len(e.tokens) for e in chosen)
        B = len(chosen)
        tokens = torch.full((B, n), PAD_ID, dtype=torch.long)
        segments = torch.zeros((B, n), dtype=torch.long)
        allowed = torch.zeros((B, n), dtype=torch.bool)
        tags = torch.full((B, n), IGNORE_INDEX, dtype=torch.long)
        for b, e in enumerate(chosen):
            tokens[b, : len(e.tokens)] = torch.tensor(e.tokens)
            segments[b, : len(e.segments)] = torch.tensor(e.segments)
            if e.allowed is not None:
                allowed[b, : len(e.allowed)] = torch.tensor(e.allowed)
            if self.kind == "tags":
                tags[b, : len(e.target)] = torch.tensor(e.target)
        if self.kind == "class":
            targets = torch.tensor([int(e.target) for e in chosen])
        elif self.kind == "span":
            targets = torch.tensor([list(e.target) for e in chosen])
        else:
            targets = tags
        return FineTuningBatch(tokens, segments, targets, allowed, self.kind)

    def batches_of_epoch(self, epoch: int) -> list[np.ndarray]:
        """The indices of each batch of epoch ``epoch``, in the order they are visited."""
        if self._epoch_batches is not None and self._epoch_batches[0] == epoch:
            return self._epoch_batches[1]
        order, size = self.order(epoch), self.batch_size
        if self.bucket == 1:
            batches = [order[i : i + size] for i in range(0, len(order), size)]
        else:
            lengths = np.array([len(self.examples[int(i)].tokens) for i in order])
            batches = []
            for start in range(0, len(order), self.bucket * size):
                window = order[start : start + self.bucket * size]
                window = window[np.argsort(lengths[start : start + len(window)], kind="stable")]
                batches.extend(window[i : i + size] for i in range(0, len(window), size))
            if self.shuffle:
                visit = np.random.default_rng([self.seed, epoch, 1]).permutation(len(batches))
                batches = [batches[i] for i in visit]
        self._epoch_batches = (epoch, batches)
        return batches

    def __call__(self, step: int) -> FineTuningBatch:
        epoch, index = divmod(step, len(self))
        return self.collate(self.batches_of_epoch(epoch)[index])

    def __iter__(self) -> Iterator[FineTuningBatch]:
        return (self(step) for step in range(len(self)))

    def __repr__(self) -> str:
        return (
            f"FineTuningBatches({len(self.examples):,} {self.kind} examples, batch_size={self.batch_size}, "
            f"{len(self)} batches per epoch{f', bucket={self.bucket}' if self.bucket > 1 else ''})"
        )
