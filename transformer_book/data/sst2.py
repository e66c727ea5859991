"""SST-2, the binary Stanford Sentiment Treebank of the GLUE benchmark (Socher et al., 2013):
movie-review sentences and phrases labelled negative (0) or positive (1), for the sentence-level
probe of chapter 12 and the fine-tuning of chapter 14."""

from __future__ import annotations

from transformer_book.data.download import DataError, fetch_text

__all__ = ["SST2_SPLITS", "SST2_HEADER", "load_sst2"]

SST2_SPLITS = {"train": "train.tsv", "dev": "dev.tsv"}
"""The labelled splits :func:`load_sst2` reads, and their files (GLUE's test split has no labels)."""

SST2_HEADER = "sentence\tlabel"
"""The first line of every labelled GLUE SST-2 file."""


def load_sst2(split: str = "train", *, download: bool = True) -> list[tuple[str, int]]:
    """One labelled split of GLUE SST-2 as ``(sentence, label)`` pairs, in the file's order.

    The files are tab-separated, with the header ``sentence<TAB>label``; the text is already
    lower-cased and tokenised, tokens separated by single spaces (``"it 's a charming and often
    affecting journey ."``), and each sentence is returned with its surrounding whitespace
    stripped (GLUE's files end every sentence with a space). ``label`` is 1 for positive, 0 for
    negative. Measured on the pinned files:

    =====  ======  ========  ========
    split  rows    label 1   label 0
    =====  ======  ========  ========
    train  67,349  37,569    29,780
    dev       872     444       428
    =====  ======  ========  ========

    The training split holds phrases of the treebank's parse trees as well as whole sentences,
    so most of its rows are short; the dev split holds whole sentences only.

    Args:
        split: ``"train"`` or ``"dev"``.
        download: as for :func:`~transformer_book.data.fetch`.

    Raises:
        ValueError: an unknown split (the message lists the known ones).
        DataError: a file that is not UTF-8 text, lacks the header, or holds a malformed line
            (no tab, an empty sentence, or a label other than 0 and 1); the message names the
            file and the line number (1-based, the header being line 1).
    """
    if split not in SST2_SPLITS:
        raise ValueError(f"load_sst2: unknown split {split!r}; known splits: {', '.join(SST2_SPLITS)}")
    name = f"sst2/{SST2_SPLITS[split]}"
    text = fetch_text("sst2", SST2_SPLITS[split], download=download)
    lines = text.split("\n")
    if lines[-1] == "":  # the newline that ends the last line starts no new line
        lines.pop()
    if not lines or lines[0].rstrip("\r") != SST2_HEADER:
        found = repr(lines[0][:60]) if lines else "an empty file"
        raise DataError(f"{name}, line 1: expected the header {SST2_HEADER!r}, got {found}")
    rows: list[tuple[str, int]] = []
    for number, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        sentence, tab, label = line.rpartition("\t")
        if not tab:
            raise DataError(f"{name}, line {number}: expected 'sentence<TAB>label', got {line[:60]!r} (no tab)")
        if label not in ("0", "1"):
            raise DataError(f"{name}, line {number}: the label must be 0 or 1, got {label[:20]!r}")
        sentence = sentence.strip()
        if not sentence:
            raise DataError(f"{name}, line {number}: the sentence is empty")
        rows.append((sentence, int(label)))
    return rows
