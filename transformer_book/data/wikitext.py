"""WikiText-2 (Merity et al., 2016) as paragraphs of word tokens (chapters 10 to 13), or as one
stream of tokens with ``<eos>`` line ends for word-level language modelling (chapter 12)."""

from __future__ import annotations

from transformer_book.data.download import fetch_text

__all__ = ["WIKITEXT2_SPLITS", "load_wikitext2", "load_wikitext2_stream", "read_split"]

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
    text = read_split("load_wikitext2", split, download)
    if lower:
        text = text.lower()
    paragraphs = (line.split() for line in text.split("\n"))
    return [tokens for tokens in paragraphs if tokens]


def load_wikitext2_stream(split: str = "train", *, download: bool = True) -> list[str]:
    """One split of WikiText-2 as the word-level language-modelling stream of Merity et al. (2016).

    Every line of the file, blank lines included, is split on whitespace and followed by an
    ``"<eos>"`` token; case is kept. This is the stream of PyTorch's ``word_language_model``
    example and of the published WikiText-2 perplexities. Measured on the pinned files:

    ======  ==========  ======  ============
    split   tokens      lines   distinct
    ======  ==========  ======  ============
    train   2,088,628   36,718  33,278
    valid     217,646    3,760  13,777
    test      245,569    4,358  14,143
    ======  ==========  ======  ============

    (token counts include the ``<eos>`` tokens, one per line). The vocabulary of train, valid
    and test together is the train vocabulary, 33,278 words: every valid or test word,
    ``<unk>`` included, occurs in train, so a model over the train vocabulary never meets an
    unknown id.

    Args:
        split: ``"train"``, ``"valid"`` or ``"test"``.
        download: as for :func:`~transformer_book.data.fetch`.

    Raises:
        ValueError: an unknown split (the message lists the known ones).
        DataError: a file that is not UTF-8 text.
    """
    text = read_split("load_wikitext2_stream", split, download)
    lines = text.split("\n")
    if lines[-1] == "":  # the newline that ends the last line starts no new line
        lines.pop()
    stream: list[str] = []
    for line in lines:
        stream.extend(line.split())
        stream.append("<eos>")
    return stream


def read_split(owner: str, split: str, download: bool) -> str:
    """The text of one split's file (``"train"``, ``"valid"`` or ``"test"``), fetched and decoded
    as UTF-8; errors name ``owner``, the function the reader called."""
    if split not in WIKITEXT2_SPLITS:
        raise ValueError(f"{owner}: unknown split {split!r}; known splits: {', '.join(WIKITEXT2_SPLITS)}")
    return fetch_text("wikitext2", WIKITEXT2_SPLITS[split], download=download)
