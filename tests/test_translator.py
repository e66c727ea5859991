"""transformer_book.recipes.translator: train chapter 7's translator once, then reuse the saved file."""

import json
import re
from pathlib import Path

import pytest
import torch

from transformer_book import checkpoints, data, decoding
from transformer_book.decoding import translate
from transformer_book.recipes import translator

pytestmark = pytest.mark.usefixtures("one_thread")

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "bo", "fe", "gu", "pi", "sa", "we", "zo", "ha", "du", "ki"]
WORDS = [a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES[:4]]  # 1,024 made-up words
GERMAN = [" ".join(WORDS[(17 * i + 5 * k) % len(WORDS)] for k in range(3 + i % 4)) for i in range(800)]
ENGLISH = [" ".join(w[::-1] for w in sentence.split()) for sentence in GERMAN]  # each word reversed


@pytest.fixture
def fake_multi30k(monkeypatch, tmp_path):
    monkeypatch.setenv("TB_PROFILE", "quick")
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "load_multi30k", lambda split: list(zip(GERMAN, ENGLISH)))


def test_trains_once_then_loads(fake_multi30k, tmp_path):
    path = translator.checkpoint_path()
    assert path == tmp_path / "cache" / "checkpoints" / "07_translation-quick.pt"
    model, tokenizer, info = translator.load_or_train(steps=3, device="cpu", progress=False)
    assert info["source"] == "trained" and info["steps"] == 3 and path.exists() and not model.training
    again, tokenizer2, info2 = translator.load_or_train(steps=3, device="cpu", progress=False)
    assert info2["source"] == "loaded" and info2["val_loss"] == info["val_loss"]
    assert tokenizer2.to_bytes() == tokenizer.to_bytes()
    sentences = GERMAN[:2]
    assert translate(again, sentences, tokenizer2, max_new_tokens=5) == translate(
        model, sentences, tokenizer, max_new_tokens=5
    )
    assert translator.checkpoint_path("full").name == "07_translation-full.pt"
    with pytest.raises(ValueError, match="steps must be a positive int"):
        translator.load_or_train(steps=0)


def test_load_or_train_refuses_a_file_that_holds_another_model(fake_multi30k, tmp_path):
    from transformer_book.checkpoints import save_model
    from transformer_book.models import BERT, BERTConfig

    path = save_model(
        tmp_path / "bert.pt", BERT(BERTConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=16))
    )
    with pytest.raises(
        ValueError,
        match=r"load_or_train: .*bert.pt holds a BERT with no tokenizer, not a Transformer with a SubwordTokenizer",
    ):
        translator.load_or_train(path=path, device="cpu")


def test_load_or_train_refuses_a_translator_trained_on_another_corpus(fake_multi30k, tmp_path):
    """A Multi30k translator at the path asked for Tatoeba's is refused, not returned (issue 41)."""
    model, tokenizer, info = translator.load_or_train(steps=2, device="cpu", progress=False)
    assert info["corpus"] == "multi30k"
    with pytest.raises(ValueError, match=r"holds a model trained with corpus='multi30k', not corpus='tatoeba'"):
        translator.load_or_train("tatoeba", path=info["path"], device="cpu")


def test_a_translator_saved_without_its_corpus_loads_from_its_own_path_only(fake_multi30k, tmp_path):
    """Chapter 7 saves its Multi30k translator itself, with metadata that names no corpus: at the
    corpus's own path that file is the corpus's and loads; anywhere else it is refused."""
    model, tokenizer, _ = translator.load_or_train(steps=2, device="cpu", progress=False)
    own = translator.checkpoint_path()
    checkpoints.save_model(own, model, tokenizer=tokenizer, metadata={"steps": 2})  # as chapter 7 does
    assert translator.load_or_train(device="cpu")[2]["source"] == "loaded"
    elsewhere = tmp_path / "copy.pt"
    checkpoints.save_model(elsewhere, model, tokenizer=tokenizer, metadata={"steps": 2})
    with pytest.raises(ValueError, match=r"holds a model trained with no corpus, not corpus='multi30k'"):
        translator.load_or_train(path=elsewhere, device="cpu")


@pytest.fixture
def fake_tatoeba(monkeypatch, tmp_path):
    # Each English sentence has two German versions (a group of linked pairs), plus the running example.
    monkeypatch.setenv("TB_PROFILE", "quick")
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    pairs = [(g, e) for g, e in zip(GERMAN, ENGLISH)] + [(g + " ka", e) for g, e in zip(GERMAN, ENGLISH)]
    pairs.append((translator.RUNNING_EXAMPLE, "I would like a bottle of water."))
    monkeypatch.setattr(data, "load_tatoeba", lambda: pairs)
    monkeypatch.setattr(translator, "TATOEBA_TEST_PAIRS", 40)
    monkeypatch.setattr(translator, "TATOEBA_VAL_PAIRS", 20)
    return pairs


def test_tatoeba_split_holds_out_the_running_example_and_whole_groups(fake_tatoeba):
    split = translator.corpus_splits("tatoeba")
    assert split.held_out == 1
    assert translator.RUNNING_EXAMPLE not in {g for g, _ in split.train + split.val + split.test}
    test_english = {e for _, e in split.test}
    assert not test_english & {e for _, e in split.train}  # a test sentence's other translation is not trained on
    with pytest.raises(ValueError, match="corpus_splits: corpus must be one of 'multi30k' or 'tatoeba', got 'wmt'"):
        translator.corpus_splits("wmt")


def test_tatoeba_translator_has_its_own_checkpoint(fake_tatoeba, tmp_path):
    path = translator.checkpoint_path(corpus="tatoeba")
    assert path == tmp_path / "cache" / "checkpoints" / "07_translation_tatoeba-quick.pt"
    trained = translator.train("tatoeba", steps=2, device="cpu", progress=False)
    assert not path.exists()  # train trains; save saves
    assert trained.history.train_loss[-1][0] == 2 and trained.recipe.corpus == "tatoeba"
    assert translator.save(trained.model, trained.tokenizer, trained.summary, corpus="tatoeba") == path
    assert path.exists() and not translator.checkpoint_path().exists()
    model, tokenizer, info = translator.load_or_train("tatoeba", device="cpu", progress=False)
    assert info == {
        "corpus": "tatoeba",
        "steps": 2,
        "val_loss": trained.history.val_loss[-1][1],
        "train_seconds": trained.history.train_time_s[-1][1],
        "source": "loaded",
        "path": str(path),
    }
    saved = trained.model.state_dict()
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    assert tokenizer.to_bytes() == trained.tokenizer.to_bytes()


def test_save_records_the_corpus_that_load_or_train_checks(fake_multi30k, tmp_path):
    """Chapter 7 saves its Multi30k translator with what it measured; save adds the corpus."""
    from transformer_book.models import BERT, BERTConfig

    model, tokenizer, _ = translator.load_or_train(steps=2, device="cpu", progress=False)
    path = translator.save(
        model, tokenizer, {"test_bleu": 1.5, "steps": 2}, corpus="multi30k", path=tmp_path / "copy.pt"
    )
    info = translator.load_or_train(path=path, device="cpu")[2]
    assert info == {"corpus": "multi30k", "test_bleu": 1.5, "steps": 2, "source": "loaded", "path": str(path)}
    with pytest.raises(ValueError, match="holds a model trained with corpus='multi30k', not corpus='tatoeba'"):
        translator.load_or_train("tatoeba", path=path, device="cpu")
    with pytest.raises(ValueError, match="metadata names corpus='tatoeba'"):
        translator.save(model, tokenizer, {"corpus": "tatoeba"}, corpus="multi30k", path=tmp_path / "x.pt")
    with pytest.raises(ValueError, match="save: corpus must be one of 'multi30k' or 'tatoeba', got 'wmt'"):
        translator.save(model, tokenizer, {}, corpus="wmt", path=tmp_path / "x.pt")
    with pytest.raises(ValueError, match="model must be a models.Transformer, got BERT"):
        translator.save(
            BERT(BERTConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=16)),
            tokenizer,
            {},
            corpus="multi30k",
            path=tmp_path / "x.pt",
        )
    assert not (tmp_path / "x.pt").exists()


def test_translate_with_attention_agrees_with_greedy_decoding_and_beam_search(fake_multi30k):
    model, tokenizer, _ = translator.load_or_train(steps=3, device="cpu", progress=False)
    sentence = GERMAN[7]
    src = torch.tensor([tokenizer.encode(sentence, add_eos=True)])
    result = translator.translate_with_attention(model, tokenizer, sentence, max_new_tokens=6)
    assert result.text == translate(model, [sentence], tokenizer, max_new_tokens=6)[0]
    n, m = result.cross_attention.shape
    assert m == src.shape[1] == len(result.source_pieces)
    assert n == len(result.target_pieces) and 1 <= n <= 6
    assert torch.allclose(result.cross_attention.sum(-1), torch.ones(n), atol=1e-5)
    # the summed log-probability, as beam search with one beam (incremental decoding) scores it
    [[(tokens, score)]] = decoding.beam_search(model, src=src, beam_size=1, max_new_tokens=6)
    assert tokenizer.id_to_piece(tokens) == result.target_pieces
    assert result.log_prob == pytest.approx(score, abs=1e-4)
    beam = translator.translate_with_attention(model, tokenizer, sentence, beam_size=3, max_new_tokens=6)
    (tokens, score), *_ = decoding.beam_search(model, src=src, beam_size=3, max_new_tokens=6, normalize="length")[0]
    assert beam.target_pieces == tokenizer.id_to_piece(tokens) and beam.text == tokenizer.decode(tokens)
    assert beam.log_prob == pytest.approx(score * len(tokens), abs=1e-4)
    for bad, message in [("", "non-empty str"), (" ".join([sentence] * 60), "more than the model's max_len")]:
        with pytest.raises(ValueError, match=message):
            translator.translate_with_attention(model, tokenizer, bad)
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        translator.translate_with_attention(model, tokenizer, sentence, beam_size=0)


def test_chapter_7_stores_a_correct_translation_of_the_running_example():
    # The stored outputs of chapter 7 are those of its full-profile run: the saved everyday
    # translator's beam search (4 beams) must render the running example as "I would like a bottle
    # of water". (Its greedy output is stored beside it, right or not: since the fused LayerNorm the
    # greedy path writes "I want to be a bottle of water.", which the chapter discusses.)
    notebook = json.loads((Path(__file__).resolve().parent.parent / "book" / "07_translation.ipynb").read_text())
    cells = [
        cell
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
        and "mt.translate_with_attention(everyday.model, everyday.tokenizer, mt.RUNNING_EXAMPLE)"
        in "".join(cell["source"])
    ]
    assert len(cells) == 1, "chapter 7 must translate the running example with mt.translate_with_attention once"
    text = "".join("".join(out.get("text", "")) for out in cells[0]["outputs"] if out.get("output_type") == "stream")
    assert re.search(r"^greedy: .+   \(log P", text, flags=re.MULTILINE), f"no greedy translation stored: {text!r}"
    found = re.search(r"^beam 4: (.+?)   \(log P", text, flags=re.MULTILINE)
    assert found, f"no beam-search translation in the stored output: {text!r}"
    correct = r"I(?: would|'d) like (?:to have )?a bottle of water\.?|I want (?:to have )?a bottle of water\.?"
    assert re.fullmatch(correct, found.group(1)), found.group(1)
