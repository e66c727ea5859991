"""WikiText-2 (Merity et al., 2016) as paragraphs of word tokens (chapters 10 to 13)."""

from __future__ import annotations

from transformer_book.data.download import DataError, fetch

__all__ = ["WIKITEXT2_SPLITS", "load_wikitext2"]

WIKITEXT2_SPLITS = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}


def load_wikitext2(split: str = "train", *, lower: bool = True, download: bool = True) -> list[list[str]]:
    """The tokenised WikiText-2 text of one split as a list of paragraphs, each a list of tokens.

    The file is already tokenised: tokens are separated by spaces, rare words are ``<unk>``,
    and hyphens inside numbers and words are written ``@-@``. A line of the file is a paragraph
    or a heading (``= = Gameplay = =``); blank lines are dropped. The train split has 2,051,910
    tokens in 23,767 non-blank lines.

    Args:
        split: ``"train"``, ``"valid"`` or ``"test"``.
        lower: lower-case every token (word vectors are evaluated on lower-case word lists).
        download: as for :func:`~transformer_book.data.fetch`.

    Raises:
        ValueError: an unknown split (the message lists the known ones).
        DataError: a file that is not UTF-8 text.
    """
    if split not in WIKITEXT2_SPLITS:
        raise ValueError(f"load_wikitext2: unknown split {split!r}; known splits: {', '.join(WIKITEXT2_SPLITS)}")
    path = fetch("wikitext2", WIKITEXT2_SPLITS[split], download=download)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"cannot read wikitext2/{WIKITEXT2_SPLITS[split]} ({path}): {err}. The file is corrupt; "
                        "delete it so that it is fetched again") from None
    if lower:
        text = text.lower()
    paragraphs = (line.split() for line in text.split("\n"))
    return [tokens for tokens in paragraphs if tokens]
