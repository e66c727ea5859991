"""The book's headline numbers: recorded by the chapters, read by the Results page.

A chapter that trains something ends its experiment with a call such as::

    import transformer_book.results

    transformer_book.results.record(
        "02_masks", "validation loss, causal model", 2.013,
        dataset="Tiny Shakespeare (characters)", split="validation: last 10%",
        unit="nats/char", higher_is_better=False, wall_time_s=41.5,
    )

which adds (or replaces) one entry in ``book/results/02_masks.json``. The book's Results page
reads every such file at build time and shows the numbers beside published ones. The build
never writes these files; only running a chapter does.

Where the files go:

* ``TB_RESULTS_DIR``, when set, names the folder (created if missing);
* otherwise ``book/results`` of the book's repository, found from the current working
  directory when it is the repository's root or its ``book/`` folder (where notebooks run);
* otherwise nowhere: :func:`record` returns ``None`` and writes nothing. This is what
  happens on Colab, where a chapter runs outside any clone of the repository, and readers'
  runs have no business writing into one.

Only the ``full`` profile records (``TB_PROFILE``, see :mod:`transformer_book.runtime`): the
``quick`` profile of the tests is too short to give meaningful numbers, and a test run must
not change files in the repository.

Nothing here runs at import time.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from transformer_book import runtime
from transformer_book.atomic import atomic_writer

__all__ = [
    "SCHEMA_VERSION",
    "REQUIRED_KEYS",
    "REFERENCES_FILE",
    "REFERENCE_KEYS",
    "record",
    "load_results",
    "load_references",
    "reference_applies",
    "default_results_dir",
]

SCHEMA_VERSION = 1
"""The version of the files' layout, ``{"schema_version": 1, "entries": [entry, ...]}``."""

REQUIRED_KEYS: dict[str, type | tuple[type, ...]] = {
    "chapter": str,
    "metric": str,
    "value": float,
    "unit": str,
    "higher_is_better": bool,
    "dataset": str,
    "split": str,
    "profile": str,
    "device": str,
    "torch_version": str,
    "package_version": str,
    "wall_time_s": (float, type(None)),
    "recorded_at": str,
    "notes": str,
}
"""Every entry's keys and the JSON types their values must have (after parsing)."""

REFERENCES_FILE = "references.json"
"""The file of published reference numbers beside the results; not a chapter's file."""

REFERENCE_KEYS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "dataset": str,
    "split": str,
    "metric": str,
    "value": (float, type(None)),
    "unit": str,
    "higher_is_better": bool,
    "setup": str,
    "citation": str,
    "source": str,
    "comparability": str,
}
"""Every published reference's keys and types. ``value`` is ``None`` where no comparable
number has been published; ``comparability`` then says why."""

_CHAPTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def default_results_dir(cwd: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder :func:`record` writes into when none is given, or ``None`` for nowhere.

    ``TB_RESULTS_DIR`` if set; else ``<repo>/book/results`` when ``cwd`` (default: the current
    working directory) is the repository's root or its ``book/`` folder; else ``None``. A
    folder is taken for the repository's root when it holds ``_config.yml``, ``book/`` and
    ``transformer_book/``.
    """
    named = os.environ.get("TB_RESULTS_DIR", "").strip()
    if named:
        return Path(named).expanduser()
    here = Path(cwd) if cwd is not None else Path.cwd()
    for root in (here, here.parent):
        if (root / "_config.yml").is_file() and (root / "book").is_dir() and (root / "transformer_book").is_dir():
            return root / "book" / "results"
    return None


def record(
    chapter: str,
    metric: str,
    value: float,
    *,
    dataset: str,
    split: str,
    unit: str = "",
    higher_is_better: bool,
    wall_time_s: float | None = None,
    notes: str = "",
    device: torch.device | str | None = None,
    results_dir: str | os.PathLike[str] | None = None,
) -> Path | None:
    """Record one headline number of a chapter, in the ``full`` profile only.

    Adds the entry to ``<results_dir>/<chapter>.json``, or replaces the entry with the same
    ``chapter`` and ``metric``; the other entries keep their order. The file is written
    atomically (a temporary file in the same folder, then ``os.replace``), so a run that
    is interrupted leaves the old file or the new one, never half of one.

    Besides the arguments, the entry stores the profile, the device (as
    :func:`transformer_book.runtime.environment_summary` names it, e.g. ``"cpu"`` or
    ``"cuda (NVIDIA H100 80GB HBM3)"``), the versions of PyTorch and of the package, and the
    UTC date and time of recording.

    Args:
        chapter: the chapter's notebook name without ``.ipynb``, e.g. ``"02_masks"``; also the
            file name, and the page the Results table links to.
        metric: what was measured, e.g. ``"validation loss, causal model"``; unique within
            the chapter.
        value: the number; must be finite.
        dataset, split: what it was measured on, e.g. ``"Tiny Shakespeare (characters)"`` and
            ``"validation: last 10%"``. The Results page puts an entry beside the published
            numbers for the same ``dataset``.
        unit: e.g. ``"nats/char"``; ``""`` for a pure number.
        higher_is_better: ``False`` for a loss, ``True`` for an accuracy or BLEU.
        wall_time_s: seconds of wall-clock time that produced the number, when measured.
        notes: how it was measured, in a sentence (sample size, model size).
        device: the device the chapter computed on; default
            :func:`transformer_book.runtime.select_device`.
        results_dir: the folder of the files; default :func:`default_results_dir`.

    Returns:
        The path of the file written, or ``None`` when nothing was written, which happens in
        any profile other than ``full`` and when there is no results folder (see
        :func:`default_results_dir`; on Colab, for instance).

    Raises:
        ValueError: for a non-finite or non-numeric value, a negative or non-finite wall
            time, an empty metric, or a chapter name that cannot be a file name.
    """
    value = _finite_float(value, "value")
    if wall_time_s is not None:
        wall_time_s = _finite_float(wall_time_s, "wall_time_s")
        if wall_time_s < 0:
            raise ValueError(f"wall_time_s must be >= 0, got {wall_time_s!r}")
    if not isinstance(chapter, str) or not _CHAPTER.match(chapter) or f"{chapter}.json" == REFERENCES_FILE:
        raise ValueError(f"chapter must be a notebook name such as '02_masks', got {chapter!r}")
    if not isinstance(metric, str) or not metric.strip():
        raise ValueError(f"metric must be a non-empty string, got {metric!r}")
    if not isinstance(higher_is_better, bool):
        raise ValueError(f"higher_is_better must be True or False, got {higher_is_better!r}")
    for name, text in (("dataset", dataset), ("split", split), ("unit", unit), ("notes", notes)):
        if not isinstance(text, str):
            raise ValueError(f"{name} must be a string, got {text!r}")

    if runtime.profile() != "full":
        return None
    folder = Path(results_dir) if results_dir is not None else default_results_dir()
    if folder is None:
        return None

    from transformer_book import __version__

    entry: dict[str, Any] = {
        "chapter": chapter,
        "metric": metric,
        "value": value,
        "unit": unit,
        "higher_is_better": higher_is_better,
        "dataset": dataset,
        "split": split,
        "profile": runtime.profile(),
        "device": runtime.device_description(runtime.select_device() if device is None else torch.device(device)),
        "torch_version": torch.__version__,
        "package_version": __version__,
        "wall_time_s": wall_time_s,
        "recorded_at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "notes": notes,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{chapter}.json"
    entries = _read_file(path) if path.exists() else []
    for i, old in enumerate(entries):
        if old["chapter"] == chapter and old["metric"] == metric:
            entries[i] = entry
            break
    else:
        entries.append(entry)
    _write_atomically(path, {"schema_version": SCHEMA_VERSION, "entries": entries})
    return path


def load_results(results_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every entry of every ``*.json`` file in ``results_dir``, by file name, then file order.

    The file of published reference numbers, :data:`REFERENCES_FILE`, is not read. A missing
    folder holds no results (an empty list).

    Raises:
        ValueError: naming the file and the problem, for a file that is not JSON, lacks the
            layout ``{"schema_version": 1, "entries": [...]}``, or holds an entry with a
            missing key, a value of the wrong type, a non-finite number, a chapter other than
            the file's name, or a metric recorded twice.
    """
    folder = Path(results_dir)
    if not folder.is_dir():
        return []
    entries: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.json")):
        if path.name == REFERENCES_FILE:
            continue
        entries.extend(_read_file(path))
    return entries


def load_references(results_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The published reference numbers of ``<results_dir>/references.json``, validated.

    The file is ``{"schema_version": 1, "references": [reference, ...]}``, each reference
    with the keys of :data:`REFERENCE_KEYS`, and optionally ``bibtex`` (the entry to cite it
    by) and ``metric_pattern`` (a regular expression). The Results page shows a reference
    beside every result with the same ``dataset`` whose metric, when the reference has a
    ``metric_pattern``, matches it (``re.search``): a BLEU reference then stands beside the
    BLEU rows of a chapter, not beside its chrF rows. A missing file holds no references.

    Raises:
        ValueError: naming the file and the problem.
    """
    path = Path(results_dir) / REFERENCES_FILE
    if not path.exists():
        return []
    references = _read_document(path, "references")
    seen: set[str] = set()
    for number, reference in enumerate(references):
        where = f"{path}: reference {number}"
        if not isinstance(reference, dict):
            raise ValueError(f"{where}: expected an object, got {type(reference).__name__}")
        _check_types(reference, REFERENCE_KEYS, where)
        if "bibtex" in reference and not isinstance(reference["bibtex"], str):
            raise ValueError(f"{where}: bibtex must be a string")
        if "metric_pattern" in reference:
            try:
                re.compile(reference["metric_pattern"])
            except (TypeError, re.error) as err:
                raise ValueError(f"{where}: metric_pattern must be a regular expression ({err})") from None
        if reference["id"] in seen:
            raise ValueError(f"{where}: id {reference['id']!r} appears twice")
        seen.add(reference["id"])
    return references


def reference_applies(reference: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether a published ``reference`` belongs beside a recorded result ``entry``: the same
    ``dataset``, and the entry's metric matches the reference's ``metric_pattern`` if it has one."""
    if reference["dataset"] != entry["dataset"]:
        return False
    pattern = reference.get("metric_pattern")
    return pattern is None or re.search(pattern, entry["metric"]) is not None


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def _finite_float(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a single number, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if not isinstance(value, numbers.Real):  # int, float and NumPy's scalars; not text
        raise ValueError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {number!r}")
    return number


def _check_types(item: dict[str, Any], keys: dict[str, type | tuple[type, ...]], where: str) -> None:
    """Every key present with its type; floats finite (an int is taken for a float)."""
    missing = [key for key in keys if key not in item]
    if missing:
        raise ValueError(f"{where}: missing keys {missing}")
    for key, expected in keys.items():
        value = item[key]
        wants_float = expected is float or (isinstance(expected, tuple) and float in expected)
        if wants_float and isinstance(value, int) and not isinstance(value, bool):
            item[key] = value = float(value)  # a hand edit may write 2 for 2.0
        if isinstance(value, bool) and expected is not bool:
            raise ValueError(f"{where}: {key} must not be true or false")
        if not isinstance(value, expected):
            raise ValueError(f"{where}: {key} has type {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where}: {key} is not finite")


def _read_file(path: Path) -> list[dict[str, Any]]:
    """The validated entries of one results file; ValueError naming the file otherwise."""
    entries = _read_document(path, "entries")
    seen: set[str] = set()
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: entry {number}: expected an object, got {type(entry).__name__}")
        where = f"{path}: entry {number} ({entry.get('metric', 'no metric')!r})"
        _check_types(entry, REQUIRED_KEYS, where)
        if entry["chapter"] != path.stem:
            raise ValueError(f"{where}: chapter {entry['chapter']!r} differs from the file name {path.stem!r}")
        if entry["profile"] not in runtime.PROFILES:
            raise ValueError(f"{where}: unknown profile {entry['profile']!r}")
        if entry["metric"] in seen:
            raise ValueError(f"{where}: metric {entry['metric']!r} appears twice")
        seen.add(entry["metric"])
    return entries


def _read_document(path: Path, list_key: str) -> list[Any]:
    """The list under ``list_key`` of a ``{"schema_version": 1, list_key: [...]}`` file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable JSON file ({err})") from None
    if not isinstance(document, dict) or not isinstance(document.get(list_key), list):
        raise ValueError(f'{path}: expected an object {{"schema_version": {SCHEMA_VERSION}, "{list_key}": [...]}}')
    if document.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version must be {SCHEMA_VERSION}, got {document.get('schema_version')!r}")
    return document[list_key]


def _write_atomically(path: Path, document: dict[str, Any]) -> None:
    text = json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    # the mode of the file it replaces (a new one gets 0o644)
    with atomic_writer(path, mode=path.stat().st_mode & 0o777 if path.exists() else 0o644) as file:
        file.write(text.encode("utf-8"))
