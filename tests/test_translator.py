"""transformer_book.translator: train chapter 7's translator once, then reuse the saved file."""

import pytest
import torch

from transformer_book import data, translator
from transformer_book.decoding import translate

pytestmark = pytest.mark.usefixtures("one_thread")

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "bo", "fe", "gu", "pi", "sa", "we", "zo", "ha", "du", "ki"]
WORDS = [a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES[:4]]     # 1,024 made-up words
GERMAN = [" ".join(WORDS[(17 * i + 5 * k) % len(WORDS)] for k in range(3 + i % 4)) for i in range(800)]
ENGLISH = [" ".join(w[::-1] for w in sentence.split()) for sentence in GERMAN]      # each word reversed


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
    assert translate(again, sentences, tokenizer2, max_new_tokens=5) == translate(model, sentences, tokenizer, max_new_tokens=5)
    assert translator.checkpoint_path("full").name == "07_translation-full.pt"
    with pytest.raises(ValueError, match="steps must be a positive int"):
        translator.load_or_train(steps=0)
