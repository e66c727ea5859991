"""German-English sentence pairs for translation (chapter 7): Multi30k and Tatoeba.

Both loaders return a list of ``(german, english)`` pairs of strings, in the corpus's order,
with surrounding whitespace stripped. A pair with an empty side is dropped with a
:class:`DataWarning` that says how many and where; files whose two sides have different line
counts, that cannot be decompressed or decoded, or that have malformed lines raise a
:class:`~transformer_book.data.download.DataError` naming the file.

Tatoeba's licence (CC BY 2.0) requires the credit line :data:`~transformer_book.data.TATOEBA_ATTRIBUTION` wherever
its sentences are shown.
"""

from __future__ import annotations

import gzip
import io
import random
import unicodedata
import warnings
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from transformer_book import checks
from transformer_book.data.download import DataError, fetch
from transformer_book.data.registry import get_corpus

__all__ = [
    "DataWarning",
    "MULTI30K_SPLITS",
    "TATOEBA_ATTRIBUTION",
    "TranslationSplit",
    "load_multi30k",
    "load_tatoeba",
    "pair_lines",
    "parse_tab_pairs",
    "split_linked_groups",
]

MULTI30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr", "test_2016_flickr": "test_2016_flickr"}
"""Split names accepted by :func:`load_multi30k` and the file stem each one reads."""

TATOEBA_ATTRIBUTION = get_corpus("tatoeba_deu_eng").attribution
"""The credit that Tatoeba's CC BY 2.0 licence requires wherever its sentences are used."""

_CORRUPT = (OSError, EOFError, UnicodeDecodeError, zlib.error, zipfile.BadZipFile)


class DataWarning(UserWarning):
    """Something in a data file was skipped (for example pairs with an empty side)."""


def pair_lines(german: Iterable[str], english: Iterable[str], *, name: str) -> list[tuple[str, str]]:
    """Zip two line-aligned sides into ``(german, english)`` pairs.

    Lines are stripped; pairs with an empty side are dropped with a :class:`DataWarning`
    giving their count and first line numbers (1-based).

    Raises:
        DataError: the two sides have different numbers of lines.
    """
    german, english = [g.strip() for g in german], [e.strip() for e in english]
    if len(german) != len(english):
        raise DataError(
            f"{name}: the German side has {len(german):,} lines but the English side {len(english):,}; "
            "the files are not line-aligned"
        )
    pairs, empty = [], []
    for number, (de, en) in enumerate(zip(german, english), start=1):
        if de and en:
            pairs.append((de, en))
        else:
            empty.append(number)
    _warn_empty(empty, name)
    return pairs


def parse_tab_pairs(lines: Iterable[str], *, name: str) -> list[tuple[str, str]]:
    """Parse Tatoeba's ``English<TAB>German[<TAB>attribution]`` lines into ``(german, english)``.

    Blank lines are skipped silently; lines with an empty side are dropped with a
    :class:`DataWarning`.

    Raises:
        DataError: a non-blank line without a tab, naming its line number.
    """
    pairs, empty = [], []
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise DataError(f"{name}, line {number}: expected 'English<TAB>German', got {line[:60]!r}")
        en, de = fields[0].strip(), fields[1].strip()
        if de and en:
            pairs.append((de, en))
        else:
            empty.append(number)
    _warn_empty(empty, name)
    return pairs


def _warn_empty(line_numbers: list[int], name: str) -> None:
    if line_numbers:
        shown = ", ".join(map(str, line_numbers[:5])) + (", ..." if len(line_numbers) > 5 else "")
        warnings.warn(
            f"{name}: dropped {len(line_numbers)} pairs with an empty side (lines {shown})", DataWarning, stacklevel=3
        )


def _read_gzip_lines(path: Path, name: str) -> list[str]:
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="") as stream:
            content = stream.read()
    except _CORRUPT as err:
        raise DataError(
            f"cannot read {name} ({path}): {type(err).__name__}: {err}. The file is corrupt or "
            "truncated; delete it so that it is fetched again"
        ) from None
    # Split on newlines only: str.splitlines would also split on characters such as U+2028
    # inside a sentence and break the line alignment of the two sides.
    lines = content.replace("\r\n", "\n").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def load_multi30k(split: str = "train", *, download: bool = True) -> list[tuple[str, str]]:
    """Multi30k task 1 (Elliott et al., 2016): German captions of Flickr photos and their English
    translations, as ``(german, english)`` pairs.

    Args:
        split: ``"train"`` (29,000 pairs), ``"val"`` (1,014) or ``"test"`` (the 1,000 pairs of
            ``test_2016_flickr``; that name is accepted too).
        download: as for :func:`~transformer_book.data.fetch`.

    Raises:
        ValueError: an unknown split (the message lists the known ones).
        DataError: a file that cannot be read, or sides of different lengths.
    """
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"load_multi30k: unknown split {split!r}; known splits: {', '.join(MULTI30K_SPLITS)}")
    stem = MULTI30K_SPLITS[split]
    sides = [
        _read_gzip_lines(fetch("multi30k", f"{stem}.{lang}.gz", download=download), f"multi30k/{stem}.{lang}.gz")
        for lang in ("de", "en")
    ]
    return pair_lines(*sides, name=f"multi30k/{stem}")


def load_tatoeba(*, download: bool = True) -> list[tuple[str, str]]:
    """Tatoeba's German-English sentence pairs (manythings.org, 2018-05-13; 169,813 pairs) as
    ``(german, english)``, sorted by length as in the file.

    The licence is CC BY 2.0: show :data:`~transformer_book.data.TATOEBA_ATTRIBUTION` wherever the sentences are used.

    Raises:
        DataError: the zip archive is corrupt, lacks ``deu.txt``, or holds malformed lines.
    """
    path = fetch("tatoeba_deu_eng", "deu-eng.zip", download=download)
    name = "tatoeba_deu_eng/deu-eng.zip"
    try:
        with zipfile.ZipFile(path) as archive:
            if "deu.txt" not in archive.namelist():
                raise DataError(f"{name}: the archive has no deu.txt (it holds {archive.namelist()})")
            raw = archive.read("deu.txt")
        lines = io.StringIO(raw.decode("utf-8"), newline=None)
    except _CORRUPT as err:
        raise DataError(
            f"cannot read {name} ({path}): {type(err).__name__}: {err}. The file is corrupt or "
            "truncated; delete it so that it is fetched again"
        ) from None
    return parse_tab_pairs(lines, name=f"{name}:deu.txt")


class TranslationSplit(NamedTuple):
    """The three parts of :func:`split_linked_groups`, each a list of ``(source, target)`` pairs,
    and the number of pairs ``held_out`` of all three because they contain a sentence the caller
    reserved."""

    train: list[tuple[str, str]]
    val: list[tuple[str, str]]
    test: list[tuple[str, str]]
    held_out: int


def _sentence_key(text: str) -> str:
    # The identity of a sentence for linking and holding out: NFC, case-folded, spaces collapsed.
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def split_linked_groups(
    pairs: Sequence[tuple[str, str]], *, val_size: int, test_size: int, seed: int = 0, hold_out: Iterable[str] = ()
) -> TranslationSplit:
    """Split translation pairs into training, validation and test parts so that no sentence of
    one part, on either side, appears in another.

    A corpus such as Tatoeba holds the same sentence in several pairs (one English sentence with
    three German translations, one German sentence with two English ones). Pairs that share a
    sentence, directly or through a chain of shared sentences, form a *group* (a connected
    component of the graph whose nodes are sentences and whose edges are pairs); each group goes
    whole to one part. Sentences are compared after NFC normalisation, case folding and collapsing
    spaces. Groups are drawn in a seeded random order into the test part until it holds at least
    ``test_size`` pairs, then into validation until it holds ``val_size``; the rest is training, in
    the corpus's order.

    Every group that holds a sentence of ``hold_out`` (compared the same way, on either side) is
    left out of all three parts, and counted in ``held_out``: the way to keep a sentence the book
    translates as an example out of what the model learns from.

    Raises:
        ValueError: ``val_size`` or ``test_size`` not a positive int, or the two together leave no
            group for training.
    """
    checks.positive_int("split_linked_groups", val_size=val_size, test_size=test_size)
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def root(node: tuple[int, str]) -> tuple[int, str]:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    keys = [((0, _sentence_key(a)), (1, _sentence_key(b))) for a, b in pairs]
    for a, b in keys:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[ra] = rb
    reserved = {_sentence_key(text) for text in hold_out}
    members: dict[tuple[int, str], list[int]] = {}
    for i, (a, _) in enumerate(keys):
        members.setdefault(root(a), []).append(i)
    blocked = {root(node) for a, b in keys for node in (a, b) if node[1] in reserved}
    order = sorted(group for group in members if group not in blocked)
    random.Random(seed).shuffle(order)
    test: list[int] = []
    val: list[int] = []
    taken = 0  # groups given to the test and validation sets
    for group in order:
        taken += 1
        part = test if len(test) < test_size else val
        part.extend(members[group])
        if len(val) >= val_size:
            break
    if taken >= len(order):
        raise ValueError(
            f"split_linked_groups: val_size {val_size:,} and test_size {test_size:,} take every one of "
            f"the {len(order):,} groups of {len(pairs):,} pairs; none is left for training"
        )
    in_train = {i for group in order[taken:] for i in members[group]}
    held = sum(len(members[group]) for group in blocked)
    return TranslationSplit(
        train=[pairs[i] for i in sorted(in_train)],
        val=[pairs[i] for i in sorted(val)],
        test=[pairs[i] for i in sorted(test)],
        held_out=held,
    )
