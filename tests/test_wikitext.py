"""Tests of the WikiText-2 loaders, with a small file standing in for the fetched one (and the
real files where ``TB_DATA_DIR`` points at them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from transformer_book.data import DataError, load_wikitext2
from transformer_book.data.wikitext import load_wikitext2_stream

TEXT = " \n = Valkyria Chronicles = \n \n The game 's story @-@ line <unk> .\n\n Second Paragraph here \n"


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


# --- the language-modelling stream ---------------------------------------------------------


def test_stream_keeps_blank_lines_and_case_and_ends_every_line_with_eos(fetched):
    path, calls = fetched
    path.write_text(TEXT, encoding="utf-8")
    expected = []
    for line in [
        " ",
        " = Valkyria Chronicles = ",
        " ",
        " The game 's story @-@ line <unk> .",
        "",
        " Second Paragraph here ",
    ]:
        expected += line.split() + ["<eos>"]
    stream = load_wikitext2_stream("valid", download=False)
    assert stream == expected
    assert stream[:6] == ["<eos>", "=", "Valkyria", "Chronicles", "=", "<eos>"]
    assert calls[-1] == ("wikitext2", "valid.txt", False)
    # a last line without its newline is still a line
    path.write_text("a b\nc", encoding="utf-8")
    assert load_wikitext2_stream() == ["a", "b", "<eos>", "c", "<eos>"]


def test_stream_unknown_split_and_undecodable_file(fetched):
    path, _ = fetched
    with pytest.raises(
        ValueError, match=r"load_wikitext2_stream: unknown split 'dev'; known splits: train, valid, test"
    ):
        load_wikitext2_stream("dev")
    path.write_bytes(b"caf\xe9 \xff\n")
    with pytest.raises(DataError, match="corrupt"):
        load_wikitext2_stream("train")


def test_stream_real_counts(tmp_path, monkeypatch):
    """The published WikiText-2 statistics, on the pinned files (needs ``TB_DATA_DIR``)."""
    value = os.environ.get("TB_DATA_DIR")
    if not value or not (Path(value) / "wikitext2" / "train.txt").is_file():
        pytest.skip("TB_DATA_DIR does not point at a folder holding wikitext2/")
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    streams = {split: load_wikitext2_stream(split, download=False) for split in ("train", "valid", "test")}
    assert {split: len(s) for split, s in streams.items()} == {"train": 2_088_628, "valid": 217_646, "test": 245_569}
    lines = {"train": 36_718, "valid": 3_760, "test": 4_358}
    for split, stream in streams.items():
        assert stream.count("<eos>") == lines[split] and stream[-1] == "<eos>"
    train_vocab = set(streams["train"])
    assert len(train_vocab) == 33_278
    assert train_vocab | set(streams["valid"]) | set(streams["test"]) == train_vocab
    assert streams["train"][:4] == ["<eos>", "=", "Valkyria", "Chronicles"]
    assert sum(len(p) for p in load_wikitext2("train", lower=False, download=False)) == 2_088_628 - 36_718
