"""Tests of the SST-2 loader, with small files standing in for the fetched ones (and the real
files where ``TB_DATA_DIR`` points at them)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from transformer_book.data import DataError
from transformer_book.data.sst2 import load_sst2

TEXT = "sentence\tlabel\nit 's a charming and often affecting journey . \t1\nunflinchingly bleak and desperate \t0\n"


def test_rows_are_stripped_sentences_with_integer_labels(fetched):
    path, calls = fetched
    path.write_text(TEXT, encoding="utf-8")
    assert load_sst2("dev", download=False) == [
        ("it 's a charming and often affecting journey .", 1),
        ("unflinchingly bleak and desperate", 0),
    ]
    assert calls[-1] == ("sst2", "dev.tsv", False)
    load_sst2()
    assert calls[-1] == ("sst2", "train.tsv", True)
    # a last line without its newline, and CRLF endings, read the same
    path.write_text(TEXT.rstrip("\n"), encoding="utf-8")
    assert len(load_sst2("dev")) == 2
    path.write_text(TEXT.replace("\n", "\r\n"), encoding="utf-8")
    assert load_sst2("dev")[1] == ("unflinchingly bleak and desperate", 0)
    # a header alone is an empty split
    path.write_text("sentence\tlabel\n", encoding="utf-8")
    assert load_sst2("dev") == []


def test_unknown_split():
    with pytest.raises(ValueError, match=r"load_sst2: unknown split 'test'; known splits: train, dev"):
        load_sst2("test")
    with pytest.raises(ValueError, match="known splits: train, dev"):
        load_sst2("validation")


@pytest.mark.parametrize(
    "line, problem",
    [
        ("no tab on this line 1", "no tab"),
        ("a fine film \t2", "label must be 0 or 1, got '2'"),
        ("a fine film \tpositive", "label must be 0 or 1, got 'positive'"),
        ("a fine film \t", "label must be 0 or 1, got ''"),
        ("   \t1", "sentence is empty"),
    ],
)
def test_malformed_line_names_the_file_and_the_line(fetched, line, problem):
    path, _ = fetched
    path.write_text(TEXT + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"sst2/dev\.tsv, line 4: .*{problem}"):
        load_sst2("dev")


def test_missing_header_and_undecodable_file(fetched):
    path, _ = fetched
    path.write_text("it 's fine . \t1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"sst2/train\.tsv, line 1: expected the header"):
        load_sst2("train")
    path.write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="an empty file"):
        load_sst2("train")
    path.write_bytes(b"sentence\tlabel\ncaf\xe9 \xff\t1\n")
    with pytest.raises(DataError, match="corrupt"):
        load_sst2("dev")


def test_real_counts(tmp_path, monkeypatch):
    """The GLUE split sizes and label balance, on the pinned files (needs ``TB_DATA_DIR``)."""
    value = os.environ.get("TB_DATA_DIR")
    if not value or not (Path(value) / "sst2" / "train.tsv").is_file():
        pytest.skip("TB_DATA_DIR does not point at a folder holding sst2/")
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    train, dev = load_sst2("train", download=False), load_sst2("dev", download=False)
    assert len(train) == 67_349 and len(dev) == 872
    assert Counter(label for _, label in train) == {1: 37_569, 0: 29_780}
    assert Counter(label for _, label in dev) == {1: 444, 0: 428}
    assert dev[0] == ("it 's a charming and often affecting journey .", 1)
    assert train[0] == ("hide new secretions from the parental units", 0)
    for sentence, _ in train + dev:
        assert sentence == sentence.strip() and sentence == sentence.lower() and "\t" not in sentence
