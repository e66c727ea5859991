"""Bad input over the public API: every case raises a ValueError (or the KeyError subclass the data
catalogue documents) whose message names the argument at fault; none returns a NaN or a tensor
of a silently wrong shape. One table, one row per case: (id, call, pattern the message must match)."""

import math

import pytest
import torch

from transformer_book import (
    attention,
    checkpoints,
    decoding,
    layers,
    masks,
    metrics,
    objectives,
    positional,
    prompting,
    training,
)
from transformer_book.data import finetuning as tasks
from transformer_book.data import pad_sequences, registry
from transformer_book.embeddings import ppmi
from transformer_book.embeddings.similarity import nearest_neighbours
from transformer_book.models import (
    BERT,
    GPT,
    BERTConfig,
    Encoder,
    GPTConfig,
    Transformer,
    TransformerConfig,
    finetuning,
)
from transformer_book.tokenizers import text

pytestmark = pytest.mark.usefixtures("one_thread")

x = torch.randn(2, 5, 8)
ids = torch.tensor([[2, 5, 6, 3]])


def gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=20, context=8, d_model=8, n_heads=2, n_layers=1)).eval()


def bert():
    torch.manual_seed(0)
    return BERT(BERTConfig(20, max_len=8, d_model=8, n_heads=2, n_layers=1)).eval()


def _subword():
    from transformer_book.tokenizers.subword import SubwordTokenizer

    return SubwordTokenizer.train([f"words and more words {i}" for i in range(200)], vocab_size=40)


def translator():
    torch.manual_seed(0)
    return Transformer(
        TransformerConfig(20, 20, d_model=8, n_heads=2, d_ff=16, n_encoder_layers=1, n_decoder_layers=1, max_len=8)
    ).eval()


CASES = [
    # attention: ranks, sizes, dtypes, masks
    (
        "sdpa: rank 1 query",
        lambda: attention.scaled_dot_product_attention(torch.randn(8), x, x),
        r"query must have at least 2",
    ),
    ("sdpa: integer key", lambda: attention.scaled_dot_product_attention(x, x.long(), x), r"key must be floating"),
    ("sdpa: mixed dtypes", lambda: attention.scaled_dot_product_attention(x, x.half(), x), r"share one dtype"),
    (
        "sdpa: d_k mismatch",
        lambda: attention.scaled_dot_product_attention(x, torch.randn(2, 5, 4), x),
        r"same feature size d_k",
    ),
    (
        "sdpa: lengths mismatch",
        lambda: attention.scaled_dot_product_attention(x, x, torch.randn(2, 4, 8)),
        r"key and value must have the same length",
    ),
    (
        "sdpa: batch mismatch",
        lambda: attention.scaled_dot_product_attention(x, torch.randn(3, 5, 8), torch.randn(3, 5, 8)),
        r"batch dimensions do not broadcast",
    ),
    (
        "sdpa: float mask",
        lambda: attention.scaled_dot_product_attention(x, x, x, torch.zeros(5, 5)),
        r"mask must be boolean",
    ),
    (
        "sdpa: mask shape",
        lambda: attention.scaled_dot_product_attention(x, x, x, torch.zeros(4, 5, dtype=torch.bool)),
        r"mask of shape \(4, 5\)",
    ),
    ("mha: zero heads", lambda: attention.MultiHeadAttention(8, 0), r"n_heads must be a positive int"),
    (
        "mha: d_model not divisible",
        lambda: attention.MultiHeadAttention(8, 3),
        r"d_model=8 is not divisible by n_heads=3",
    ),
    (
        "mha: negative dropout",
        lambda: attention.MultiHeadAttention(8, 2, dropout=-0.1),
        r"dropout must lie in \[0, 1\)",
    ),
    (
        "mha: wrong feature size",
        lambda: attention.MultiHeadAttention(8, 2)(torch.randn(2, 5, 6), x, x),
        r"query must have shape \(B, length, 8\), got \(2, 5, 6\)",
    ),
    (
        "mha: rank 2 input",
        lambda: attention.MultiHeadAttention(8, 2)(torch.randn(5, 8), torch.randn(5, 8), torch.randn(5, 8)),
        r"query must have shape \(B, length, 8\), got \(5, 8\)",
    ),
    # masks
    (
        "padding_mask: float tokens",
        lambda: masks.padding_mask(torch.zeros(2, 3), 0),
        r"tokens must be a \(B, m\) integer tensor, got shape \(2, 3\), dtype torch.float32",
    ),
    ("causal_mask: zero length", lambda: masks.causal_mask(0), r"m must be a positive int"),
    # layers
    ("LayerNorm: zero width", lambda: layers.LayerNorm(0), r"d_model must be a positive int, got 0"),
    (
        "LayerNorm: wrong width",
        lambda: layers.LayerNorm(8)(torch.randn(2, 6)),
        r"expected \(\.\.\., 8\), got shape \(2, 6\)",
    ),
    (
        "FFN: negative dropout",
        lambda: layers.PositionwiseFeedForward(8, 16, dropout=-0.5),
        r"dropout must lie in \[0, 1\), got -0.5",
    ),
    (
        "FFN: unknown activation",
        lambda: layers.PositionwiseFeedForward(8, 16, activation="swishy"),
        r"activation must be one of .*got 'swishy'",
    ),
    ("EncoderLayer: zero heads", lambda: layers.EncoderLayer(8, 0, 16), r"n_heads must be a positive int, got 0"),
    # positions
    ("sinusoidal: odd width", lambda: positional.sinusoidal_encoding(4, 7), r"d_model must be an even int >= 2, got 7"),
    (
        "learned positions: too long",
        lambda: positional.LearnedPositionalEmbedding(4, 8)(torch.randn(1, 5, 8)),
        r"n=5 exceeds max_len=4",
    ),
    # models
    (
        "GPT: sequence longer than the context",
        lambda: gpt()(torch.zeros(1, 9, dtype=torch.long)),
        r"9 positions exceed the context of 8",
    ),
    (
        "GPT: id outside the vocabulary",
        lambda: gpt()(torch.tensor([[1, 20]])),
        r"ids in \[1, 20\], outside the vocabulary \[0, 20\)",
    ),
    ("GPT: float tokens", lambda: gpt()(torch.zeros(1, 3)), r"tokens must be a \(B, n\) integer tensor.*float32"),
    ("GPTConfig: zero heads", lambda: GPTConfig(vocab_size=20, n_heads=0), r"n_heads must be a positive int, got 0"),
    ("BERT: longer than max_len", lambda: bert()(torch.zeros(1, 9, dtype=torch.long)), r"9 positions exceed max_len=8"),
    ("BERT: id outside the vocabulary", lambda: bert()(torch.tensor([[2, 25, 3]])), r"outside the vocabulary"),
    ("BERT: empty batch", lambda: bert()(torch.zeros(0, 3, dtype=torch.long)), r"at least one sequence"),
    ("BERT: segment out of range", lambda: bert()(ids, torch.tensor([[0, 0, 2, 1]])), r"segments hold ids"),
    ("BERTConfig: negative dropout", lambda: BERTConfig(20, dropout=-0.1), r"dropout must lie in \[0, 1\), got -0.1"),
    (
        "Transformer: id outside the source vocabulary",
        lambda: translator()(torch.tensor([[1, 30]]), torch.tensor([[1]])),
        r"src holds ids in \[1, 30\], outside the vocabulary \[0, 20\)",
    ),
    # decoding
    ("top_p above 1", lambda: decoding.filter_top_p(torch.randn(2, 5), 1.5), r"p must lie in \(0, 1\]"),
    ("top_p zero", lambda: decoding.filter_top_p(torch.randn(2, 5), 0.0), r"p must lie in \(0, 1\]"),
    ("top_k zero", lambda: decoding.filter_top_k(torch.randn(2, 5), 0), r"k must be a positive int"),
    (
        "negative temperature",
        lambda: decoding.next_token_distribution(torch.randn(2, 5), temperature=-1.0),
        r"temperature",
    ),
    (
        "beam size zero",
        lambda: decoding.beam_search(
            gpt(), prompt=torch.zeros(1, 1, dtype=torch.long), beam_size=0, max_new_tokens=3, eos_id=0
        ),
        r"beam_size must be a positive int",
    ),
    (
        "generate beyond the context",
        lambda: decoding.generate(gpt(), prompt=torch.zeros(1, 4, dtype=torch.long), max_new_tokens=10, eos_id=None),
        r"need 13 positions, more than the model's 8",
    ),
    ("generate with no prompt", lambda: decoding.generate(gpt(), max_new_tokens=2, eos_id=None), r"needs a prompt"),
    # training
    ("TrainConfig: zero steps", lambda: training.TrainConfig(steps=0), r"steps must be a positive int, got 0"),
    (
        "TrainConfig: unknown schedule",
        lambda: training.TrainConfig(steps=5, schedule="linearish"),
        r"schedule must be one of",
    ),
    (
        "TrainConfig: negative budget",
        lambda: training.TrainConfig(steps=5, time_budget_s=-1.0),
        r"time_budget_s must be positive or None, got -1.0",
    ),
    # fine-tuning and prompting
    (
        "classifier: one class",
        lambda: finetuning.SequenceClassifier(bert(), 1),
        r"SequenceClassifier: n_classes must be an int >= 2, got 1",
    ),
    (
        "best_spans: zero length",
        lambda: finetuning.best_spans(torch.zeros(1, 4), torch.zeros(1, 4), 0),
        r"max_length must be a positive int, got 0",
    ),
    (
        "batches: zero batch size",
        lambda: tasks.FineTuningBatches([tasks.Example([2, 3], [0, 0], 1, "class")], 0),
        r"batch_size must be a positive int, got 0",
    ),
    (
        "label word of two pieces",
        lambda: prompting.label_word_ids(lambda t: [1, 2], ["great"]),
        r"'great' encodes to 2 pieces",
    ),
    (
        "cloze template without a mask",
        lambda: prompting.cloze_inputs(lambda t: [5], ["x"], "{text} .", cls_id=2, sep_id=3, mask_id=4, max_len=8),
        r"\[MASK\] once each",
    ),
    (
        "two masks in a row",
        lambda: prompting.mask_log_probs(bert(), torch.tensor([[2, 4, 4, 3]]), mask_id=4),
        r"row 0 holds 2 masks",
    ),
    # metrics and data
    ("BLEU: lengths differ", lambda: metrics.corpus_bleu(["a b"], ["a b", "c"]), r"1 hypotheses for 2 references"),
    ("span scores: empty", lambda: metrics.span_scores([], []), r"no sentences"),
    (
        "sdpa: half key with float query",
        lambda: attention.scaled_dot_product_attention(x, x.half(), x.half()),
        r"share one dtype",
    ),
    (
        "sdpa: boolean bias",
        lambda: attention.scaled_dot_product_attention(x, x, x, bias=torch.zeros(5, 5, dtype=torch.bool)),
        r"bias must be a floating-point tensor",
    ),
    (
        "mha: integer mask",
        lambda: attention.MultiHeadAttention(8, 2)(x, x, x, torch.zeros(5, 5, dtype=torch.long)),
        r"mask must be boolean",
    ),
    (
        "LayerNorm: integer input",
        lambda: layers.LayerNorm(8)(torch.zeros(2, 8, dtype=torch.long)),
        r"x must be a floating-point tensor, got dtype torch.int64",
    ),
    ("GPT: empty batch", lambda: gpt()(torch.zeros(0, 3, dtype=torch.long)), r"GPT"),
    ("BERT: half tokens", lambda: bert()(ids.half()), r"tokens must be a \(B, n\) integer tensor"),
    (
        "classifier: negative dropout",
        lambda: finetuning.SequenceClassifier(bert(), 2, dropout=-0.1),
        r"SequenceClassifier: dropout must lie in \[0, 1\), got -0.1",
    ),
    (
        "freeze more layers than exist",
        lambda: finetuning.freeze_encoder(finetuning.TokenTagger(bert(), 3), trainable_layers=2),
        r"freeze_encoder: trainable_layers must be an int in \[0, 2\), got 2",
    ),
    (
        "span extractor: int allowed mask",
        lambda: finetuning.SpanExtractor(bert())(ids, allowed=torch.ones(1, 4, dtype=torch.long)),
        r"allowed must be a bool tensor",
    ),
    (
        "save_model: unknown model",
        lambda: checkpoints.save_model("/nonexistent/x.pt", torch.nn.Linear(2, 2)),
        r"can save",
    ),
    (
        "greedy decoding beyond max_len",
        lambda: decoding.greedy_decode(translator(), torch.tensor([[5, 6, 2]]), max_new_tokens=20),
        r"max_new_tokens=20 exceeds the model's max_len=8",
    ),
    (
        "unknown corpus",
        lambda: registry.get_corpus("wikitext3"),
        r"unknown corpus 'wikitext3'; known corpora: .*wikitext2",
    ),
    # issue 22: cases that gave a silent wrong result or an unhelpful traceback
    (
        "Encoder: one cache for two layers",
        lambda: Encoder(2, 8, 2, 16)(x, caches=[attention.KVCache()]),
        r"Encoder: caches must be a list of one cache per layer \(2\), got 1 caches",
    ),
    ("Vocab.decode: negative id", lambda: text.Vocab.build(["a", "b"]).decode([-1]), r"id -1 is outside 0 \.\. 1"),
    ("Vocab.decode: id past the end", lambda: text.Vocab.build(["a", "b"]).decode([2]), r"id 2 is outside 0 \.\. 1"),
    ("Vocab.decode: float id", lambda: text.Vocab.build(["a", "b"]).decode([0.5]), r"ids must be integers, got 0\.5"),
    ("Vocab.build: a str", lambda: text.Vocab.build("a string"), r"tokens must be an iterable of tokens, got a str"),
    ("Vocab.build: ints", lambda: text.Vocab.build([1, 2]), r"tokens must be str, got int 1"),
    (
        "pad_sequences: floats",
        lambda: pad_sequences([[1.7, 2.0]]),
        r"sequence 0 must hold integer ids, got torch.float32",
    ),
    (
        "ppmi: a NaN count",
        lambda: ppmi(__import__("scipy.sparse").sparse.csr_matrix([[1.0, float("nan")], [2.0, 1.0]])),
        r"counts must be finite, got 1 NaN or inf",
    ),
    ("TrainConfig: infinite lr", lambda: training.TrainConfig(lr=math.inf), r"lr must be a finite real > 0, got inf"),
    ("TrainConfig: lr as a str", lambda: training.TrainConfig(lr="1e-3"), r"lr must be a finite real > 0, got '1e-3'"),
    (
        "TrainConfig: NaN weight decay",
        lambda: training.TrainConfig(weight_decay=math.nan),
        r"weight_decay must be a finite real >= 0, got nan",
    ),
    (
        "mha: a 2-D (B, m) padding mask with B == n",
        lambda: attention.MultiHeadAttention(8, 2)(
            torch.randn(5, 5, 8), torch.randn(5, 5, 8), torch.randn(5, 5, 8), torch.zeros(5, 5, dtype=torch.bool)
        ),
        r"2-D mask \(5, 5\) is ambiguous",
    ),
    (
        "sdpa: zero keys",
        lambda: attention.scaled_dot_product_attention(x, torch.randn(2, 0, 8), torch.randn(2, 0, 8)),
        r"no keys \(m = 0\)",
    ),
    (
        "mha: zero keys",
        lambda: attention.MultiHeadAttention(8, 2)(x, torch.randn(2, 0, 8), torch.randn(2, 0, 8)),
        r"no keys \(m = 0\)",
    ),
    (
        "sampling: NaN temperature",
        lambda: decoding.next_token_distribution(torch.randn(1, 10), temperature=math.nan),
        r"temperature must be a finite real >= 0, got nan",
    ),
    (
        "sampling: NaN logits",
        lambda: decoding.next_token_distribution(torch.tensor([[math.nan, 1.0, 2.0]]), top_p=0.9),
        r"logits hold NaN",
    ),
    (
        "Vocab: tokens alike but for their normalisation",
        lambda: text.Vocab(["caf\u00e9", "cafe\u0301"]),
        r"differ only in their Unicode normalisation",
    ),
    (
        "SubwordTokenizer.encode: a lone surrogate",
        lambda: _subword().encode("bad \ud800 text"),
        r"not valid Unicode \(surrogates not allowed at position 4",
    ),
    (
        "top-p filter: NaN logits",
        lambda: decoding.filter_top_p(torch.tensor([[math.nan, 1.0, 2.0]]), 0.9),
        r"filter_top_p: logits hold NaN",
    ),
    (
        "language_model_loss: a target outside the vocabulary",
        lambda: objectives.language_model_loss()(torch.nn.Linear(3, 5), (torch.randn(1, 2, 3), torch.tensor([[1, 7]]))),
        r"1 target id\(s\) lie outside \[0, 5\)",
    ),
    (
        "corpus_bleu: a generator",
        lambda: metrics.corpus_bleu((s for s in ["a b c"]), ["a b c"]),
        r"hypotheses must be a sequence of strings \(a list\), one per sentence, got a generator",
    ),
    # issue 41: arguments taken as something else, errors that did not name the problem
    (
        "sampling: every logit -inf",
        lambda: decoding.next_token_distribution(torch.full((2, 5), -math.inf)),
        r"-inf everywhere",
    ),
    ("sampling: a +inf logit", lambda: decoding.next_token_distribution(torch.tensor([[math.inf, 1.0]])), r"\+inf"),
    (
        "KVCache: another head size",
        lambda: _cache().update(torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)),
        r"does not continue the cached \(1, 2, 3, 4\).*head size",
    ),
    (
        "KVCache: another dtype",
        lambda: _cache().update(torch.randn(1, 2, 1, 4).double(), torch.randn(1, 2, 1, 4).double()),
        r"torch.float64 on cpu, the cached ones torch.float32",
    ),
    (
        "KVCache: k and v of other lengths",
        lambda: attention.KVCache().update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 2, 4)),
        r"must agree on \(B, h, n\)",
    ),
    (
        "nearest_neighbours: widths differ",
        lambda: nearest_neighbours(torch.randn(3).numpy(), torch.randn(4, 5).numpy(), list("abcd")),
        r"query of shape \(3,\)",
    ),
    (
        "nearest_neighbours: exclude as one str",
        lambda: nearest_neighbours(torch.randn(5).numpy(), torch.randn(4, 5).numpy(), list("abcd"), exclude="ab"),
        r"not one str",
    ),
    ("Vocab: ints", lambda: text.Vocab([1, 2]), r"tokens must be str, got 1 \(int\)"),
    ("Vocab: one str", lambda: text.Vocab("abc"), r"got one str"),
    ("label_points: labels as one str", lambda: _label("ab"), r"labels must be a sequence of strings"),
    ("label_points: NaN font size", lambda: _label(["a", "b"], fontsize=math.nan), r"fontsize must be a finite real"),
    ("label_points: NaN ring", lambda: _label(["a", "b"], radii_pt=(2.0, math.nan)), r"radii_pt must be finite"),
    (
        "translate: max_new_tokens=0",
        lambda: decoding.translate(translator(), ["a b"], _subword(), max_new_tokens=0),
        r"max_new_tokens must be a positive int, got 0",
    ),
]


def _cache():
    cache = attention.KVCache()
    cache.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    return cache


def _label(labels, **options):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer_book.plotting import label_points

    figure, ax = plt.subplots()
    try:
        ax.plot([0, 1], [0, 1], "o")
        return label_points(ax, [[0, 0], [1, 1]], labels, **options)
    finally:
        plt.close(figure)


@pytest.mark.parametrize("call, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_error(call, pattern):
    with pytest.raises((ValueError, KeyError, TypeError)) as info:
        result = call()
        bad = isinstance(result, torch.Tensor) and not torch.isfinite(result).all()
        pytest.fail(f"no error; returned {'a non-finite tensor' if bad else type(result).__name__}")
    assert info.type is not TypeError or "argument" in str(info.value), f"a bare TypeError: {info.value}"
    assert __import__("re").search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"


def test_the_suite_is_large_enough_to_cover_the_api():
    assert len(CASES) >= 50
    assert len({c[0] for c in CASES}) == len(CASES)
