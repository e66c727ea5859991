"""Tests of transformer_book.prompting (zero-shot cloze and next-token classification, chapter 15)
and of metrics.span_scores (chapter 14)."""

import pytest
import torch

from transformer_book import prompting
from transformer_book.metrics import span_scores
from transformer_book.models import BERT, GPT, BERTConfig, GPTConfig
from transformer_book.models.modern import ModernGPT, ModernGPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = {
    w: i
    for i, w in enumerate(
        [
            "[PAD]",
            "[UNK]",
            "[CLS]",
            "[SEP]",
            "[MASK]",
            "it",
            "was",
            "great",
            "terrible",
            "a",
            "fine",
            "film",
            ".",
            "!",
            "n/a",
            "very",
        ]
    )
}


def encode(text):
    """A whitespace tokenizer over VOCAB; unknown words become two pieces (so they are not label words)."""
    ids = []
    for word in text.lower().split():
        ids.extend([VOCAB[word]] if word in VOCAB else [1, 1])
    return ids


def tiny_bert(seed=0):
    torch.manual_seed(seed)
    return BERT(BERTConfig(len(VOCAB), max_len=32, d_model=16, n_heads=2, n_layers=1)).eval()


def test_label_word_ids_requires_single_pieces():
    assert prompting.label_word_ids(encode, ["terrible", "great"]) == [8, 7]
    with pytest.raises(ValueError, match="'superb' encodes to 2 pieces"):
        prompting.label_word_ids(encode, ["great", "superb"])
    with pytest.raises(ValueError, match="'' encodes to 0 pieces"):
        prompting.label_word_ids(encode, [""])


def test_cloze_inputs_lay_out_template_text_and_mask():
    inputs = prompting.cloze_inputs(
        encode, ["a fine film", "film"], "{text} it was [MASK] .", cls_id=2, sep_id=3, mask_id=4, max_len=32
    )
    assert inputs == [[2, 9, 10, 11, 5, 6, 4, 12, 3], [2, 11, 5, 6, 4, 12, 3]]
    # the mask may come first, and the template's words are never cut; the text loses its end
    (first,) = prompting.cloze_inputs(
        encode, ["a fine film"], "[MASK] ! {text}", cls_id=2, sep_id=3, mask_id=4, max_len=6
    )
    assert first == [2, 4, 13, 9, 10, 3]


@pytest.mark.parametrize(
    "template", ["{text} it was .", "it was [MASK] .", "{text} [MASK] [MASK]", "{text} {text} [MASK]"]
)
def test_cloze_inputs_need_one_text_and_one_mask(template):
    with pytest.raises(ValueError, match="once each"):
        prompting.cloze_inputs(encode, ["film"], template, cls_id=2, sep_id=3, mask_id=4, max_len=32)


def test_cloze_inputs_refuse_a_template_that_leaves_no_room():
    with pytest.raises(ValueError, match="no room for the text"):
        prompting.cloze_inputs(
            encode, ["film"], "{text} it was very very [MASK] .", cls_id=2, sep_id=3, mask_id=4, max_len=8
        )


def test_mask_log_probs_is_the_mlm_head_at_the_mask():
    model = tiny_bert()
    tokens = torch.tensor([[2, 9, 4, 11, 3, 0], [2, 5, 6, 7, 4, 3]])
    got = prompting.mask_log_probs(model, tokens, mask_id=4)
    with torch.no_grad():
        logits = model(tokens).mlm_logits
    expected = torch.stack([torch.log_softmax(logits[0, 2], -1), torch.log_softmax(logits[1, 4], -1)])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got.exp().sum(-1), torch.ones(2))


def test_mask_log_probs_needs_exactly_one_mask_per_row_and_restores_the_mode():
    model = tiny_bert().train()
    with pytest.raises(ValueError, match="row 1 holds 2 masks"):
        prompting.mask_log_probs(model, torch.tensor([[2, 4, 3], [4, 4, 3]]), mask_id=4)
    with pytest.raises(ValueError, match="row 0 holds 0 masks"):
        prompting.mask_log_probs(model, torch.tensor([[2, 5, 3]]), mask_id=4)
    prompting.mask_log_probs(model, torch.tensor([[2, 4, 3]]), mask_id=4)
    assert model.training


def test_cloze_scores_match_one_input_at_a_time_whatever_the_batch():
    model = tiny_bert(1)
    inputs = prompting.cloze_inputs(
        encode,
        ["a fine film", "film", "a film it was very fine"],
        "{text} it was [MASK] .",
        cls_id=2,
        sep_id=3,
        mask_id=4,
        max_len=32,
    )
    batched = prompting.cloze_scores(model, inputs, [8, 7], mask_id=4, batch_size=2)
    for row, ids in zip(batched, inputs):
        alone = prompting.mask_log_probs(model, torch.tensor([ids]), mask_id=4)[0, [8, 7]]
        torch.testing.assert_close(row, alone, rtol=1e-5, atol=1e-5)


def test_next_token_log_probs_ignore_right_padding():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=20, context=16, d_model=16, n_heads=2, n_layers=1)).eval()
    prompts = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]]
    batched = prompting.next_token_log_probs(gpt, prompts, pad_id=0, batch_size=3)
    with torch.no_grad():
        expected = torch.stack([torch.log_softmax(gpt(torch.tensor([p]))[0, -1], -1) for p in prompts])
    torch.testing.assert_close(batched, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="prompt 1 has 0 tokens"):
        prompting.next_token_log_probs(gpt, [[1], []])
    with pytest.raises(ValueError, match="prompt 0 has 17 tokens"):
        prompting.next_token_log_probs(gpt, [[1] * 17])


@pytest.mark.parametrize(
    "make",
    [
        lambda: GPT(GPTConfig(vocab_size=20, context=32, d_model=16, n_heads=2, n_layers=2)),
        lambda: ModernGPT(ModernGPTConfig(vocab_size=20, context=32, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2)),
    ],
)
def test_a_shared_prefix_computed_once_gives_the_full_prompts_numbers(make):
    torch.manual_seed(0)
    model = make().eval()
    prefix = [1, 2, 3, 4, 5, 6]
    prompts = [[7, 8, 9], [10], [11, 12, 13, 14, 15], [16, 17]]
    after = prompting.next_token_log_probs_after(model, prefix, prompts, batch_size=3)
    full = prompting.next_token_log_probs(model, [prefix + p for p in prompts], batch_size=1)
    torch.testing.assert_close(after, full, rtol=1e-5, atol=1e-5)
    assert not model.training
    with pytest.raises(ValueError, match="prefix is empty"):
        prompting.next_token_log_probs_after(model, [], prompts)
    with pytest.raises(ValueError, match="prompt 0 has 33 tokens"):
        prompting.next_token_log_probs_after(model, prefix, [[1] * 27])
    with pytest.raises(ValueError, match="has no decode_step"):
        prompting.next_token_log_probs_after(torch.nn.Linear(2, 2), prefix, prompts)


def test_calibrate_subtracts_the_content_free_scores():
    scores = torch.log(torch.tensor([[0.6, 0.4], [0.7, 0.3], [0.9, 0.1]]))
    free = torch.log(torch.tensor([0.8, 0.2]))
    # by hand: 0.6/0.8 < 0.4/0.2, 0.7/0.8 < 0.3/0.2, 0.9/0.8 < 0.1/0.2 is false
    assert prompting.calibrate(scores, free).argmax(1).tolist() == [1, 1, 0]
    assert scores.argmax(1).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="do not match"):
        prompting.calibrate(scores, torch.zeros(3))


def test_span_scores_follow_squad_normalisation():
    got = span_scores(["the Royal Court", "Plymouth,", "1994", ""], ["Royal Court Theatre", "plymouth", "1995", "x"])
    # F1 by hand: P = 2/2, R = 2/3 -> 0.8; exact after normalisation -> 1; no overlap -> 0; empty vs word -> 0
    assert got["exact_match"] == pytest.approx(100 * 1 / 4)
    assert got["f1"] == pytest.approx(100 * (0.8 + 1 + 0 + 0) / 4)
    assert span_scores(["The film"], ["a film"]) == {"exact_match": 100.0, "f1": 100.0}  # articles do not count


def test_span_scores_count_repeated_words_with_multiplicity():
    # "x x y" against "x y y": shared words x (min 2, 1) = 1 and y (min 1, 2) = 1 -> P = R = 2/3
    assert span_scores(["x x y"], ["x y y"])["f1"] == pytest.approx(100 * 2 / 3)
    with pytest.raises(ValueError):
        span_scores(["x"], ["x", "y"])
    with pytest.raises(ValueError):
        span_scores([], [])
