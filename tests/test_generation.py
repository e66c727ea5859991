"""Decoding strategies of transformer_book.decoding: truncated distributions against hand
computations, sampling frequencies against the distribution (a chi-square test), generation with
and without the cache, and beam search against greedy decoding and exhaustive search."""

import itertools
import math

import pytest
import torch
from scipy import stats

from transformer_book.decoding import (
    beam_search,
    filter_top_k,
    filter_top_p,
    generate,
    greedy_decode,
    length_penalty,
    next_token_distribution,
)
from transformer_book.models import GPT, GPTConfig, RNNSeq2Seq, RNNSeq2SeqConfig, Transformer, TransformerConfig
from transformer_book.tokenizers.subword import EOS_ID, PAD_ID, SOS_ID

pytestmark = pytest.mark.usefixtures("one_thread")

INF = float("inf")


# ----------------------------------------------------------------------------- truncated distributions


def test_top_k_keeps_the_k_highest_and_their_ties():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5, 2.0]])
    assert filter_top_k(logits, 1).tolist() == [[-INF, 3.0, -INF, -INF, -INF]]
    assert filter_top_k(logits, 2).tolist() == [[-INF, 3.0, 2.0, -INF, 2.0]]  # tied with the 2nd: kept
    assert filter_top_k(logits, 3).tolist() == [[-INF, 3.0, 2.0, -INF, 2.0]]
    assert filter_top_k(logits, 4).tolist() == [[1.0, 3.0, 2.0, -INF, 2.0]]
    assert torch.equal(filter_top_k(logits, 50), logits)


def test_top_p_keeps_the_token_that_crosses_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()[None]
    kept = lambda p: torch.isfinite(filter_top_p(logits, p))[0].tolist()
    # mass strictly above each token: 0, 0.5, 0.8, 0.95; a token stays while that is < p
    assert kept(0.3) == [True, False, False, False]  # the most probable token always stays
    assert kept(0.49) == [True, False, False, False]  # token 0 alone reaches 0.49
    assert kept(0.51) == [True, True, False, False]  # token 1 crosses 0.51
    assert kept(0.79) == [True, True, False, False]
    assert kept(0.81) == [True, True, True, False]
    assert kept(1.0) == [True, True, True, True]


def test_top_p_keeps_or_drops_ties_together():
    logits = torch.tensor([[0.4, 0.2, 0.2, 0.2]]).log()
    # tokens 1-3 are tied: each has 0.4 above it, so with p = 0.5 all three stay, with p = 0.39
    # none (sorting would put one of them first, and a cumulative sum would keep only that one)
    assert torch.isfinite(filter_top_p(logits, 0.5))[0].tolist() == [True, True, True, True]
    assert torch.isfinite(filter_top_p(logits, 0.39))[0].tolist() == [True, False, False, False]


def test_filters_work_row_by_row():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 2.0]])
    assert torch.isfinite(filter_top_k(logits, 1)).tolist() == [[False, True, False], [True, False, False]]
    assert torch.isfinite(filter_top_p(logits, 0.9)).tolist() == [[False, True, False], [True, False, True]]


def test_temperature_scales_the_logits_and_zero_is_greedy():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    for temperature in (0.5, 1.0, 2.0):
        expected = torch.softmax(logits / temperature, dim=-1)
        torch.testing.assert_close(next_token_distribution(logits, temperature=temperature), expected)
    assert next_token_distribution(logits, temperature=0).tolist() == [[1.0, 0.0, 0.0, 0.0]]
    cold = next_token_distribution(logits, temperature=0.01)
    assert cold[0, 0].item() == pytest.approx(1.0) and cold[0, 1:].max() < 1e-40  # T -> 0: the argmax
    # top-k then top-p, on the tempered logits, then renormalised: by hand
    probs = next_token_distribution(logits, temperature=1.0, top_k=3, top_p=0.7)
    p3 = torch.softmax(logits[0, :3], dim=0)  # top-3: 0.665, 0.245, 0.090
    assert p3[0] < 0.7  # so token 1 crosses 0.7
    torch.testing.assert_close(probs[0], torch.cat([p3[:2] / p3[:2].sum(), torch.zeros(2)]))


def test_sampling_frequencies_follow_the_truncated_distribution():
    logits = torch.tensor([[1.2, 0.9, 0.5, 0.1, -0.4, -1.0]]).repeat(4000, 1)
    probs = next_token_distribution(logits[:1], temperature=0.8, top_k=5, top_p=0.9)[0]
    draws = torch.multinomial(probs.repeat(5, 1), 4000, replacement=True, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(draws.flatten(), minlength=6).double()
    support = probs > 0
    assert counts[~support].sum() == 0  # filtered tokens are never drawn
    expected = probs[support].double() / probs[support].double().sum() * counts.sum()
    assert stats.chisquare(counts[support], expected).pvalue > 0.001
    # the test has power: the same tokens at temperature 1 instead of 0.8 are rejected
    untempered = torch.softmax(logits[0], dim=0)[support].double()
    assert stats.chisquare(counts[support], untempered / untempered.sum() * counts.sum()).pvalue < 1e-6


def test_filter_errors_name_the_argument():
    logits = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="k must be a positive int"):
        filter_top_k(logits, 0)
    for p in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"p must lie in \(0, 1\]"):
            filter_top_p(logits, p)
    with pytest.raises(ValueError, match="temperature must be a finite real >= 0"):
        next_token_distribution(logits, temperature=-1.0)


# ----------------------------------------------------------------------------- models

V = 12


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(V, V, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=2, max_len=16)
    )
    with torch.no_grad():  # sharper, more varied output distributions than at initialisation
        model.output.weight.mul_(6.0)
    return model.eval()


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(1)
    model = GPT(GPTConfig(V, context=24, d_model=16, n_heads=2, n_layers=2))
    with torch.no_grad():
        model.embedding.weight.mul_(30.0)
    return model.eval()


SRC = torch.tensor([[4, 5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID, PAD_ID], [10, 11, 4, EOS_ID, PAD_ID]])


def test_generate_greedy_equals_greedy_decode_with_and_without_cache(transformer):
    reference = greedy_decode(transformer, SRC, max_new_tokens=10)
    for use_cache in (True, False):
        assert torch.equal(generate(transformer, src=SRC, max_new_tokens=10, use_cache=use_cache), reference)


@pytest.mark.parametrize("attention", [None, "bahdanau"])
def test_generate_works_for_the_recurrent_models(attention):
    torch.manual_seed(2)
    model = RNNSeq2Seq(RNNSeq2SeqConfig(V, V, d_embedding=6, d_hidden=8, attention=attention)).eval()
    reference = greedy_decode(model, SRC, max_new_tokens=8)
    assert torch.equal(generate(model, src=SRC, max_new_tokens=8), reference)
    assert torch.equal(generate(model, src=SRC, max_new_tokens=8, use_cache=False), reference)


def test_sampling_with_the_cache_draws_what_recomputation_draws(transformer, gpt):
    for model, inputs in [(transformer, dict(src=SRC)), (gpt, dict(prompt=torch.tensor([[3, 4], [5, 6]])))]:
        a = generate(
            model,
            **inputs,
            max_new_tokens=12,
            temperature=1.0,
            top_k=8,
            top_p=0.95,
            generator=torch.Generator().manual_seed(7),
        )
        b = generate(
            model,
            **inputs,
            max_new_tokens=12,
            temperature=1.0,
            top_k=8,
            top_p=0.95,
            generator=torch.Generator().manual_seed(7),
            use_cache=False,
        )
        assert torch.equal(a, b)


def test_a_cold_temperature_samples_the_greedy_sequence(transformer):
    greedy = generate(transformer, src=SRC, max_new_tokens=10)
    cold = generate(
        transformer, src=SRC, max_new_tokens=10, temperature=1e-4, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(cold, greedy)


def test_gpt_generation_matches_its_forward_pass(gpt):
    prompt = torch.tensor([[3, 4, 5]])
    out = generate(gpt, prompt=prompt, max_new_tokens=6, eos_id=None)
    sequence = prompt
    for t in range(6):  # greedy by hand: argmax of the last position, appended
        nxt = gpt(sequence)[:, -1].argmax(-1)
        assert nxt.item() == out[0, t].item()
        sequence = torch.cat([sequence, nxt[:, None]], dim=1)
    with pytest.raises(ValueError, match="more than the model's 24"):
        generate(gpt, prompt=prompt, max_new_tokens=23)
    with pytest.raises(ValueError, match="needs a prompt"):
        generate(gpt, src=prompt, max_new_tokens=2)
    with pytest.raises(ValueError, match="needs src"):
        generate(TransformerStub(), prompt=prompt, max_new_tokens=2)


class TransformerStub(torch.nn.Module):
    """The encoder-decoder interface (contracts.EncoderDecoder), never run."""

    def encode(self, src):  # pragma: no cover - never reached
        raise AssertionError

    decode = decode_step = output = encode


def test_decoding_dispatches_on_the_declared_interfaces():
    """An encoder alone is no encoder-decoder: BERT has encode() but no decoder, and used to be
    taken for one (hasattr(model, "encode")); a model without decode_step cannot use the cache."""
    from transformer_book.contracts import EncoderDecoder, LanguageModel, conforms
    from transformer_book.models import BERT, BERTConfig

    bert = BERT(BERTConfig(vocab_size=20, max_len=16, d_model=8, n_heads=2, d_ff=16, n_layers=1))
    assert not conforms(bert, EncoderDecoder) and conforms(TransformerStub(), EncoderDecoder)
    with pytest.raises(TypeError, match="neither an encoder-decoder"):
        generate(bert, src=torch.tensor([[3, 4]]), max_new_tokens=2)
    assert conforms(ScriptedLM(), LanguageModel)
    with pytest.raises(TypeError, match="with decode_step for use_cache=True"):
        generate(ScriptedLM(), prompt=torch.tensor([[2]]), max_new_tokens=2, use_cache=True)


# ----------------------------------------------------------------------------- beam search


def _sequence_log_prob(model, src, tokens):
    """Sum of log P(y_t | y_<t, x) by teacher forcing."""
    tgt_in = torch.tensor([[SOS_ID] + tokens[:-1]])
    with torch.no_grad():
        log_p = torch.log_softmax(model(src, tgt_in)[0].double(), dim=-1)
    return sum(log_p[t, tok].item() for t, tok in enumerate(tokens))


def test_beam_of_one_is_greedy(transformer):
    greedy = greedy_decode(transformer, SRC, max_new_tokens=10)
    for b, hyps in enumerate(beam_search(transformer, src=SRC, beam_size=1, max_new_tokens=10)):
        row = greedy[b].tolist()
        row = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
        assert hyps[0][0] == row


def test_a_beam_as_wide_as_all_sequences_is_exhaustive_search():
    torch.manual_seed(3)
    vocab, length = 5, 3  # tokens 0..4, EOS = 2
    model = Transformer(
        TransformerConfig(
            vocab, vocab, d_model=8, n_heads=2, d_ff=16, n_encoder_layers=1, n_decoder_layers=1, max_len=8
        )
    ).eval()
    with torch.no_grad():
        model.output.weight.mul_(4.0)
    src = torch.tensor([[3, 4, EOS_ID]])
    candidates = []  # every sequence beam search can return
    for n in range(1, length + 1):
        for tokens in itertools.product(range(vocab), repeat=n):
            if EOS_ID in tokens[:-1] or (n < length and tokens[-1] != EOS_ID):
                continue
            candidates.append((list(tokens), _sequence_log_prob(model, src, list(tokens))))
    best_tokens, best_score = max(candidates, key=lambda c: c[1])
    (hyps,) = beam_search(model, src=src, beam_size=len(candidates), max_new_tokens=length)
    assert len(hyps) == len(candidates)  # nothing was pruned
    assert hyps[0][0] == best_tokens and hyps[0][1] == pytest.approx(best_score, abs=1e-5)
    greedy = greedy_decode(model, src, max_new_tokens=length)[0].tolist()
    assert (
        _sequence_log_prob(model, src, greedy[: greedy.index(EOS_ID) + 1] if EOS_ID in greedy else greedy)
        <= best_score + 1e-9
    )


def test_beam_search_batches_equal_one_element_at_a_time_and_scores_are_right(transformer):
    for normalize in (None, "length", "gnmt"):
        together = beam_search(transformer, src=SRC, beam_size=3, max_new_tokens=10, normalize=normalize)
        for b in range(SRC.shape[0]):
            src = SRC[b : b + 1, : int((SRC[b] != PAD_ID).sum())]
            alone = beam_search(transformer, src=src, beam_size=3, max_new_tokens=10, normalize=normalize)[0]
            assert [h[0] for h in alone] == [h[0] for h in together[b]]
            for tokens, score in alone:
                total = _sequence_log_prob(transformer, src, tokens)
                expected = {
                    None: total,
                    "length": total / len(tokens),
                    "gnmt": total / length_penalty(len(tokens), 0.6),
                }[normalize]
                assert score == pytest.approx(expected, abs=1e-4)
            assert [s for _, s in alone] == sorted((s for _, s in alone), reverse=True)


def test_beam_search_with_and_without_cache_and_for_gpt(transformer, gpt):
    a = beam_search(transformer, src=SRC, beam_size=4, max_new_tokens=8)
    b = beam_search(transformer, src=SRC, beam_size=4, max_new_tokens=8, use_cache=False)
    assert [[h[0] for h in x] for x in a] == [[h[0] for h in x] for x in b]
    (hyps,) = beam_search(gpt, prompt=torch.tensor([[3, 4, 5]]), beam_size=2, max_new_tokens=5)
    assert 1 <= len(hyps) and all(len(tokens) <= 5 for tokens, _ in hyps)


def test_length_penalty_and_beam_errors(transformer):
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(10, 0.0) == 1.0
    assert length_penalty(10, 1.0) == pytest.approx(15 / 6)
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        beam_search(transformer, src=SRC, beam_size=0, max_new_tokens=3)
    with pytest.raises(ValueError, match="normalize must be"):
        beam_search(transformer, src=SRC, beam_size=2, max_new_tokens=3, normalize="mean")
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        beam_search(transformer, src=SRC, beam_size=2, max_new_tokens=0)
    assert not math.isnan(beam_search(transformer, src=SRC, beam_size=2, max_new_tokens=3)[0][0][1])


class ScriptedLM(torch.nn.Module):
    """A decoder-only stand-in whose row b writes token 5 until it has written prompt[b, 0] - 1
    tokens, then EOS: rows that finish at different, known steps."""

    def forward(self, tokens):
        batch, n = tokens.shape
        logits = torch.full((batch, n, 8), -10.0)
        for b in range(batch):
            written = n - 1  # the prompt is one token long
            logits[b, -1, EOS_ID if written + 1 == int(tokens[b, 0]) else 5] = 10.0
        return logits


def test_rows_of_a_batch_finish_at_their_own_eos():
    prompt = torch.tensor([[1], [3], [6]])  # finish after 1, 3 and 6 tokens
    out = generate(ScriptedLM(), prompt=prompt, max_new_tokens=10, use_cache=False, pad_id=PAD_ID)
    assert out.tolist() == [
        [EOS_ID] + [PAD_ID] * 5,  # PAD after its EOS, never a 5
        [5, 5, EOS_ID] + [PAD_ID] * 3,
        [5, 5, 5, 5, 5, EOS_ID],
    ]  # the batch stops when the last row ends
    for b in range(3):  # each row as if it were alone
        alone = generate(ScriptedLM(), prompt=prompt[b : b + 1], max_new_tokens=10, use_cache=False)[0].tolist()
        assert alone == [t for t in out[b].tolist() if t != PAD_ID]


def test_top_p_sampling_checks_the_logits_for_nan_once(monkeypatch):
    """One pass over the logits for NaN on the top-p path (filter_top_p's), not two."""
    from transformer_book import decoding

    calls = []
    real_isnan = torch.isnan
    monkeypatch.setattr(torch, "isnan", lambda t: calls.append(1) or real_isnan(t))
    probs = decoding.next_token_distribution(torch.randn(2, 7), temperature=0.8, top_p=0.9)
    assert len(calls) == 1 and torch.allclose(probs.sum(-1), torch.ones(2))
    decoding.next_token_distribution(torch.randn(2, 7), temperature=0.8)  # no top-p: checked here
    assert len(calls) == 2
    with pytest.raises(ValueError, match="logits hold NaN"):
        decoding.next_token_distribution(torch.tensor([[0.0, float("nan")]]), temperature=1.0, top_p=0.5)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(temperature=-1.0), "generate: temperature must be a finite real >= 0, got -1.0"),
        (dict(temperature=1.0, top_k=0), "generate: top_k must be a positive int, got 0"),
        (dict(temperature=0.0, top_k=0), "generate: top_k must be a positive int, got 0"),  # refused, not ignored
        (dict(temperature=0.0, top_p=1.5), r"generate: top_p must lie in \(0, 1\], got 1.5"),
    ],
)
def test_generate_checks_its_sampling_settings_before_it_runs_the_model(settings, message):
    class Untouchable(ScriptedLM):
        def forward(self, tokens):
            raise AssertionError("the model ran before the settings were checked")

    with pytest.raises(ValueError, match=message):
        generate(Untouchable(), prompt=torch.tensor([[3]]), max_new_tokens=4, use_cache=False, **settings)


def test_generate_checks_the_sampling_settings_once_not_at_every_step(monkeypatch):
    """generate is the boundary: its steps draw from the distribution without checking the
    settings again (the logits, new at each step, are still checked)."""
    from transformer_book import checks

    seen = []
    real = checks.finite_real
    monkeypatch.setattr(
        checks, "finite_real", lambda where, name, *a, **k: seen.append((where, name)) or real(where, name, *a, **k)
    )
    out = generate(
        ScriptedLM(),
        prompt=torch.tensor([[7]]),
        max_new_tokens=5,
        use_cache=False,
        temperature=0.5,
        top_k=3,
        generator=torch.Generator().manual_seed(0),
    )
    assert out.shape == (1, 5) and seen == [("generate", "temperature")]
    seen.clear()
    next_token_distribution(torch.zeros(2, 4), temperature=0.5)
    assert seen == [("next_token_distribution", "temperature")]


def test_next_token_distribution_names_its_own_arguments():
    with pytest.raises(ValueError, match="next_token_distribution: top_k must be a positive int, got 0"):
        next_token_distribution(torch.zeros(1, 4), top_k=0)
    with pytest.raises(ValueError, match=r"next_token_distribution: top_p must lie in \(0, 1\], got 0"):
        next_token_distribution(torch.zeros(1, 4), temperature=0, top_p=0)


@pytest.mark.parametrize("search, options", [(generate, {}), (beam_search, {"beam_size": 2})])
def test_a_bad_prompt_is_named_by_the_function_called(search, options):
    name = search.__name__
    with pytest.raises(ValueError, match=rf"{name}: prompt must be a \(B, m\) integer tensor, got shape \(1, 2\)"):
        search(ScriptedLM(), prompt=torch.zeros(1, 2), max_new_tokens=2, use_cache=False, **options)
    with pytest.raises(ValueError, match=f"{name}: a decoder-only model needs a prompt"):
        search(ScriptedLM(), src=torch.ones(1, 2, dtype=torch.long), max_new_tokens=2, use_cache=False, **options)


# ----------------------------------------------------------------------------- a shrinking beam

A, B, C = 4, 5, 6  # three words; EOS_ID = 2


class TableLM(torch.nn.Module):
    """A decoder-only stand-in whose next-token distribution is a fixed table keyed on the tokens
    written after the one-token prompt; unlisted tokens get probability 0 (logit -inf), unlisted
    prefixes end at once. Logits are log-probabilities, so the scores can be worked out by hand."""

    TABLE = {
        (): {A: 0.5, EOS_ID: 0.4, B: 0.1},
        (A,): {C: 0.75, EOS_ID: 0.25},
        (B,): {EOS_ID: 0.6, C: 0.4},
        (A, C): {EOS_ID: 0.9, C: 0.1},
    }

    def forward(self, tokens):
        batch, n = tokens.shape
        logits = torch.full((batch, n, 7), -INF)
        for b in range(batch):
            for token, p in self.TABLE.get(tuple(tokens[b, 1:].tolist()), {EOS_ID: 1.0}).items():
                logits[b, -1, token] = math.log(p)
        return logits


def test_fixed_and_shrinking_beams_by_hand():
    """k = 2 on TableLM, summed log-probabilities (ln 0.4 = -0.916, ...).

    Step 1, candidates: a 0.5, EOS 0.4, b 0.1.
      fixed:  a live; EOS finished (takes no slot); b live.        beam {a, b}, finished {EOS}
      shrink: the best 2 are a (live) and EOS (finished).          beam {a},    finished {EOS}
    Step 2, fixed, candidates: a c 0.375, a EOS 0.125, b EOS 0.06, b c 0.04.
      a c live; a EOS and b EOS finished; b c live, the second live one. Three finished >= 2: done,
      the live a c and b c are dropped. Result: EOS 0.4, a EOS 0.125, b EOS 0.06 (three hypotheses).
    Step 2, shrink, one slot: a c 0.375 stays live (a EOS 0.125 is not taken).
    Step 3, shrink, one slot: a c EOS 0.375 * 0.9 = 0.3375 finishes. Result: EOS 0.4, a c EOS 0.3375.
    The shrinking beam, with one place left after EOS finished, goes on to a longer and more
    probable second hypothesis than fixed k finds; by the mean per token (normalize="length") it
    ranks first: ln(0.3375) / 3 = -0.362 against ln(0.4) / 1 = -0.916.
    """
    prompt = torch.tensor([[SOS_ID]])
    fixed = beam_search(TableLM(), prompt=prompt, beam_size=2, max_new_tokens=6, use_cache=False)[0]
    shrunk = beam_search(TableLM(), prompt=prompt, beam_size=2, max_new_tokens=6, use_cache=False, shrink=True)[0]
    assert [tokens for tokens, _ in fixed] == [[EOS_ID], [A, EOS_ID], [B, EOS_ID]]
    assert [score for _, score in fixed] == pytest.approx([math.log(0.4), math.log(0.125), math.log(0.06)], abs=1e-6)
    assert [tokens for tokens, _ in shrunk] == [[EOS_ID], [A, C, EOS_ID]]
    assert [score for _, score in shrunk] == pytest.approx([math.log(0.4), math.log(0.3375)], abs=1e-6)
    fixed_mean = beam_search(
        TableLM(), prompt=prompt, beam_size=2, max_new_tokens=6, use_cache=False, normalize="length"
    )[0]
    shrunk_mean = beam_search(
        TableLM(), prompt=prompt, beam_size=2, max_new_tokens=6, use_cache=False, normalize="length", shrink=True
    )[0]
    assert fixed_mean[0] == ([EOS_ID], pytest.approx(math.log(0.4), abs=1e-6))
    assert shrunk_mean[0] == ([A, C, EOS_ID], pytest.approx(math.log(0.3375) / 3, abs=1e-6))
    # k = 3, shrink: step 1 takes a, EOS, b (two live); step 2 two slots: a c 0.375 (live), a EOS
    # 0.125 (finished); step 3 one slot: a c EOS. Exactly three.
    (three,) = beam_search(TableLM(), prompt=prompt, beam_size=3, max_new_tokens=6, use_cache=False, shrink=True)
    assert three == [
        ([EOS_ID], pytest.approx(math.log(0.4), abs=1e-6)),
        ([A, C, EOS_ID], pytest.approx(math.log(0.3375), abs=1e-6)),
        ([A, EOS_ID], pytest.approx(math.log(0.125), abs=1e-6)),
    ]
    # cut at two tokens, shrink: the live a c counts as finished in the last step's one slot
    (cut,) = beam_search(TableLM(), prompt=prompt, beam_size=2, max_new_tokens=2, use_cache=False, shrink=True)
    assert cut == [
        ([EOS_ID], pytest.approx(math.log(0.4), abs=1e-6)),
        ([A, C], pytest.approx(math.log(0.375), abs=1e-6)),
    ]


def test_a_shrinking_beam_of_one_is_greedy(transformer):
    greedy = greedy_decode(transformer, SRC, max_new_tokens=10)
    fixed = beam_search(transformer, src=SRC, beam_size=1, max_new_tokens=10)
    for b, hyps in enumerate(beam_search(transformer, src=SRC, beam_size=1, max_new_tokens=10, shrink=True)):
        row = greedy[b].tolist()
        assert len(hyps) == 1 and hyps == fixed[b]  # one slot: the two variants agree
        assert hyps[0][0] == (row[: row.index(EOS_ID) + 1] if EOS_ID in row else row)
    (hyps,) = beam_search(
        TableLM(), prompt=torch.tensor([[SOS_ID]]), beam_size=1, max_new_tokens=6, use_cache=False, shrink=True
    )
    assert hyps == [([A, C, EOS_ID], pytest.approx(math.log(0.3375), abs=1e-6))]  # greedy: a, c, EOS


def test_a_shrinking_beam_finishes_exactly_k_hypotheses(transformer):
    """k - f places after f have finished: never more than k, and exactly k, whether all of them
    end in EOS or the length limit cuts some (they then count as finished in the last step's places)."""
    ended, cut = 0, 0
    for k in (1, 2, 3, 5):
        for max_new_tokens in (3, 16):
            for hyps in beam_search(transformer, src=SRC, beam_size=k, max_new_tokens=max_new_tokens, shrink=True):
                assert len(hyps) == k
                assert all(tokens[-1] == EOS_ID or len(tokens) == max_new_tokens for tokens, _ in hyps)
                if all(tokens[-1] == EOS_ID for tokens, _ in hyps):
                    ended += 1
                else:
                    cut += 1
    assert ended > 0 and cut > 0  # both cases were exercised


def test_a_shrinking_beam_batches_and_caches_like_one_element_at_a_time(transformer, gpt):
    for normalize in (None, "length"):
        together = beam_search(transformer, src=SRC, beam_size=3, max_new_tokens=10, normalize=normalize, shrink=True)
        recomputed = beam_search(
            transformer, src=SRC, beam_size=3, max_new_tokens=10, normalize=normalize, shrink=True, use_cache=False
        )
        assert [[h[0] for h in x] for x in together] == [[h[0] for h in x] for x in recomputed]
        for b in range(SRC.shape[0]):
            src = SRC[b : b + 1, : int((SRC[b] != PAD_ID).sum())]
            alone = beam_search(transformer, src=src, beam_size=3, max_new_tokens=10, normalize=normalize, shrink=True)[
                0
            ]
            assert [h[0] for h in alone] == [h[0] for h in together[b]]
            assert [h[1] for h in alone] == pytest.approx([h[1] for h in together[b]], abs=1e-4)
    prompt = torch.tensor([[3, 4, 5], [6, 7, 8]])
    cached = beam_search(gpt, prompt=prompt, beam_size=3, max_new_tokens=6, shrink=True)
    recomputed = beam_search(gpt, prompt=prompt, beam_size=3, max_new_tokens=6, shrink=True, use_cache=False)
    assert [[h[0] for h in x] for x in cached] == [[h[0] for h in x] for x in recomputed]
    assert all(len(hyps) == 3 for hyps in cached)


@pytest.mark.parametrize("shrink", [1, 0, "yes", None])
def test_shrink_must_be_a_bool(transformer, shrink):
    with pytest.raises(ValueError, match="beam_search: shrink must be a bool"):
        beam_search(transformer, src=SRC, beam_size=2, max_new_tokens=3, shrink=shrink)
