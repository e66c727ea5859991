"""Tests of the WikiText-2 loader, with a small file standing in for the fetched one."""

from __future__ import annotations

import pytest

from transformer_book.data import DataError, load_wikitext2, wikitext

TEXT = " \n = Valkyria Chronicles = \n \n The game 's story @-@ line <unk> .\n\n Second Paragraph here \n"


@pytest.fixture
def fetched(tmp_path, monkeypatch):
    path = tmp_path / "train.txt"
    calls = []

    def fake_fetch(corpus, file=None, *, download=True):
        calls.append((corpus, file, download))
        return path

    monkeypatch.setattr(wikitext, "fetch", fake_fetch)
    return path, calls


def test_paragraphs_of_tokens_lower_cased_without_blank_lines(fetched):
    path, calls = fetched
    path.write_text(TEXT, encoding="utf-8")
    assert load_wikitext2("train") == [
        ["=", "valkyria", "chronicles", "="],
        ["the", "game", "'s", "story", "@-@", "line", "<unk>", "."],
        ["second", "paragraph", "here"],
    ]
    assert load_wikitext2("valid", lower=False, download=False)[2] == ["Second", "Paragraph", "here"]
    assert calls[-1] == ("wikitext2", "valid.txt", False)


def test_unknown_split_and_undecodable_file(fetched):
    path, _ = fetched
    with pytest.raises(ValueError, match="known splits: train, valid, test"):
        load_wikitext2("dev")
    path.write_bytes(b"caf\xe9 \xff\n")
    with pytest.raises(DataError, match="corrupt"):
        load_wikitext2("train")
