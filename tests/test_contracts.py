"""The package's floors: the contracts data and models share, the argument checks every module
uses, and the import rules of the design (no private name crosses modules, nothing at or below
the models imports the data, the training loop knows no model)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import transformer_book
from transformer_book import checks, contracts
from transformer_book.data import char_corpus

PACKAGE = Path(transformer_book.__file__).parent


def _modules() -> dict[str, ast.Module]:
    """Every module of the package, by dotted name, parsed."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text())
    return found


def _imports(tree: ast.Module) -> list[tuple[str, str]]:
    """``(module, name)`` for every ``from module import name`` of the package in ``tree``."""
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("transformer_book")
        for alias in node.names
    ]


def test_no_module_imports_a_private_name_of_another():
    offenders = [
        f"{module}: from {source} import {name}"
        for module, tree in _modules().items()
        for source, name in _imports(tree)
        if name.startswith("_") and not name.endswith("__") and source != module
    ]
    assert offenders == []


def test_nothing_at_or_below_the_models_imports_the_data():
    below = (
        "transformer_book.models",
        "transformer_book.layers",
        "transformer_book.attention",
        "transformer_book.masks",
        "transformer_book.positional",
        "transformer_book.contracts",
        "transformer_book.checks",
        "transformer_book.atomic",
        "transformer_book.checkpoints",
        "transformer_book.tokenizers.text",
        "transformer_book.tokenizers.subword",
        "transformer_book.tokenizers.wordpiece",
        "transformer_book.tokenizers.bytebpe",
        "transformer_book.tiled_attention",
        "transformer_book.grouped_attention",
        "transformer_book.modern_layers",
        "transformer_book.lora",
        "transformer_book.decoding",
        "transformer_book.objectives",
        "transformer_book.schedules",
    )
    offenders = [
        f"{module} imports {source}"
        for module, tree in _modules().items()
        if module.startswith(below)
        for source, _ in _imports(tree)
        if source.startswith("transformer_book.data") or (source == "transformer_book" and _ == "data")
    ]
    assert offenders == []


def test_the_training_loop_imports_no_model_and_no_tokenizer():
    sources = {source for source, _ in _imports(_modules()["transformer_book.training"])}
    assert not {
        s
        for s in sources
        if s.startswith("transformer_book.models")
        or s in ("transformer_book.tokenizers.subword", "transformer_book.tokenizers.wordpiece")
    }


def test_the_models_declare_the_interfaces_decoding_dispatches_on():
    from transformer_book.models import (
        BERT,
        GPT,
        BERTConfig,
        GPTConfig,
        RNNSeq2Seq,
        RNNSeq2SeqConfig,
        Transformer,
        TransformerConfig,
    )
    from transformer_book.tokenizers.subword import SubwordTokenizer
    from transformer_book.tokenizers.wordpiece import WordPieceTokenizer

    transformer = Transformer(
        TransformerConfig(20, 20, d_model=8, n_heads=2, d_ff=16, n_encoder_layers=1, n_decoder_layers=1, max_len=16)
    )
    rnn = RNNSeq2Seq(RNNSeq2SeqConfig(20, 20, d_embedding=8, d_hidden=8))
    gpt = GPT(GPTConfig(vocab_size=20, context=8, d_model=8, n_heads=2, n_layers=1))
    bert = BERT(BERTConfig(20, max_len=16, d_model=8, n_heads=2, d_ff=16, n_layers=1))
    conforms = contracts.conforms
    assert conforms(transformer, contracts.EncoderDecoder) and conforms(rnn, contracts.EncoderDecoder)
    assert conforms(gpt, contracts.CachedLanguageModel) and not conforms(gpt, contracts.EncoderDecoder)
    assert not conforms(bert, contracts.EncoderDecoder) and not conforms(bert, contracts.CachedLanguageModel)
    tokenizer = WordPieceTokenizer.train(["a small text to learn from"] * 3, vocab_size=40)
    assert conforms(tokenizer, contracts.Tokenizer) and issubclass(SubwordTokenizer, contracts.Tokenizer)
    assert not conforms("a str", contracts.Tokenizer)


def test_a_method_held_as_a_submodule_conforms_whatever_the_python_version():
    """The Transformer's ``output`` is an ``nn.Linear``, which ``nn.Module`` keeps in ``_modules``
    and returns from ``__getattr__``. From Python 3.12, ``isinstance`` on a runtime-checkable
    protocol looks members up statically and misses it: every decoder of the book then refused
    the Transformer ("not an encoder-decoder") on Python 3.12, as on Colab. ``conforms`` finds
    members as a call does."""
    from torch import nn

    class Seq2Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.output = nn.Linear(2, 3)  # a method of the protocol, held as a submodule

        def encode(self, src):
            return src, None

        def decode(self, tgt_in, memory, src_mask):
            return tgt_in

        def decode_step(self, tokens, memory, src_mask, cache):
            return tokens, cache

    model = Seq2Seq()
    assert "output" not in vars(Seq2Seq) and "output" not in vars(model)  # found only through __getattr__
    assert contracts.conforms(model, contracts.EncoderDecoder)
    del model.output
    assert not contracts.conforms(model, contracts.EncoderDecoder)
    model.output = 3  # there, but not callable
    assert not contracts.conforms(model, contracts.EncoderDecoder)


def test_conforms_names_a_bad_protocol():
    with pytest.raises(TypeError, match="protocol must be a typing.Protocol class"):
        contracts.conforms(object(), int)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: checks.positive_int("f", n=0), "f: n must be a positive int, got 0"),
        (lambda: checks.positive_int("f", n=True), "f: n must be a positive int, got True"),
        (lambda: checks.non_negative_int("f", k=-1), "f: k must be a non-negative int, got -1"),
        (lambda: checks.integer("f", "m", 4, minimum=5), "f: m must be an int >= 5, got 4"),
        (lambda: checks.probability("f", "dropout", 1.0), r"f: dropout must lie in \[0, 1\), got 1.0"),
        (lambda: checks.probability("f", "p", 1.5, one=True), r"f: p must lie in \[0, 1\], got 1.5"),
        (lambda: checks.probability("f", "p", "0.1"), r"f: p must lie in \[0, 1\), got '0.1'"),
        (lambda: checks.finite_real("f", "lr", float("nan")), "f: lr must be a finite real, got nan"),
        (lambda: checks.finite_real("f", "base", 1, above=1), "f: base must be a finite real > 1, got 1"),
        (lambda: checks.token_ids("f", [1, 9], 5), r"f: ids \[9\] are outside the vocabulary \[0, 5\)"),
        (lambda: checks.token_ids("f", [[1]], 5), "f: expected one sequence of ids, got a nested one"),
        (lambda: checks.text("f", b"bytes"), "f: expected a str, got bytes"),
        (lambda: checks.text("f", "a\ud800"), "f: the text is not valid Unicode"),
        (lambda: checks.id_tensor("f", "tokens", [[1]]), r"f: tokens must be a \(B, m\) integer tensor, got list"),
        (
            lambda: checks.id_tensor("f", "tokens", torch.zeros(3, dtype=torch.long)),
            r"must be a \(B, m\) integer tensor, got shape \(3,\), dtype torch.int64",
        ),
        (
            lambda: checks.id_tensor("f", "tokens", torch.zeros(1, 3)),
            r"must be a \(B, m\) integer tensor, got shape \(1, 3\), dtype torch.float32",
        ),
    ],
)
def test_each_check_names_the_function_and_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_checks_pass_good_values_through():
    assert checks.integer("f", "n", 3, minimum=1) == 3
    assert checks.probability("f", "p", 1, one=True) == 1.0
    assert checks.token_ids("f", torch.tensor([0, 4]), 5) == [0, 4]
    assert checks.text("f", "café") == "café"
    ids = torch.tensor([[1, 2]])
    assert checks.id_tensor("f", "tokens", ids) is ids


def test_a_char_corpus_is_the_sorted_characters_and_an_ordered_split():
    corpus = char_corpus("hello world", train_share=0.8)
    assert corpus.chars == sorted(set("hello world")) and corpus.vocab_size == 8
    assert corpus.decode(corpus.ids) == "hello world" and corpus.encode("low").tolist() == [
        corpus.chars.index(c) for c in "low"
    ]
    assert len(corpus.train_ids) == 8 and torch.equal(torch.cat([corpus.train_ids, corpus.val_ids]), corpus.ids)
    with pytest.raises(ValueError, match=r"characters \['z'\] are not in the vocabulary"):
        corpus.encode("zoo")
    with pytest.raises(ValueError, match=r"train_share must lie in \(0, 1\)"):
        char_corpus("abc", train_share=1.0)
    with pytest.raises(ValueError, match="non-empty str"):
        char_corpus("")
