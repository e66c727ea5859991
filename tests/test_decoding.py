"""Tests of transformer_book.decoding: batched greedy decoding with per-sentence EOS, and translate."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.data.batching import collate_pairs
from transformer_book.decoding import beam_search, generate, greedy_decode, translate
from transformer_book.models import Transformer, TransformerConfig
from transformer_book.objectives import label_smoothed_cross_entropy, seq2seq_loss
from transformer_book.tokenizers.subword import EOS_ID, PAD_ID, SOS_ID

pytestmark = pytest.mark.usefixtures("one_thread")

V = 16


class CopyModel(nn.Module):
    """A scripted encoder-decoder: at step t it emits source token t (one-hot logits), so a
    sentence ends exactly where its source's EOS is. Records the prefix lengths it saw."""

    def __init__(self):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))
        self.output = nn.Identity()
        self.seen = []

    def encode(self, src):
        return src, (src == PAD_ID)[:, None, :]

    def decode_step(self, *args):  # pragma: no cover - the interface's cached step, unused here
        raise AssertionError

    def decode(self, tgt_in, memory, src_mask):
        t = tgt_in.shape[1] - 1  # tokens generated so far
        self.seen.append(tgt_in.shape[1])
        nxt = memory[:, t] if t < memory.shape[1] else torch.full_like(memory[:, 0], EOS_ID)
        return F.one_hot(nxt, V).float()[:, None, :].expand(-1, tgt_in.shape[1], -1)


def test_each_sentence_stops_at_its_own_eos():
    src = torch.tensor(
        [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID], [9, 10, 11, 12]]
    )  # the model emits EOS after the source
    out = greedy_decode(CopyModel(), src, max_new_tokens=8)
    assert out.tolist() == [[5, 6, 7, EOS_ID, PAD_ID], [8, EOS_ID, PAD_ID, PAD_ID, PAD_ID], [9, 10, 11, 12, EOS_ID]]


def test_the_loop_ends_when_every_sentence_has_finished():
    model = CopyModel()
    src = torch.tensor([[5, EOS_ID, PAD_ID], [6, 7, EOS_ID]])
    out = greedy_decode(model, src, max_new_tokens=50)
    assert out.shape == (2, 3)  # 3 steps: the longer sentence's EOS
    assert model.seen == [1, 2, 3]
    # Checking only the first sentence's EOS (a classic bug) would have stopped after 2 steps.
    assert out[1].tolist() == [6, 7, EOS_ID]


def test_max_new_tokens_is_respected():
    out = greedy_decode(CopyModel(), torch.tensor([[5, 6, 7, 8, 9, EOS_ID]]), max_new_tokens=3)
    assert out.tolist() == [[5, 6, 7]]


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(0)
    config = TransformerConfig(
        V, V, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, max_len=12, dropout=0.1
    )
    return Transformer(config)


def test_batched_greedy_equals_one_sentence_at_a_time(transformer):
    batch = collate_pairs([([5, 6, 7, 8], [4]), ([9, 10], [4]), ([11, 12, 13], [4])])
    out = greedy_decode(transformer, batch.src, max_new_tokens=10)
    for row, src in zip(out, batch.src):
        alone = greedy_decode(transformer, src[src != PAD_ID][None], max_new_tokens=10)[0]
        assert row[: len(alone)].tolist() == alone.tolist()
        assert torch.all(row[len(alone) :] == PAD_ID)


def test_greedy_picks_the_argmax_of_the_models_distribution(transformer):
    src = torch.tensor([[5, 6, 7, EOS_ID]])
    out = greedy_decode(transformer, src, max_new_tokens=4)
    transformer.eval()
    with torch.no_grad():
        for t in range(out.shape[1]):
            prefix = torch.cat([torch.tensor([[SOS_ID]]), out[:, :t]], dim=1)
            assert out[0, t] == transformer(src, prefix)[0, -1].argmax()


def test_greedy_restores_training_mode_and_checks_its_input(transformer):
    transformer.train()
    greedy_decode(transformer, torch.tensor([[5, EOS_ID]]), max_new_tokens=2)
    assert transformer.training
    with pytest.raises(ValueError, match="src must be a \\(B, m\\) integer tensor"):
        greedy_decode(transformer, torch.ones(1, 3), max_new_tokens=2)
    with pytest.raises(ValueError, match="at least one sentence"):
        greedy_decode(transformer, torch.ones(0, 3, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        greedy_decode(transformer, torch.tensor([[5]]), max_new_tokens=0)
    with pytest.raises(ValueError, match="exceeds the model's max_len=12"):
        greedy_decode(transformer, torch.tensor([[5]]), max_new_tokens=13)


class LetterTokenizer:
    """Letters a..l as ids 4..15; enough to drive translate()."""

    def encode_batch(self, texts, add_eos=False):
        return [[4 + "abcdefghijkl".index(c) for c in t if c != " "] + ([EOS_ID] if add_eos else []) for t in texts]

    def decode(self, ids):
        out = []
        for i in ids.tolist():
            if i == EOS_ID:
                break
            if i > EOS_ID:
                out.append("abcdefghijkl"[i - 4] if i >= 4 else "?")
        return "".join(out)


def test_translate_keeps_the_input_order():
    sentences = ["abcdef", "a", "cde", "fghijk", "bb"]
    # The copy model translates a sentence into itself; batches are sorted by length inside.
    assert translate(CopyModel(), sentences, LetterTokenizer(), batch_size=2) == sentences


def test_translate_rejects_long_and_empty_sentences(transformer):
    with pytest.raises(ValueError, match="sentence 1 has 13 tokens with EOS, more than the model's max_len=12"):
        translate(transformer, ["abc", "abcdefghijkl"], LetterTokenizer())
    with pytest.raises(ValueError, match="sentence 2 is empty"):
        translate(transformer, ["abc", "d", "  "], LetterTokenizer())
    with pytest.raises(ValueError, match="one str"):
        translate(transformer, "abc", LetterTokenizer())
    outputs = translate(transformer, ["abcdefghijk"], LetterTokenizer())  # 12 with EOS: allowed
    assert isinstance(outputs[0], str)


@pytest.mark.parametrize("normalize", ["length", None])
def test_translate_with_a_beam_writes_each_sentences_best_hypothesis_in_input_order(transformer, normalize):
    sentences = ["abcdef", "a", "cde", "fghijk", "bb"]
    tokenizer = LetterTokenizer()
    got = translate(transformer, sentences, tokenizer, batch_size=2, beam_size=3, normalize=normalize)
    for sentence, text in zip(sentences, got):  # one sentence at a time, no padding, no sorting
        src = torch.tensor([tokenizer.encode_batch([sentence], add_eos=True)[0]])
        best = beam_search(
            transformer, src=src, beam_size=3, max_new_tokens=min(2 * src.shape[1] + 10, 12), normalize=normalize
        )[0][0][0]
        assert text == tokenizer.decode(torch.tensor(best))
    assert translate(transformer, sentences, tokenizer, beam_size=1) == translate(transformer, sentences, tokenizer)


@pytest.mark.parametrize(
    "search",
    [
        lambda model, src: beam_search(model, src=src, beam_size=3, max_new_tokens=12),
        lambda model, src: generate(model, src=src, max_new_tokens=12).tolist(),
    ],
    ids=["beam_search", "generate"],
)
def test_a_model_left_in_training_mode_is_searched_without_dropout_and_left_so(transformer, search):
    # Dropout 0.1 in the fixture: a source encoded in training mode would be noised (the encoder
    # ran before eval() was set, once), and the two calls below would then differ.
    src = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID]])
    mode = transformer.training
    try:
        transformer.eval()
        expected = search(transformer, src)
        transformer.train()
        torch.manual_seed(1)
        assert search(transformer, src) == expected
        assert transformer.training
    finally:
        transformer.train(mode)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(beam_size=0), "beam_size must be a positive int, got 0"),
        (dict(beam_size=True), "beam_size must be a positive int, got True"),
        (dict(beam_size=2, normalize="mean"), "normalize must be one of None, 'length' or 'gnmt', got 'mean'"),
    ],
)
def test_translate_rejects_a_bad_beam(transformer, kwargs, match):
    with pytest.raises(ValueError, match=match):
        translate(transformer, ["abc"], LetterTokenizer(), **kwargs)


def test_seq2seq_loss_smooths_only_in_training_mode(transformer):
    batch = collate_pairs([([5, 6, 7], [8, 9]), ([10], [11, 12, 13])])
    loss_fn = seq2seq_loss(pad_id=PAD_ID, smoothing=0.2)
    transformer.eval()
    with torch.no_grad():
        logits = transformer(batch.src, batch.tgt_in)
        loss, n_tokens = loss_fn(transformer, batch)
    assert n_tokens == 3 + 4
    plain = label_smoothed_cross_entropy(logits, batch.tgt_out, pad_id=PAD_ID, smoothing=0.0)
    torch.testing.assert_close(loss, plain)
    transformer.train()
    torch.manual_seed(1)
    smoothed, _ = loss_fn(transformer, batch)
    torch.manual_seed(1)
    expected = label_smoothed_cross_entropy(
        transformer(batch.src, batch.tgt_in), batch.tgt_out, pad_id=PAD_ID, smoothing=0.2
    )
    torch.testing.assert_close(smoothed, expected)
    with pytest.raises(ValueError, match="smoothing"):
        seq2seq_loss(pad_id=PAD_ID, smoothing=1.0)
