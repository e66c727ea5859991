"""One suite that every model the book trains must pass (``checkpoints.SAVABLE_MODELS``): its
output has the documented shape; two builds from one seed are identical and an eval-mode model
answers the same twice; a saved model loads with the same outputs; a decoder's output at a
position does not depend on later tokens; padding the input does not change the outputs at the
real positions; and where a model generates with a cache, the cached steps equal one full pass.
A new model joins by adding a :class:`Spec` (and the registry test fails until it does). A model
that names its positions (``position=``) passes the suite with every encoding it takes, as
``"<model>/<position>"`` (and a test fails until every one is there)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from transformer_book import checkpoints
from transformer_book.models import BERT, GPT, BERTConfig, GPTConfig, Transformer, TransformerConfig
from transformer_book.models.elmo import BiLM, BiLMConfig
from transformer_book.models.modern import ModernGPT, ModernGPTConfig
from transformer_book.models.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from transformer_book.positional import POSITIONS

pytestmark = pytest.mark.usefixtures("one_thread")

V, PAD = 23, 0


def _tokens(*shape: int, seed: int = 0) -> torch.Tensor:
    """Token ids in 1..V-1 (0 is padding)."""
    return torch.randint(1, V, shape, generator=torch.Generator().manual_seed(seed))


@dataclass(frozen=True)
class Spec:
    """How the suite drives one model: ``build()`` a small one (dropout 0), ``inputs()`` a batch,
    ``run(model, *inputs)`` its output tensor ``(B, n, ...)``, and which properties apply."""

    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple[torch.Tensor, ...]]
    run: Callable[..., torch.Tensor]
    shape: tuple[int, ...]
    causal_input: int | None = None  # the input whose later tokens must not change earlier outputs
    changed_at: int = -1  # the token the causal test changes: the last output position reads it
    padded_input: int | None = None  # the input that trailing padding must not change
    cached: Callable[..., torch.Tensor] | None = None  # the output computed step by step with a cache


def _lm_cached(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits, cache = model.decode_step(tokens[:, :4])  # the prompt, then one at a time
    steps = [logits]
    for t in range(4, tokens.shape[1]):
        logits, cache = model.decode_step(tokens[:, t : t + 1], cache)
        steps.append(logits)
    return torch.cat(steps, dim=1)


def _seq2seq_cached(model: nn.Module, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    memory, src_mask = model.encode(src)
    states, carry = model.decode_step(tgt_in[:, :3], memory, src_mask)
    steps = [states]
    for t in range(3, tgt_in.shape[1]):
        states, carry = model.decode_step(tgt_in[:, t : t + 1], memory, src_mask, carry)
        steps.append(states)
    return model.output(torch.cat(steps, dim=1))


def _gpt(**changes) -> GPT:
    return GPT(GPTConfig(V, context=16, d_model=16, n_heads=2, n_layers=2, dropout=0.0, **changes))


def _modern(**changes) -> ModernGPT:
    return ModernGPT(ModernGPTConfig(V, context=16, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, **changes))


def _transformer(**changes) -> Transformer:
    return Transformer(
        TransformerConfig(
            V,
            V,
            d_model=16,
            n_heads=2,
            d_ff=32,
            n_encoder_layers=1,
            n_decoder_layers=2,
            dropout=0.0,
            max_len=16,
            **changes,
        )
    )


def _bert(**changes) -> BERT:
    return BERT(BERTConfig(V, max_len=16, d_model=16, n_heads=2, n_layers=2, dropout=0.0, **changes))


SPECS: dict[str, Spec] = {
    "GPT": Spec(
        build=_gpt,
        inputs=lambda: (_tokens(2, 9),),
        run=lambda m, x: m(x),
        shape=(2, 9, V),
        causal_input=0,
        cached=_lm_cached,
    ),
    "ModernGPT": Spec(
        build=_modern,
        inputs=lambda: (_tokens(2, 9),),
        run=lambda m, x: m(x),
        shape=(2, 9, V),
        causal_input=0,
        cached=_lm_cached,
    ),
    "Transformer": Spec(
        build=_transformer,
        inputs=lambda: (_tokens(2, 7, seed=1), _tokens(2, 8, seed=2)),
        run=lambda m, s, t: m(s, t),
        shape=(2, 8, V),
        causal_input=1,
        padded_input=0,
        cached=_seq2seq_cached,
    ),
    "RNNSeq2Seq": Spec(
        build=lambda: RNNSeq2Seq(RNNSeq2SeqConfig(V, V, d_embedding=8, d_hidden=16, dropout=0.0)),
        inputs=lambda: (_tokens(2, 7, seed=1), _tokens(2, 8, seed=2)),
        run=lambda m, s, t: m(s, t),
        shape=(2, 8, V),
        causal_input=1,
        padded_input=0,
        cached=_seq2seq_cached,
    ),
    "BERT": Spec(
        build=_bert, inputs=lambda: (_tokens(2, 9),), run=lambda m, x: m(x).mlm_logits, shape=(2, 9, V), padded_input=0
    ),
    "BiLM": Spec(
        build=lambda: BiLM(BiLMConfig(vocab_size=V, d_embed=8, d_hidden=8, n_layers=1, cutoffs=(), dropout=0.0)),
        inputs=lambda: (_tokens(2, 9),),
        run=lambda m, x: m.log_probs(x),
        shape=(2, 8, V),
        causal_input=0,
        changed_at=-2,
    ),  # the forward LM: entry t is token t + 1's distribution given 0..t
}

OTHER_POSITIONS = {
    "GPT": ("sinusoidal", "alibi"),
    "BERT": ("sinusoidal", "alibi"),
    "Transformer": ("learned",),
    "ModernGPT": ("learned", "sinusoidal"),
}
"""The encodings each model takes besides its default one: each passes the suite too."""

SPECS.update(
    {
        f"{name}/{position}": dataclasses.replace(
            SPECS[name], build=functools.partial(SPECS[name].build, position=position)
        )
        for name, positions in OTHER_POSITIONS.items()
        for position in positions
    }
)


def _built(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return SPECS[name].build().eval()


def _output(name: str, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    with torch.no_grad():
        return SPECS[name].run(model, *inputs)


def test_every_savable_model_is_in_the_suite() -> None:
    assert {name.split("/")[0] for name in SPECS} == set(checkpoints.SAVABLE_MODELS)


@pytest.mark.parametrize("name", sorted(OTHER_POSITIONS))
def test_every_position_a_model_takes_is_in_the_suite(name: str) -> None:
    default = SPECS[name].build().config.position
    for position in POSITIONS:
        try:
            SPECS[name].build(position=position)
        except ValueError as err:  # refused by the factory, naming the position
            assert str(err).startswith(f"{name}: position {position!r}") and "does not take" in str(err)
            continue
        assert position == default or f"{name}/{position}" in SPECS, f"{name} takes {position!r}: add it to the suite"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_output_has_the_documented_shape_and_is_finite(name: str) -> None:
    out = _output(name, _built(name), SPECS[name].inputs())
    assert tuple(out.shape) == SPECS[name].shape and torch.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_one_seed_builds_one_model_and_eval_answers_the_same_twice(name: str) -> None:
    a, b, other = _built(name, 0), _built(name, 0), _built(name, 1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(), other.state_dict().values()))
    inputs = SPECS[name].inputs()
    assert torch.equal(_output(name, a, inputs), _output(name, a, inputs))
    assert torch.equal(_output(name, a, inputs), _output(name, b, inputs))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_saved_model_loads_with_the_same_outputs(name: str, tmp_path) -> None:
    model, inputs = _built(name), SPECS[name].inputs()
    path = checkpoints.save_model(tmp_path / f"{name}.pt", model, metadata={"suite": True})
    loaded, tokenizer, metadata = checkpoints.load_model(path)
    assert type(loaded) is type(model) and loaded.config == model.config and metadata == {"suite": True}
    torch.testing.assert_close(_output(name, loaded, inputs), _output(name, model, inputs), rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.causal_input is not None))
def test_an_output_does_not_depend_on_later_tokens(name: str) -> None:
    spec, model = SPECS[name], _built(name)
    inputs = list(spec.inputs())
    changed = inputs[spec.causal_input].clone()
    at = spec.changed_at
    changed[:, at] = changed[:, at] % (V - 1) + 1  # another real token there
    before = _output(name, model, tuple(inputs))
    inputs[spec.causal_input] = changed
    after = _output(name, model, tuple(inputs))
    torch.testing.assert_close(after[:, :-1], before[:, :-1], rtol=0, atol=1e-6)
    assert not torch.equal(after[:, -1], before[:, -1])  # the last position does see it


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.padded_input is not None))
def test_trailing_padding_changes_no_real_position(name: str) -> None:
    spec, model = SPECS[name], _built(name)
    inputs = list(spec.inputs())
    before = _output(name, model, tuple(inputs))
    x = inputs[spec.padded_input]
    inputs[spec.padded_input] = torch.cat([x, torch.full((x.shape[0], 3), PAD)], dim=1)
    after = _output(name, model, tuple(inputs))
    if spec.padded_input == 0 and len(inputs) == 1:  # the padded input is also the output's axis
        after = after[:, : x.shape[1]]
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.cached is not None))
def test_cached_steps_equal_one_full_pass(name: str) -> None:
    spec, model = SPECS[name], _built(name)
    inputs = spec.inputs()
    with torch.no_grad():
        stepped = spec.cached(model, *inputs)
    torch.testing.assert_close(stepped, _output(name, model, inputs), rtol=1e-5, atol=1e-5)
