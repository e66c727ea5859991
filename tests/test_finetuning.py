"""Tests of chapter 14's fine-tuning: the heads, losses, decoding and freezing of
transformer_book.models.finetuning, and the task data of transformer_book.data.finetuning.

Expected values come from hand computations (the heads' formulas written out with the
module's own weights, cross-entropies summed in loops), brute force (best spans), hand-made
documents and sentences, and binomial bounds on fixed seeds. Models are 16 wide.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import training
from transformer_book.data.finetuning import (
    CASE_TAGS,
    Example,
    FineTuningBatch,
    FineTuningBatches,
    SpanExample,
    case_restoration_examples,
    case_tag,
    cloze_span_examples,
    encode_sentence,
    entity_spans,
    pair_examples,
    pivot_paraphrase_pairs,
    sst2_examples,
)
from transformer_book.data.pretraining import IGNORE_INDEX
from transformer_book.models.bert import BERT, BERTConfig
from transformer_book.models.finetuning import (
    FineTuningHead,
    SequenceClassifier,
    SpanExtractor,
    TokenTagger,
    best_spans,
    finetuning_loss,
    freeze_encoder,
    predict,
    trainable_parameters,
)
from transformer_book.tokenizers.wordpiece import CLS_ID, MASK_ID, PAD_ID, SEP_ID, UNK_ID, WordPieceTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

V = 40


def within_binomial(successes: int, trials: int, p: float, sigmas: float = 5.0) -> bool:
    sigma = math.sqrt(p * (1 - p) / trials)
    return abs(successes / trials - p) < sigmas * sigma


def tiny_bert(n_layers: int = 2, vocab_size: int = V, seed: int = 0, **changes) -> BERT:
    torch.manual_seed(seed)
    return BERT(
        BERTConfig(
            **{
                **dict(vocab_size=vocab_size, max_len=48, d_model=16, n_heads=2, n_layers=n_layers, dropout=0.0),
                **changes,
            }
        )
    )


def random_inputs(B: int = 3, n: int = 9, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, V, (B, n), generator=g)
    tokens[:, 0] = CLS_ID
    segments = (torch.arange(n) >= n // 2).long().expand(B, n).clone()
    return tokens, segments


def cross_entropy_by_hand(logits: torch.Tensor, target: int) -> float:
    """-log softmax(logits)[target], by a log-sum-exp over the finite entries."""
    values = [float(v) for v in logits]
    finite = [v for v in values if v != float("-inf")]
    top = max(finite)
    return -(values[target] - top - math.log(sum(math.exp(v - top) for v in finite)))


# ----------------------------------------------------------------------------- the heads


def test_classifier_logits_are_pooled_cls_through_tanh_and_the_new_layer():
    bert = tiny_bert()
    model = SequenceClassifier(bert, 3, dropout=0.5).eval()
    tokens, segments = random_inputs()
    with torch.no_grad():
        hidden = bert.encode(tokens, segments)
        W_P, b_P = bert.pooler.weight, bert.pooler.bias
        W_C, b_C = model.classifier.weight, model.classifier.bias
        expected = torch.stack(
            [
                torch.stack(
                    [
                        sum(torch.tanh(hidden[b, 0] @ W_P[k] + b_P[k]) * W_C[c, k] for k in range(16)) + b_C[c]
                        for c in range(3)
                    ]
                )
                for b in range(tokens.shape[0])
            ]
        )
        logits = model(tokens, segments)
    assert logits.shape == (3, 3)
    torch.testing.assert_close(logits, expected, atol=1e-6, rtol=1e-5)
    # the pooler is the pretrained one (shared, not copied), the classifier is new
    assert model.bert is bert and model.bert.pooler is bert.pooler
    assert torch.all(model.classifier.bias == 0) and 0.01 < model.classifier.weight.std().item() < 0.03


def test_classifier_dropout_acts_in_training_only():
    model = SequenceClassifier(tiny_bert(), 2, dropout=0.5)
    tokens, segments = random_inputs()
    model.train()
    torch.manual_seed(1)
    noisy = model(tokens, segments)
    model.eval()
    with torch.no_grad():
        clean, again = model(tokens, segments), model(tokens, segments)
    assert torch.equal(clean, again)
    assert not torch.allclose(noisy, clean)


def test_tagger_logits_are_a_linear_layer_on_every_hidden_state():
    bert = tiny_bert()
    model = TokenTagger(bert, 4, dropout=0.3).eval()
    tokens, segments = random_inputs()
    with torch.no_grad():
        hidden = bert.encode(tokens, segments)
        W, b = model.tagger.weight, model.tagger.bias
        expected = torch.tensor(
            [
                [[float(hidden[i, t] @ W[c] + b[c]) for c in range(4)] for t in range(tokens.shape[1])]
                for i in range(tokens.shape[0])
            ]
        )
        logits = model(tokens, segments)
    assert logits.shape == (3, 9, 4)
    torch.testing.assert_close(logits, expected, atol=1e-6, rtol=1e-5)
    assert torch.all(model.tagger.bias == 0)


def test_span_scores_are_two_linear_maps_and_minus_infinity_outside_allowed():
    bert = tiny_bert()
    model = SpanExtractor(bert).eval()
    tokens, segments = random_inputs()
    allowed = segments.bool().clone()
    allowed[:, -1] = False
    allowed[1, 5] = False
    with torch.no_grad():
        hidden = bert.encode(tokens, segments)
        w, b = model.span.weight, model.span.bias
        expected_start = hidden @ w[0] + b[0]
        expected_end = hidden @ w[1] + b[1]
        start, end = model(tokens, segments)
        masked_start, masked_end = model(tokens, segments, allowed)
    torch.testing.assert_close(start, expected_start, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(end, expected_end, atol=1e-6, rtol=1e-5)
    for i in range(3):
        for t in range(9):
            for masked, plain in ((masked_start, start), (masked_end, end)):
                if allowed[i, t]:
                    assert masked[i, t] == plain[i, t]
                else:
                    assert masked[i, t] == float("-inf")


def test_span_extractor_rejects_a_bad_allowed_mask():
    model = SpanExtractor(tiny_bert(n_layers=1)).eval()
    tokens, segments = random_inputs()
    good = torch.ones_like(tokens, dtype=torch.bool)
    with pytest.raises(ValueError, match="allowed must be a bool tensor of the tokens' shape"):
        model(tokens, segments, good.long())
    with pytest.raises(ValueError, match=r"allowed must be a bool tensor of the tokens' shape \(3, 9\)"):
        model(tokens, segments, good[:, :-1])
    all_false = good.clone()
    all_false[2] = False
    with pytest.raises(ValueError, match="a row of allowed is all False"):
        model(tokens, segments, all_false)


@pytest.mark.parametrize(
    "make",
    [
        lambda bert: SequenceClassifier(bert, 3),
        lambda bert: TokenTagger(bert, 3),
        lambda bert: SpanExtractor(bert),
    ],
)
def test_right_padding_leaves_a_sequences_outputs_unchanged(make):
    model = make(tiny_bert()).eval()
    tokens, segments = random_inputs(B=2, n=10)
    length = 6
    tokens[0, length:] = PAD_ID
    segments[0, length:] = 0
    with torch.no_grad():
        padded = model(tokens, segments)
        alone = model(tokens[:1, :length], segments[:1, :length])
    if isinstance(model, SequenceClassifier):
        torch.testing.assert_close(padded[0], alone[0], atol=1e-5, rtol=1e-5)
    elif isinstance(model, TokenTagger):
        torch.testing.assert_close(padded[0, :length], alone[0], atol=1e-5, rtol=1e-5)
    else:
        for p, a in zip(padded, alone):
            torch.testing.assert_close(p[0, :length], a[0], atol=1e-5, rtol=1e-5)


def test_heads_check_their_arguments():
    bert = tiny_bert(n_layers=1)
    with pytest.raises(ValueError, match="SequenceClassifier: bert must be a BERT, got Linear"):
        SequenceClassifier(nn.Linear(2, 2), 2)
    with pytest.raises(ValueError, match="SequenceClassifier: n_classes must be an int >= 2, got 1"):
        SequenceClassifier(bert, 1)
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="n_classes must be an int >= 2"):
            SequenceClassifier(bert, bad)
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match=r"TokenTagger: dropout must lie in \[0, 1\)"):
            TokenTagger(bert, 3, dropout=bad)
    with pytest.raises(ValueError, match="TokenTagger: n_tags must be a positive int, got 0"):
        TokenTagger(bert, 0)
    with pytest.raises(ValueError, match="SpanExtractor: bert must be a BERT"):
        SpanExtractor("bert")


# ----------------------------------------------------------------------------- best spans


def brute_force_spans(start: torch.Tensor, end: torch.Tensor, max_length: int) -> list[tuple[int, int]]:
    spans = []
    for b in range(start.shape[0]):
        best, where = float("-inf"), None
        for i in range(start.shape[1]):
            for j in range(i, min(start.shape[1], i + max_length)):
                score = float(start[b, i]) + float(end[b, j])
                if where is None or score > best:
                    best, where = score, (i, j)
        spans.append(where)
    return spans


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("max_length", [1, 2, 5, 30])
def test_best_spans_match_a_brute_force_search(seed, max_length):
    g = torch.Generator().manual_seed(seed)
    start, end = (
        torch.randn(5, 11, generator=g, dtype=torch.float64),
        torch.randn(5, 11, generator=g, dtype=torch.float64),
    )
    spans = best_spans(start, end, max_length)
    assert spans.dtype == torch.int64 and spans.shape == (5, 2)
    assert [tuple(s) for s in spans.tolist()] == brute_force_spans(start, end, max_length)
    assert all(0 <= i <= j < i + max_length for i, j in spans.tolist())


@pytest.mark.parametrize("seed", range(3))
def test_best_spans_never_choose_a_minus_infinity_position(seed):
    g = torch.Generator().manual_seed(seed)
    start, end = torch.randn(6, 12, generator=g), torch.randn(6, 12, generator=g)
    allowed = torch.rand(6, 12, generator=g) < 0.4
    allowed[:, 7] = True
    # the best unconstrained scores sit where nothing is allowed
    start = start.masked_fill(~allowed, float("-inf"))
    end = end.masked_fill(~allowed, float("-inf"))
    spans = best_spans(start, end, 3)
    for b, (i, j) in enumerate(spans.tolist()):
        assert allowed[b, i] and allowed[b, j]
    assert [tuple(s) for s in spans.tolist()] == brute_force_spans(start, end, 3)


def test_best_spans_reject_bad_arguments():
    s = torch.zeros(2, 5)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="best_spans: max_length must be a positive int"):
            best_spans(s, s, bad)
    with pytest.raises(ValueError, match=r"must both be \(B, n\), got \(2, 5\) and \(2, 6\)"):
        best_spans(s, torch.zeros(2, 6), 3)
    with pytest.raises(ValueError, match=r"must both be \(B, n\), got \(5,\)"):
        best_spans(torch.zeros(5), torch.zeros(5), 3)
    with pytest.raises(ValueError, match=r"must both be \(B, n\)"):
        best_spans(torch.zeros(1, 2, 5), torch.zeros(1, 2, 5), 3)


# ----------------------------------------------------------------------------- losses and prediction


def class_batch(B: int = 3, n: int = 9) -> FineTuningBatch:
    tokens, segments = random_inputs(B, n)
    return FineTuningBatch(tokens, segments, torch.tensor([0, 2, 1][:B]), torch.zeros(B, n, dtype=torch.bool))


def test_classifier_loss_is_the_mean_cross_entropy():
    model = SequenceClassifier(tiny_bert(n_layers=1), 3).eval()
    batch = class_batch()
    loss, count = finetuning_loss(model, batch)
    with torch.no_grad():
        logits = model(batch.tokens, batch.segments)
    expected = sum(cross_entropy_by_hand(logits[b], int(batch.targets[b])) for b in range(3)) / 3
    assert count == 3
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match=r"SequenceClassifier.loss: 'class' targets must be \(3,\), got \(3, 9\)"):
        finetuning_loss(model, batch._replace(targets=torch.zeros(3, 9, dtype=torch.long)))


def test_tagger_loss_averages_over_the_scored_positions_only():
    model = TokenTagger(tiny_bert(n_layers=1), 4).eval()
    tokens, segments = random_inputs(B=2, n=7)
    targets = torch.full((2, 7), IGNORE_INDEX)
    scored = {(0, 1): 2, (0, 2): 0, (0, 5): 3, (1, 3): 1, (1, 4): 1}
    for (b, t), tag in scored.items():
        targets[b, t] = tag
    batch = FineTuningBatch(tokens, segments, targets, torch.zeros(2, 7, dtype=torch.bool))
    loss, count = finetuning_loss(model, batch)
    with torch.no_grad():
        logits = model(tokens, segments)
    expected = sum(cross_entropy_by_hand(logits[b, t], tag) for (b, t), tag in scored.items()) / len(scored)
    assert count == 5
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="TokenTagger.loss: no token of the batch has a tag"):
        finetuning_loss(model, batch._replace(targets=torch.full((2, 7), IGNORE_INDEX)))
    with pytest.raises(ValueError, match=r"TokenTagger.loss: 'tags' targets must be \(2, 7\), got \(2,\)"):
        finetuning_loss(model, batch._replace(targets=torch.tensor([1, 2])))


def test_span_loss_is_the_mean_of_start_and_end_cross_entropies_over_allowed_positions():
    model = SpanExtractor(tiny_bert(n_layers=1)).eval()
    tokens, segments = random_inputs(B=2, n=8)
    allowed = torch.zeros(2, 8, dtype=torch.bool)
    allowed[0, 3:7] = True
    allowed[1, 4:8] = True
    targets = torch.tensor([[3, 5], [6, 6]])
    batch = FineTuningBatch(tokens, segments, targets, allowed)
    loss, count = finetuning_loss(model, batch)
    with torch.no_grad():
        hidden = model.bert.encode(tokens, segments)
        scores = hidden @ model.span.weight.T + model.span.bias  # (B, n, 2)
    expected = 0.0
    for b in range(2):
        for k in (0, 1):
            logits = [float(scores[b, t, k]) if allowed[b, t] else float("-inf") for t in range(8)]
            expected += cross_entropy_by_hand(torch.tensor(logits), int(targets[b, k])) / 2
    expected /= 2
    assert count == 2
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match=r"SpanExtractor.loss: 'span' targets must be \(2, 2\), got \(2,\)"):
        finetuning_loss(model, batch._replace(targets=torch.tensor([3, 6])))
    for row, bad in (
        (1, [[3, 5], [2, 6]]),
        (0, [[3, 7], [6, 6]]),
        (1, [[3, 5], [6, 5]]),
        (0, [[-1, 5], [6, 6]]),
        (1, [[3, 5], [6, 8]]),
    ):
        with pytest.raises(
            ValueError,
            match=rf"the answer \({bad[row][0]}, {bad[row][1]}\) of row {row} starts or "
            "ends outside the allowed positions, or ends before it starts",
        ):
            finetuning_loss(model, batch._replace(targets=torch.tensor(bad)))


def test_loss_and_predict_reject_another_model():
    batch = class_batch()
    with pytest.raises(
        ValueError,
        match=r"finetuning_loss: model must be a FineTuningHead \(a SequenceClassifier, "
        r"TokenTagger or SpanExtractor\), got BERT",
    ):
        finetuning_loss(tiny_bert(n_layers=1), batch)
    other = nn.Linear(3, 3).train()
    with pytest.raises(
        ValueError,
        match=r"predict: model must be a FineTuningHead \(a SequenceClassifier, "
        r"TokenTagger or SpanExtractor\), got Linear",
    ):
        predict(other, batch)
    assert other.training


def span_batch(B: int = 2, n: int = 8) -> FineTuningBatch:
    tokens, segments = random_inputs(B, n)
    allowed = torch.zeros(B, n, dtype=torch.bool)
    allowed[:, n // 2 :] = True
    answers = torch.tensor([[n // 2, n // 2 + 1], [n - 1, n - 1]])[:B]
    return FineTuningBatch(tokens, segments, answers, allowed, "span")


def tag_batch(B: int = 2, n: int = 7) -> FineTuningBatch:
    tokens, segments = random_inputs(B, n)
    tags = torch.full((B, n), IGNORE_INDEX)
    tags[:, 1:4] = torch.tensor([2, 0, 1])
    return FineTuningBatch(tokens, segments, tags, torch.zeros(B, n, dtype=torch.bool), "tags")


def test_each_heads_loss_is_cross_entropy_on_its_logits_exactly():
    """The heads' own losses are the formulas of the functions they replace, bit for bit:
    F.cross_entropy on the logits (over the scored tokens; the mean of the start and the end)."""
    bert = tiny_bert(n_layers=1)
    classifier, tagger, spans = (
        SequenceClassifier(bert, 3).eval(),
        TokenTagger(bert, 3).eval(),
        SpanExtractor(bert).eval(),
    )
    batch = class_batch()._replace(kind="class")
    loss, count = classifier.loss(batch)
    assert torch.equal(loss, F.cross_entropy(classifier(batch.tokens, batch.segments), batch.targets)) and count == 3

    batch = tag_batch()
    scored = batch.targets != IGNORE_INDEX
    loss, count = tagger.loss(batch)
    expected = F.cross_entropy(tagger(batch.tokens, batch.segments)[scored], batch.targets[scored])
    assert torch.equal(loss, expected) and count == 6

    batch = span_batch()
    start, end = spans(batch.tokens, batch.segments, batch.allowed)
    loss, count = spans.loss(batch)
    expected = (F.cross_entropy(start, batch.targets[:, 0]) + F.cross_entropy(end, batch.targets[:, 1])) / 2
    assert torch.equal(loss, expected) and count == 2
    for head, b in ((classifier, class_batch()), (tagger, tag_batch()), (spans, span_batch())):
        assert torch.equal(finetuning_loss(head, b)[0], head.loss(b)[0])  # the function is the method


def test_a_head_refuses_a_batch_of_another_kind():
    bert = tiny_bert(n_layers=1)
    tokens, segments = random_inputs(B=2, n=2)  # (2, 2) tags: the shape a span extractor reads
    tags = FineTuningBatch(tokens, segments, torch.tensor([[0, 1], [1, 1]]), torch.ones(2, 2, dtype=torch.bool), "tags")
    with pytest.raises(
        ValueError, match="SpanExtractor.loss: the batch holds 'tags' targets, but a SpanExtractor reads 'span' targets"
    ):
        SpanExtractor(bert).loss(tags)
    assert SpanExtractor(bert).loss(tags._replace(kind=None))[1] == 2  # unstated, it would pass as spans
    with pytest.raises(
        ValueError,
        match="SequenceClassifier.loss: the batch holds 'span' targets, but a SequenceClassifier reads 'class' targets",
    ):
        SequenceClassifier(bert, 3).loss(span_batch())
    with pytest.raises(ValueError, match="TokenTagger.loss: the batch holds 'class' targets"):
        TokenTagger(bert, 3).loss(class_batch()._replace(kind="class"))
    # a batch that states no kind is read by its targets' shape, as one made by hand
    assert TokenTagger(bert, 3).loss(tag_batch()._replace(kind=None))[1] == 6


def test_the_heads_state_their_kind_and_the_base_is_abstract():
    assert (SequenceClassifier.kind, TokenTagger.kind, SpanExtractor.kind) == ("class", "tags", "span")
    assert [SequenceClassifier.reads_pooler, TokenTagger.reads_pooler, SpanExtractor.reads_pooler] == [
        True,
        False,
        False,
    ]
    assert all(issubclass(h, FineTuningHead) for h in (SequenceClassifier, TokenTagger, SpanExtractor))
    with pytest.raises(TypeError, match="abstract"):
        FineTuningHead(tiny_bert(n_layers=1))


@pytest.mark.parametrize("was_training", [True, False])
def test_predict_is_eval_mode_argmax_and_restores_the_mode(was_training):
    bert = tiny_bert(n_layers=1, dropout=0.5)
    tokens, segments = random_inputs(B=3, n=8)
    allowed = torch.zeros(3, 8, dtype=torch.bool)
    allowed[:, 3:] = True
    batch = FineTuningBatch(tokens, segments, torch.zeros(3, dtype=torch.long), allowed)
    for model in (SequenceClassifier(bert, 3, dropout=0.5), TokenTagger(bert, 3, dropout=0.5), SpanExtractor(bert)):
        model.train(was_training)
        options = {"max_answer_length": 2} if isinstance(model, SpanExtractor) else {}
        predicted = predict(model, batch, **options)
        assert torch.equal(model.predict(batch, **options), predicted)
        assert model.training == was_training and all(m.training == was_training for m in model.modules())
        model.eval()
        with torch.no_grad():
            if isinstance(model, SpanExtractor):
                start, end = model(tokens, segments, allowed)
                expected = torch.tensor(brute_force_spans(start, end, 2))
            else:
                expected = model(tokens, segments).argmax(-1)
        assert torch.equal(predicted, expected)
        if isinstance(model, SpanExtractor):
            assert all(allowed[b, i] and allowed[b, j] and j - i < 2 for b, (i, j) in enumerate(predicted.tolist()))


# ----------------------------------------------------------------------------- freezing and gradients


def expected_trainable(model: nn.Module, head: str, k: int, n_layers: int) -> set[str]:
    names = {name for name, _ in model.named_parameters() if name.startswith(head + ".")}
    for layer in range(n_layers - k, n_layers):
        names |= {name for name, _ in model.named_parameters() if name.startswith(f"bert.encoder.layers.{layer}.")}
    if k > 0:
        names |= {"bert.pooler.weight", "bert.pooler.bias"}
    return names


@pytest.mark.parametrize("k", [0, 1, 2])
def test_freeze_encoder_leaves_gradients_on_the_head_and_the_top_layers_only(k):
    model = SequenceClassifier(tiny_bert(n_layers=2), 3)
    count = freeze_encoder(model, trainable_layers=k)
    trainable = expected_trainable(model, "classifier", k, 2)
    assert {name for name, p in model.named_parameters() if p.requires_grad} == trainable
    params = dict(model.named_parameters())
    assert count == sum(params[name].numel() for name in trainable) == trainable_parameters(model)
    loss, _ = finetuning_loss(model, class_batch())
    loss.backward()
    for name, p in model.named_parameters():
        if name in trainable:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None, name


def test_freeze_encoder_for_a_tagger_and_a_span_extractor():
    tokens, segments = random_inputs(B=2, n=6)
    targets = torch.full((2, 6), IGNORE_INDEX)
    targets[:, 1:4] = 1
    allowed = torch.ones(2, 6, dtype=torch.bool)
    for model, head, batch in (
        (TokenTagger(tiny_bert(), 3), "tagger", FineTuningBatch(tokens, segments, targets, allowed)),
        (
            SpanExtractor(tiny_bert()),
            "span",
            FineTuningBatch(tokens, segments, torch.tensor([[1, 2], [3, 3]]), allowed),
        ),
    ):
        freeze_encoder(model, trainable_layers=1)
        finetuning_loss(model, batch)[0].backward()
        for name, p in model.named_parameters():
            if name.startswith((head + ".", "bert.encoder.layers.1.")):
                assert p.requires_grad and p.grad is not None, name
            else:  # the pooler too: these heads do not read it (reads_pooler is False)
                assert not p.requires_grad and p.grad is None, name


def test_freeze_encoder_rejects_bad_arguments():
    model = SequenceClassifier(tiny_bert(n_layers=2), 2)
    for bad in (-1, 3, True, 1.0):
        with pytest.raises(ValueError, match=r"freeze_encoder: trainable_layers must be an int in \[0, 3\)"):
            freeze_encoder(model, trainable_layers=bad)
    with pytest.raises(ValueError, match="freeze_encoder: model must be a FineTuningHead .*, got Linear"):
        freeze_encoder(nn.Linear(2, 2))


def test_trainable_parameters_is_the_sum_over_parameters_that_train():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    assert trainable_parameters(model) == 3 * 4 + 4 + 4 * 2 + 2
    model[0].weight.requires_grad_(False)
    assert trainable_parameters(model) == 4 + 4 * 2 + 2


def test_fit_changes_only_the_weights_that_are_not_frozen():
    model = SequenceClassifier(tiny_bert(n_layers=2), 3, dropout=0.0)
    freeze_encoder(model, trainable_layers=1)
    trainable = expected_trainable(model, "classifier", 1, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = class_batch()._replace(kind="class")  # fit moves the tensors and carries the kind along
    config = training.TrainConfig(
        steps=3, lr=1e-2, warmup_steps=0, schedule="constant", eval_every=10, log_every=1, amp=False
    )
    training.fit(model, lambda step: batch, finetuning_loss, config, device="cpu", progress=False)
    after = model.state_dict()
    assert before.keys() == after.keys()
    for name in before:
        if name in trainable:
            assert not torch.equal(before[name], after[name]), name
        else:
            assert torch.equal(before[name], after[name]), name


# ----------------------------------------------------------------------------- a tokenizer for the data

ARTICLES = [
    [
        "The band was formed by John Lennon in Liverpool in 1960 .",
        "Lennon met Paul McCartney at a fete in 1957 .",
        "They played in Hamburg for two years .",
        "In 1960 the band took the name Beatles .",
        "The Beatles split in 1970 after ten years .",
        "McCartney later formed Wings with his wife Linda .",
        "Wings toured Europe in 1972 and 1973 .",
    ],
    [
        "The river Thames runs through London to the sea .",
        "London was founded by the Romans as Londinium .",
        "The Romans built a bridge over the Thames .",
        "In 1666 a great fire burned much of London .",
        "After the fire Christopher Wren rebuilt many churches .",
        "Wren designed the dome of St Paul .",
    ],
    ["One sentence only ."],
]

CORPUS = [
    "Paul McCartney met NASA in 1994 .",
    "the cat sat on the mat , and the dog ran in the park .",
    "the [UNK] was odd .",
    *ARTICLES[0],
    *ARTICLES[1],
]


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer.train(CORPUS * 3, vocab_size=250)


# ----------------------------------------------------------------------------- single sentences and pairs


def test_encode_sentence_lays_out_cls_text_sep_and_cuts_the_text(tok):
    ids = tok.encode("the cat sat on the mat")
    assert encode_sentence(tok, "the cat sat on the mat", 32) == [CLS_ID, *ids, SEP_ID]
    assert encode_sentence(tok, "the cat sat on the mat", 5) == [CLS_ID, *ids[:3], SEP_ID]
    with pytest.raises(ValueError, match="encode_sentence: max_len must be an int >= 5"):
        encode_sentence(tok, "the cat", 4)
    with pytest.raises(ValueError, match="encodes to no piece"):
        encode_sentence(tok, "   ", 10)


SST2_TEXT = "sentence\tlabel\nthe cat sat on the mat . \t1\nthe dog ran in the park \t0\n"


def test_sst2_examples_are_encoded_sentences_with_their_labels(tok, fetched):
    path, calls = fetched
    path.write_text(SST2_TEXT, encoding="utf-8")
    examples = sst2_examples(tok, "dev", 8, download=False)
    assert calls[-1] == ("sst2", "dev.tsv", False)
    assert [e.target for e in examples] == [1, 0] and {e.kind for e in examples} == {"class"}
    first = [CLS_ID, *tok.encode("the cat sat on the mat .")[:6], SEP_ID]
    assert examples[0].tokens == first and examples[0].segments == [0] * 8 and examples[0].allowed is None
    assert examples[1].tokens == [CLS_ID, *tok.encode("the dog ran in the park"), SEP_ID]
    assert examples[1].segments == [0] * len(examples[1].tokens)


def test_sst2_examples_on_the_real_dev_split(tok, tmp_path, monkeypatch):
    """The GLUE dev split (needs ``TB_DATA_DIR``): 872 sentences, 444 positive."""
    value = os.environ.get("TB_DATA_DIR")
    if not value or not (Path(value) / "sst2" / "dev.tsv").is_file():
        pytest.skip("TB_DATA_DIR does not point at a folder holding sst2/")
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    examples = sst2_examples(tok, "dev", 16, download=False)
    assert len(examples) == 872 and Counter(e.target for e in examples) == {1: 444, 0: 428}
    for e in examples:
        assert e.tokens[0] == CLS_ID and e.tokens[-1] == SEP_ID and 3 <= len(e.tokens) <= 16
        assert e.segments == [0] * len(e.tokens)


def order_documents(n_documents: int, lengths: list[int]) -> list[list[str]]:
    return [[f"doc {d} sentence {k} ." for k in range(lengths[d % len(lengths)])] for d in range(n_documents)]


TRANSLATIONS = [
    ("Es ist heiß heute.", "It's hot today."),
    ("Es ist heiß heute.", "It is hot today."),
    ("Es ist heiß heute.", "It's warm today."),
    ("Es ist kalt heute.", "It's cold today."),
    ("Es ist kalt heute.", "It is cold today."),
    ("Ich habe Hunger.", "I'm hungry."),
    ("Ich habe Hunger.", "I am hungry."),
    ("Ich bin hungrig.", "I am hungry."),
    ("Ich bin hungrig.", "I'm starving."),
    ("Er ist müde.", "He is tired."),
    ("Er ist müde.", "He's tired."),
    ("Sie ist müde.", "She is tired."),
    ("Sie ist müde.", "She's tired."),
    ("Das ist gut.", "That is good."),
    ("Das ist gut.", "That's good."),
    ("Das ist gut.", "That is good."),
    ("Allein.", "Alone."),
]


def _pivots_by_text():
    pivots = {}
    for pivot, text in TRANSLATIONS:
        pivots.setdefault(text, set()).add(pivot)
    return pivots


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_pivot_paraphrase_pairs_label_shared_translations(seed):
    pivots = _pivots_by_text()
    splits = pivot_paraphrase_pairs(TRANSLATIONS, test_fraction=0.3, seed=seed)
    assert set(splits) == {"train", "test"}
    every = splits["train"] + splits["test"]
    # by hand: heiß 3 texts -> 1 pair, kalt, Hunger, hungrig, Er, Sie and gut 1 each (gut's duplicate counts once),
    # Allein none: 7 paraphrases, and at most one negative each (none where a split holds a single group)
    assert sum(label for *_, label in every) == 7 and len(every) <= 14
    for a, b, label in every:
        assert a != b
        assert bool(pivots[a] & pivots[b]) == bool(label)  # a paraphrase exactly when a pivot is shared
    # groups linked by a pivot, through any chain, never straddle the splits
    linked = [
        {"It's hot today.", "It is hot today.", "It's warm today."},
        {"It's cold today.", "It is cold today."},
        {"I'm hungry.", "I am hungry.", "I'm starving."},
        {"He is tired.", "He's tired."},
        {"She is tired.", "She's tired."},
        {"That is good.", "That's good."},
    ]
    for group in linked:
        where = {split for split, rows in splits.items() for a, b, _ in rows for t in (a, b) if t in group}
        assert len(where) <= 1
    assert pivot_paraphrase_pairs(TRANSLATIONS, test_fraction=0.3, seed=seed) == splits


def test_pivot_paraphrase_negatives_are_the_most_overlapping_candidates():
    # one split only: every text is a candidate; with many candidates per word the best overlap is found
    splits = pivot_paraphrase_pairs(TRANSLATIONS, test_fraction=1e-9, candidates=200, seed=0)
    negatives = [frozenset((a, b)) for a, b, label in splits["train"] if label == 0]
    assert (
        frozenset(("It is hot today.", "It is cold today.")) in negatives
        or frozenset(("It's hot today.", "It's cold today.")) in negatives
    )
    assert len(negatives) == sum(label for *_, label in splits["train"]) == 7  # one negative per positive
    # "I'm hungry." and "I'm starving." share no pivot but are linked through "I am hungry.": never a negative
    assert frozenset(("I'm hungry.", "I'm starving.")) not in negatives


def test_pivot_paraphrase_pairs_reject_bad_arguments():
    with pytest.raises(ValueError, match="no pivot has two different texts"):
        pivot_paraphrase_pairs([("a", "x"), ("a", "x"), ("b", "y")])
    with pytest.raises(ValueError, match="test_fraction"):
        pivot_paraphrase_pairs(TRANSLATIONS, test_fraction=1.0)
    with pytest.raises(ValueError, match="candidates"):
        pivot_paraphrase_pairs(TRANSLATIONS, candidates=0)


def test_pair_examples_lay_out_cls_a_sep_b_sep(tok):
    pairs = [("the cat sat .", "the dog ran .", 1), ("the dog ran .", "the cat sat .", 0)]
    examples = pair_examples(tok, pairs, 32)
    for (a, b, label), e in zip(pairs, examples):
        ia, ib = tok.encode(a), tok.encode(b)
        assert e.tokens == [CLS_ID, *ia, SEP_ID, *ib, SEP_ID]
        assert e.segments == [0] * (len(ia) + 2) + [1] * (len(ib) + 1)
        assert e.target == label and type(e.target) is int and e.allowed is None and e.kind == "class"
    short = pair_examples(tok, [(CORPUS[1], CORPUS[0], np.int64(1))], 9)[0]
    assert len(short.tokens) == 9 and short.tokens.count(SEP_ID) == 2 and short.target == 1


# ----------------------------------------------------------------------------- case restoration


@pytest.mark.parametrize(
    "word, tag",
    [
        ("dog", 0),
        ("Dog", 1),
        ("NASA", 2),
        ("McCartney", 3),
        ("A", 1),
        ("1994", None),
        (",", None),
        ("iPhone", 3),
        ("US", 2),
        ("e.g.", 0),
        ("Paul's", 1),
        ("", None),
        ("B-52", 1),
    ],
)
def test_case_tag_of_hand_examples(word, tag):
    assert case_tag(word) == tag
    assert CASE_TAGS == ("lower", "Capitalised", "UPPER", "MiXed")


HAND_TAGS = {
    "Paul": 1,
    "McCartney": 3,
    "met": 0,
    "NASA": 2,
    "in": 0,
    "1994": None,
    ".": None,
    "the": 0,
    "The": 1,
    "was": 0,
    "odd": 0,
    "cat": 0,
    "sat": 0,
    "McLondon": 3,
}


def expected_case_example(tok, words):
    tokens, targets = [CLS_ID], [IGNORE_INDEX]
    for word in words:
        pieces = tok.encode(word.lower())
        tag = HAND_TAGS[word]
        tokens += pieces
        targets += [IGNORE_INDEX if tag is None else tag] + [IGNORE_INDEX] * (len(pieces) - 1)
    return tokens + [SEP_ID], targets + [IGNORE_INDEX]


def test_case_restoration_tags_the_first_piece_of_every_word(tok):
    sentences = ["Paul McCartney met NASA in 1994 .", "The cat sat", "the [UNK] was odd .", "the McLondon cat"]
    examples = case_restoration_examples(tok, sentences, 64)
    assert len(examples) == 4
    for sentence, e in zip(sentences, examples):
        words = [w for w in sentence.split() if w != "[UNK]"]
        tokens, targets = expected_case_example(tok, words)
        assert e.tokens == tokens and e.target == targets and e.kind == "tags"
        assert e.segments == [0] * len(tokens) and e.allowed is None
        # the input is the lower-cased sentence, without its [UNK]
        assert e.tokens[1:-1] == tok.encode(" ".join(words).lower())
        assert UNK_ID not in e.tokens
    # McLondon is several pieces: only the first carries the tag
    pieces = tok.encode("mclondon")
    assert len(pieces) > 1
    assert examples[3].tokens == [CLS_ID, *tok.encode("the"), *pieces, *tok.encode("cat"), SEP_ID]
    assert examples[3].target == [IGNORE_INDEX, 0, 3] + [IGNORE_INDEX] * (len(pieces) - 1) + [0, IGNORE_INDEX]


def test_case_restoration_cuts_at_a_word_boundary_within_max_len(tok):
    sentence = "Paul McCartney met NASA in 1994 ."
    full = case_restoration_examples(tok, [sentence], 64)[0]
    word_pieces = [len(tok.encode(w.lower())) for w in sentence.split()]
    for max_len in range(5, len(full.tokens) + 1):
        cut = case_restoration_examples(tok, [sentence], max_len)
        # the longest run of whole words that fits max_len - 2 pieces
        kept, size = 0, 0
        while kept < len(word_pieces) and size + word_pieces[kept] <= max_len - 2:
            size += word_pieces[kept]
            kept += 1
        if kept == 0:
            assert cut == []
            continue
        (e,) = cut
        assert len(e.tokens) == size + 2 <= max_len
        assert e.tokens == full.tokens[: size + 1] + [SEP_ID]
        assert e.target == full.target[: size + 1] + [IGNORE_INDEX]
    with pytest.raises(ValueError, match="case_restoration_examples: max_len must be an int >= 5"):
        case_restoration_examples(tok, [sentence], 4)


def test_case_restoration_skips_sentences_with_no_tagged_word(tok):
    examples = case_restoration_examples(tok, ["1994 , 1960 .", "[UNK] [UNK]", "", "the cat"], 32)
    assert len(examples) == 1 and examples[0].tokens[1:-1] == tok.encode("the cat")
    # the years fit but carry no tag: a cut that keeps only them drops the sentence
    years = "1994 1960 1957 1970"
    assert case_restoration_examples(tok, [years + " McCartney"], len(tok.encode(years)) + 2) == []
    assert len(case_restoration_examples(tok, [years + " McCartney"], len(tok.encode(years + " McCartney")) + 2)) == 1


# ----------------------------------------------------------------------------- entity spans


@pytest.mark.parametrize(
    "words, max_words, spans",
    [
        ("The Beatles played in New York in 1964 .", 3, [(1, 2), (4, 6), (7, 8)]),
        ("Paul met John", 3, [(2, 3)]),
        ("Paris", 3, []),
        ("", 3, []),
        ("He saw A B C D then E F G", 3, [(7, 10)]),
        ("He saw A B C D then E F G", 4, [(2, 6), (7, 10)]),
        ("He saw A B C D then E F G", 1, []),
        ("In 1000 999 2099 2100 2150 0999 19945 1994s", 3, [(1, 2), (3, 4)]),
        ("1994 was the year 1994", 3, [(4, 5)]),
        ("the [UNK] of McCartney and NASA", 3, [(3, 4), (5, 6)]),
        ("we saw R2D2 and Jean-Paul and O'Neil", 3, []),
        ("in London 1666 Wren", 3, [(1, 2), (2, 3), (3, 4)]),
    ],
)
def test_entity_spans_of_hand_examples(words, max_words, spans):
    assert entity_spans(words.split(), max_words=max_words) == spans


# ----------------------------------------------------------------------------- cloze spans


def passage_of(passage: str) -> tuple[list[str], int, int]:
    """The article and sentence range [i, j) whose sentences make up ``passage``."""
    for article in ARTICLES:
        for i in range(len(article)):
            for j in range(i + 1, len(article) + 1):
                if " ".join(article[i:j]) == passage:
                    return article, i, j
    raise AssertionError(f"no run of sentences makes {passage!r}")


@pytest.mark.parametrize("max_len, question_pieces, per_passage", [(48, 16, 2), (64, 20, 1), (40, 16, 3)])
def test_cloze_examples_hold_the_answer_in_the_passage(tok, max_len, question_pieces, per_passage):
    out = cloze_span_examples(tok, ARTICLES, max_len, question_pieces=question_pieces, per_passage=per_passage, seed=1)
    assert len(out) >= 4
    by_passage = Counter()
    questions_of = {}
    for item in out:
        assert isinstance(item, SpanExample)
        e = item.example
        tokens, segments, (first, last), kind, allowed = e
        assert kind == "span"
        assert len(tokens) <= max_len and len(segments) == len(allowed) == len(tokens)
        assert tokens[0] == CLS_ID and tokens[-1] == SEP_ID and tokens.count(SEP_ID) == 2
        sep = tokens.index(SEP_ID)
        assert segments == [0] * (sep + 1) + [1] * (len(tokens) - sep - 1)
        assert allowed == [False] * (sep + 1) + [True] * (len(tokens) - sep - 2) + [False]
        # the question: one [MASK] standing for the answer, in another sentence of the article
        assert tokens.count(MASK_ID) == 1 and item.question.split().count("[MASK]") == 1
        assert tokens[1:sep] == tok.encode(item.question) and sep - 1 <= question_pieces
        article, i, j = passage_of(item.passage)
        original = item.question.replace("[MASK]", item.answer)
        assert original in article and original not in article[i:j]
        # the passage and the answer's span in it: its first occurrence
        assert tokens[sep + 1 : -1] == tok.encode(item.passage)
        assert len(tokens) - sep - 2 <= max_len - 3 - question_pieces
        assert sep < first <= last < len(tokens) - 1 and allowed[first] and allowed[last]
        assert tok.decode(tokens[first : last + 1]) == item.answer.lower()
        words, answer = item.passage.split(), item.answer.split()
        at = next(k for k in range(len(words)) if words[k : k + len(answer)] == answer)
        assert first == sep + 1 + len(tok.encode(" ".join(words[:at])))
        assert item.answer in item.candidates
        assert set(item.candidates) == {
            " ".join(s.split()[a:b]) for s in article[i:j] for a, b in entity_spans(s.split())
        }
        by_passage[item.passage] += 1
        questions_of.setdefault(item.passage, []).append(original)
    assert max(by_passage.values()) <= per_passage
    assert all(len(set(qs)) == len(qs) for qs in questions_of.values())
    again = cloze_span_examples(
        tok, ARTICLES, max_len, question_pieces=question_pieces, per_passage=per_passage, seed=1
    )
    assert again == out


def test_cloze_keeps_a_wikitext_unk_as_one_unk_piece(tok):
    """WikiText's ``<unk>`` reaches the documents as ``[UNK]`` (see ``wikitext2_documents``): the
    passage must read it as the one ``[UNK]`` id that pretraining saw, as ``tok.encode`` does."""
    articles = [
        [
            "The river Thames runs through London to the [UNK] .",
            "London was founded by the Romans as Londinium .",
            "The Romans built a bridge over the Thames .",
        ]
    ]
    out = cloze_span_examples(tok, articles, 48, question_pieces=16, per_passage=3, seed=0)
    passages = [item for item in out if "[UNK]" in item.passage]
    assert passages
    for item in passages:
        tokens = item.example.tokens
        sep = tokens.index(SEP_ID)
        assert tokens[sep + 1 : -1] == tok.encode(item.passage)
        assert tokens.count(UNK_ID) == item.passage.split().count("[UNK]")


def test_cloze_needs_room_for_a_passage(tok):
    with pytest.raises(ValueError, match="max_len=50 leaves 7 pieces for a passage after a question of 40"):
        cloze_span_examples(tok, ARTICLES, 50)
    cloze_span_examples(tok, ARTICLES, 51)  # 8 pieces: enough
    with pytest.raises(ValueError, match="cloze_span_examples: max_len must be an int >= 5"):
        cloze_span_examples(tok, ARTICLES, 4, question_pieces=0)


# ----------------------------------------------------------------------------- batches


def class_examples(n: int) -> list[Example]:
    return [Example([CLS_ID] + [10 + i] * (1 + i % 4) + [SEP_ID], [0] * (3 + i % 4), i % 2, "class") for i in range(n)]


def same_batch(a: FineTuningBatch, b: FineTuningBatch) -> bool:
    return a.kind == b.kind and all(torch.equal(x, y) for x, y in zip(a[:4], b[:4]))


def ids_of(batch: FineTuningBatch) -> list[int]:
    return [int(row[1]) - 10 for row in batch.tokens]


def test_batches_pad_every_field_to_the_longest_example():
    examples = [
        Example([2, 7, 3], [0, 0, 0], 1, "class"),
        Example([2, 7, 8, 3, 9, 3], [0, 0, 0, 0, 1, 1], 0, "class"),
        Example([2, 5, 6, 7, 3], [0, 0, 0, 0, 0], 1, "class"),
    ]
    (batch,) = list(FineTuningBatches(examples, 4, shuffle=False))
    assert batch.tokens.tolist() == [[2, 7, 3, 0, 0, 0], [2, 7, 8, 3, 9, 3], [2, 5, 6, 7, 3, 0]]
    assert batch.segments.tolist() == [[0] * 6, [0, 0, 0, 0, 1, 1], [0] * 6]
    assert batch.targets.tolist() == [1, 0, 1] and batch.targets.dtype == torch.int64
    assert batch.tokens.dtype == batch.segments.dtype == torch.int64
    assert batch.allowed.dtype == torch.bool and not batch.allowed.any() and batch.allowed.shape == (3, 6)
    assert batch.kind == "class"

    tags = [
        Example([2, 7, 3], [0, 0, 0], [IGNORE_INDEX, 1, IGNORE_INDEX], "tags"),
        Example([2, 7, 8, 3], [0, 0, 0, 0], [IGNORE_INDEX, 2, 0, IGNORE_INDEX], "tags"),
    ]
    (batch,) = list(FineTuningBatches(tags, 2, shuffle=False))
    I = IGNORE_INDEX
    assert batch.targets.tolist() == [[I, 1, I, I], [I, 2, 0, I]] and batch.kind == "tags"
    assert batch.tokens.tolist() == [[2, 7, 3, 0], [2, 7, 8, 3]]

    spans = [
        Example([2, 4, 3, 7, 8, 3], [0, 0, 0, 1, 1, 1], (3, 4), "span", [False, False, False, True, True, False]),
        Example([2, 4, 3, 7, 3], [0, 0, 0, 1, 1], (3, 3), "span", [False, False, False, True, False]),
    ]
    (batch,) = list(FineTuningBatches(spans, 2, shuffle=False))
    assert batch.targets.tolist() == [[3, 4], [3, 3]] and batch.kind == "span"
    assert batch.allowed.tolist() == [
        [False, False, False, True, True, False],
        [False, False, False, True, False, False],
    ]
    assert batch.segments.tolist() == [[0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0]]
    assert batch.tokens.tolist() == [[2, 4, 3, 7, 8, 3], [2, 4, 3, 7, 3, 0]]


def test_batches_are_a_pure_function_of_the_step_and_epochs_visit_every_example_once():
    examples = class_examples(10)
    batches = FineTuningBatches(examples, 4, seed=5)
    assert len(batches) == 3
    epochs = []
    for epoch in range(3):
        seen = []
        for index in range(3):
            step = epoch * 3 + index
            first, second = batches(step), batches(step)
            assert same_batch(first, second)
            assert first.tokens.shape[0] == (4 if index < 2 else 2)
            seen += ids_of(first)
        assert sorted(seen) == list(range(10))
        epochs.append(seen)
    assert epochs[0] != epochs[1] != epochs[2]
    # another seed, another order; iterating gives epoch 0
    assert [ids_of(b) for b in FineTuningBatches(examples, 4, seed=6)] != [ids_of(batches(s)) for s in range(3)]
    assert [ids_of(b) for b in batches] == [ids_of(batches(s)) for s in range(3)]
    # each batch is padded to its own longest example
    for s in range(3):
        batch = batches(s)
        assert batch.tokens.shape[1] == max(len(examples[i].tokens) for i in ids_of(batch))


def test_bucketed_batches_group_similar_lengths_and_still_visit_every_example_once():
    rng = np.random.default_rng(0)
    examples = [
        Example([CLS_ID] + [10 + i] * int(n) + [SEP_ID], [0] * (int(n) + 2), i % 2, "class")
        for i, n in enumerate(rng.integers(1, 40, size=200))
    ]
    plain, bucketed = FineTuningBatches(examples, 8, seed=3), FineTuningBatches(examples, 8, seed=3, bucket=5)
    assert len(bucketed) == len(plain) == 25
    padded = {}
    for name, batches in [("plain", plain), ("bucketed", bucketed)]:
        for epoch in range(2):
            steps = range(epoch * 25, (epoch + 1) * 25)
            seen = [i for s in steps for i in ids_of(batches(s))]
            assert sorted(seen) == list(range(200))  # each example once per epoch
        padded[name] = sum(batches(s).tokens.numel() - int((batches(s).tokens != PAD_ID).sum()) for s in range(25))
    assert padded["bucketed"] < padded["plain"] / 3  # far less of each step is padding
    # the same windows as the plain order, each sorted by length; a pure function of the step
    window = plain.order(0)[:40]
    lengths = [len(examples[i].tokens) for i in window]
    firsts = {tuple(ids_of(bucketed(s))) for s in range(25)}
    assert tuple(int(i) for i in window[np.argsort(lengths, kind="stable")][:8]) in firsts
    assert same_batch(bucketed(7), FineTuningBatches(examples, 8, seed=3, bucket=5)(7))
    assert bucketed(3).tokens.tolist() != bucketed(28).tokens.tolist()  # another epoch, another order
    for bad in (0, -2, True, 1.5):
        with pytest.raises(ValueError, match="bucket must be a positive int"):
            FineTuningBatches(examples, 8, bucket=bad)


def test_batches_without_shuffling_keep_the_order():
    examples = class_examples(7)
    batches = FineTuningBatches(examples, 3, shuffle=False, seed=9)
    for epoch in range(2):
        order = [i for s in range(len(batches)) for i in ids_of(batches(epoch * len(batches) + s))]
        assert order == list(range(7))
    assert [b.targets.tolist() for b in batches] == [[0, 1, 0], [1, 0, 1], [0]]


def test_batches_reject_bad_examples():
    good = class_examples(3)
    with pytest.raises(ValueError, match="FineTuningBatches: no examples"):
        FineTuningBatches([], 2)
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="batch_size must be a positive int"):
            FineTuningBatches(good, bad)
    tags = Example([2, 7, 3], [0, 0, 0], [IGNORE_INDEX, 1, IGNORE_INDEX], "tags")
    with pytest.raises(ValueError, match=r"FineTuningBatches: examples mix the kinds \['class', 'tags'\]"):
        FineTuningBatches([*good, tags], 2)
    with pytest.raises(
        ValueError, match=r"FineTuningBatches: example 1's kind must be one of 'class', 'tags' or 'span', got 'label'"
    ):
        FineTuningBatches([good[0], good[1]._replace(kind="label")], 2)
    # a span built in the old layout, allowed where the kind now stands
    with pytest.raises(ValueError, match=r"example 0's kind must be one of .*, got \[False, True, False\]"):
        FineTuningBatches([Example([2, 7, 3], [0, 0, 0], (1, 1), [False, True, False])], 2)
    with pytest.raises(ValueError, match=r"example 1 has fields of lengths \[2, 3\]"):
        FineTuningBatches([good[0], Example([2, 7, 3], [0, 0], 1, "class")], 2)
    with pytest.raises(ValueError, match=r"example 0 has fields of lengths \[2, 3\]"):
        FineTuningBatches([Example([2, 7, 3], [0, 0, 0], [1, 2], "tags")], 2)
    with pytest.raises(ValueError, match=r"example 0 has fields of lengths \[3, 4\]"):
        FineTuningBatches([Example([2, 7, 3], [0, 0, 0], (1, 1), "span", [False, True, False, False])], 2)
    # the kind is stated, and the target must be of it: nothing is guessed from the target's type
    for kind, target, pattern in [
        ("class", "1", "class target must be an int"),
        ("class", True, "class target"),
        ("class", 1.0, "class target"),
        ("class", [1, 2, 3], "class target"),
        ("tags", 1, "tags target must be a list of ints"),
        ("tags", [1, 2.5, 0], "tags target must be a list of ints"),
        ("span", (1, 2, 3), r"span target must be a \(start, end\) pair of ints"),
        ("span", [1, 2, 0], "span target"),
        ("span", (1, 1.0), "span target"),
    ]:
        with pytest.raises(ValueError, match=f"FineTuningBatches: example 0's {pattern}"):
            FineTuningBatches([Example([2, 7, 3], [0, 0, 0], target, kind, [False, True, False])], 2)
    with pytest.raises(ValueError, match="example 0 is a span without allowed positions"):
        FineTuningBatches([Example([2, 7, 3], [0, 0, 0], (1, 1), "span")], 2)
    assert FineTuningBatches([Example([2, 7, 3], [0, 0, 0], np.int64(1), "class")], 2)(0).targets.tolist() == [1]
    # a list of two tags is tags, and a pair is a span, as they say
    assert FineTuningBatches([Example([2, 7], [0, 0], [1, 2], "tags")], 1)(0).targets.tolist() == [[1, 2]]
    assert FineTuningBatches([Example([2, 7], [0, 0], [1, 1], "span", [False, True])], 1)(0).targets.tolist() == [
        [1, 1]
    ]


def test_task_examples_train_their_heads_through_the_batches(tok):
    """End to end, tiny: examples -> batches -> a head's loss and prediction."""
    bert = tiny_bert(n_layers=1, vocab_size=len(tok), max_len=64)
    tagging = FineTuningBatches(case_restoration_examples(tok, CORPUS[:4], 32), 2, shuffle=False)
    batch = tagging(0)
    loss, count = finetuning_loss(TokenTagger(bert, len(CASE_TAGS)), batch)
    assert count == int((batch.targets != IGNORE_INDEX).sum()) > 0 and torch.isfinite(loss)
    spans = FineTuningBatches(
        [item.example for item in cloze_span_examples(tok, ARTICLES, 48, question_pieces=16)], 3, seed=0
    )
    batch = spans(0)
    model = SpanExtractor(bert)
    loss, count = finetuning_loss(model, batch)
    assert count == batch.tokens.shape[0] and torch.isfinite(loss)
    predicted = predict(model, batch, max_answer_length=4)
    for b, (i, j) in enumerate(predicted.tolist()):
        assert batch.allowed[b, i] and batch.allowed[b, j] and 0 <= j - i < 4


def test_a_span_batch_made_by_hand_without_allowed_is_checked_against_the_whole_row():
    # allowed=None means every position may hold the answer: an answer past the row's end is named
    torch.manual_seed(0)
    head = SpanExtractor(BERT(BERTConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=1, max_len=16)))
    tokens = torch.randint(5, 50, (2, 6))
    loss, count = head.loss(FineTuningBatch(tokens, torch.zeros_like(tokens), torch.tensor([[1, 2], [0, 5]]), None))
    assert torch.isfinite(loss) and count == 2
    with pytest.raises(ValueError, match=r"answer \(1, 7\) of row 0"):
        head.loss(FineTuningBatch(tokens, torch.zeros_like(tokens), torch.tensor([[1, 7], [0, 5]]), None))
