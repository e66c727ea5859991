"""Checkpoints and saved models: one checksummed file format, written atomically, and a registry
of the models and tokenizers that :func:`load_model` can rebuild.

A file holds ``{"sha256": ..., "payload": <torch.save bytes>}``: :func:`write_checkpoint`
computes the SHA-256 of the payload and writes both through
:func:`~transformer_book.atomic.atomic_writer`; :func:`read_checkpoint` unpickles only tensors and
plain values (``weights_only=True``), verifies the checksum and names the file in every error,
so that a truncated or damaged file is refused before anything is loaded from it. ``fit``'s
checkpoints and :func:`save_model`'s models are both such files.

:func:`save_model` stores a model's class name, its config (a dataclass), its weights and its
tokenizer; :func:`load_model` looks the class up in :data:`SAVABLE_MODELS` and rebuilds it. Files
written before a rename still load: :data:`RENAMED_CONFIG_FIELDS` gives config fields their
current names, and a model whose weights were renamed names the old keys in its
``renamed_keys`` (``{old: new}``), which its ``load_state_dict`` and :func:`check_model_matches`
read.
The registry names modules rather than importing them, so this module sits below the models
(nothing here imports a model until a file asks for one); :func:`register_model` adds a class of
one's own.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout
from torch import nn

from transformer_book.atomic import remove_stale, write_atomically

__all__ = [
    "MODEL_FORMAT_VERSION",
    "SAVABLE_MODELS",
    "RENAMED_CONFIG_FIELDS",
    "TOKENIZER_KINDS",
    "write_checkpoint",
    "read_checkpoint",
    "require_keys",
    "check_model_matches",
    "register_model",
    "save_model",
    "load_model",
]

MODEL_FORMAT_VERSION = 1
"""Format version of the files :func:`save_model` writes."""

SAVABLE_MODELS: dict[str, tuple[str, str, str]] = {
    "Transformer": ("transformer_book.models.transformer", "Transformer", "TransformerConfig"),
    "RNNSeq2Seq": ("transformer_book.models.rnn", "RNNSeq2Seq", "RNNSeq2SeqConfig"),
    "GPT": ("transformer_book.models.gpt", "GPT", "GPTConfig"),
    "BiLM": ("transformer_book.models.elmo", "BiLM", "BiLMConfig"),
    "BERT": ("transformer_book.models.bert", "BERT", "BERTConfig"),
    "ModernGPT": ("transformer_book.models.modern", "ModernGPT", "ModernGPTConfig"),
}
"""Every model the book trains, by class name, with the module, the model class and the config
class that rebuild it. Each is built as ``model_class(config_class(**config))`` and keeps its
config as ``model.config``."""

RENAMED_CONFIG_FIELDS: dict[str, dict[str, str]] = {
    "Transformer": {"positional": "position"},
}
"""Config fields that older files name otherwise, by model class (``{old: new}``)."""

TOKENIZER_KINDS: dict[str, tuple[str, str, str, str]] = {
    "sentencepiece": ("transformer_book.tokenizers.subword", "SubwordTokenizer", "to_bytes", ""),
    "wordpiece": ("transformer_book.tokenizers.wordpiece", "WordPieceTokenizer", "to_str", "from_str"),
}
"""Stored kind -> (module, class, method that serialises it, class method that rebuilds it, or
``""`` for the constructor)."""

_CHECKSUM, _PAYLOAD = "sha256", "payload"
_STALE_AFTER_S = 3600


def _resolve(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


@contextmanager
def writer_lock(path: str | os.PathLike[str], *, busy: str) -> Iterator[None]:
    """Hold the lock file beside ``path`` (``.<name>.lock``) for the block: :func:`~transformer_book.training.fit`
    holds it for a whole run with a ``checkpoint_path``, :func:`save_model` for one write, so that
    neither silently replaces a file the other is writing. A second writer, in this process or
    another, is refused at once with ``RuntimeError(busy)``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target.parent / f".{target.name}.lock"), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RuntimeError(f"{busy} (it holds {lock.lock_file})") from None
    try:
        yield
    finally:
        lock.release()


def write_checkpoint(obj: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """``torch.save`` ``obj`` with a SHA-256 checksum of its bytes, atomically: a crash mid-write
    leaves the previous file intact, and :func:`read_checkpoint` refuses a file changed since.
    Temporary files older than an hour that a killed writer left beside ``path`` are removed."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    payload = buffer.getvalue()
    outer = io.BytesIO()  # in memory first: a full disk then fails in a plain write, naming the file
    torch.save({_CHECKSUM: hashlib.sha256(payload).hexdigest(), _PAYLOAD: payload}, outer)
    remove_stale(path, older_than=_STALE_AFTER_S)
    write_atomically(path, outer.getvalue())


def read_checkpoint(path: str | os.PathLike[str], *, where: str = "read_checkpoint") -> dict[str, Any]:
    """The dict that :func:`write_checkpoint` (``fit``, :func:`save_model`) wrote to ``path``, its
    checksum verified (for a checkpoint of ``fit``, the keys ``step``, ``model``, ``optimizer``,
    ``config`` and more). Only tensors and plain values are unpickled. Files written before
    checksums (a dict with no ``payload``) load unchecked. Errors begin with ``where``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a truncated or corrupt file, or one that holds no dict, naming ``path``.
    """
    try:
        outer = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # truncated, not a torch file, or unpickling refused
        raise ValueError(
            f"{where}: {path} is not a readable checkpoint, truncated or corrupt "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from None
    if isinstance(outer, dict) and _PAYLOAD in outer:
        payload = outer[_PAYLOAD]
        if not isinstance(payload, bytes) or hashlib.sha256(payload).hexdigest() != outer.get(_CHECKSUM):
            raise ValueError(f"{where}: {path} is corrupt: its contents do not match the checksum written with them")
        try:
            outer = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        except Exception as err:
            raise ValueError(f"{where}: {path} holds an unreadable checkpoint ({type(err).__name__})") from None
    if not isinstance(outer, dict):
        raise ValueError(f"{where}: {path} holds a {type(outer).__name__}, not a checkpoint dict")
    return outer


def require_keys(state: dict[str, Any], types: dict[str, type | tuple[type, ...]], path: str, where: str) -> None:
    """Every key of ``types`` present in ``state`` with a value of that type, before anything is
    loaded; else a ValueError naming ``path`` and what is missing or wrong."""
    missing = sorted(k for k in types if k not in state)
    wrong = [
        f"{k} is a {type(state[k]).__name__}" for k, t in types.items() if k in state and not isinstance(state[k], t)
    ]
    if missing or wrong:
        problems = ([f"missing {missing}"] if missing else []) + wrong
        raise ValueError(f"{where}: {path} is not a complete checkpoint: {'; '.join(problems)}")


def check_model_matches(model: nn.Module, saved: dict[str, torch.Tensor], path: str, where: str) -> None:
    """The saved weights have exactly the model's keys and shapes; else a ValueError listing the
    missing and unexpected keys and the shape mismatches (nothing is loaded). Old keys that the
    model's ``renamed_keys`` names count under their new names, as its ``load_state_dict`` reads them."""
    current = model.state_dict()
    renamed = {old: new for old, new in getattr(model, "renamed_keys", {}).items() if new not in saved}
    saved = {renamed.get(k, k): v for k, v in saved.items()}
    missing = sorted(set(current) - set(saved))
    unexpected = sorted(set(saved) - set(current))
    shapes = [
        f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(current[k].shape)}"
        for k in current
        if k in saved and saved[k].shape != current[k].shape
    ]
    if missing or unexpected or shapes:
        parts = [
            f"missing keys {missing}" if missing else "",
            f"unexpected keys {unexpected}" if unexpected else "",
            f"shape mismatches [{'; '.join(shapes)}]" if shapes else "",
        ]
        raise ValueError(f"{where}: checkpoint {path} does not match the model: " + ", ".join(p for p in parts if p))


def register_model(model_class: type[nn.Module], config_class: type) -> None:
    """Let :func:`save_model` and :func:`load_model` handle ``model_class``, built as
    ``model_class(config_class(**config))`` with its config kept as ``model.config``."""
    if not (isinstance(model_class, type) and issubclass(model_class, nn.Module)):
        raise ValueError(f"register_model: model_class must be an nn.Module class, got {model_class!r}")
    if not (isinstance(config_class, type) and is_dataclass(config_class)):
        raise ValueError(f"register_model: config_class must be a dataclass, got {config_class!r}")
    SAVABLE_MODELS[model_class.__name__] = (model_class.__module__, model_class.__name__, config_class.__name__)


def _model_classes(name: str) -> tuple[type, type]:
    module, model_class, config_class = SAVABLE_MODELS[name]
    return _resolve(module, model_class), _resolve(module, config_class)


def _stored_tokenizer(tokenizer: Any) -> tuple[bytes | str | None, str | None]:
    if tokenizer is None:
        return None, None
    for kind, (module, name, dump, _) in TOKENIZER_KINDS.items():
        if type(tokenizer).__module__ == module and type(tokenizer).__name__ == name:
            return getattr(tokenizer, dump)(), kind
    raise ValueError(
        f"save_model: tokenizer must be a SubwordTokenizer or a WordPieceTokenizer, not {type(tokenizer).__qualname__}"
    )


def _rebuilt_tokenizer(stored: bytes | str | None, kind: str | None) -> Any:
    if stored is None:
        return None
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}")
    module, name, _, load = TOKENIZER_KINDS[kind]
    cls = _resolve(module, name)
    return getattr(cls, load)(stored) if load else cls(stored)


def save_model(
    path: str | os.PathLike[str],
    model: nn.Module,
    *,
    tokenizer: Any = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write a trained model so that :func:`load_model` rebuilds it: its class, its config, its
    weights, the tokenizer it reads and writes with (a ``SubwordTokenizer`` or a
    ``WordPieceTokenizer``), and ``metadata`` (plain values such as scores or the number of
    training steps). Written atomically, with a checksum, while holding the lock file that
    :func:`~transformer_book.training.fit` holds for its ``checkpoint_path``.

    The model must be the one its config builds: a model adapted with LoRA is refused (its
    weights live in ``LoRALinear`` layers that a fresh model does not have); save the merged model
    (:func:`~transformer_book.lora.merge_lora`, which loads as a plain model with the same
    outputs) or the adapters (:func:`~transformer_book.lora.lora_state_dict`).

    Raises:
        ValueError: a model of a class not in :data:`SAVABLE_MODELS`, another tokenizer, or a
            model whose weights a fresh model of its config would not take (LoRA layers).
        RuntimeError: another writer holds ``path`` (a :func:`~transformer_book.training.fit`
            run with it as ``checkpoint_path``, or a save in another process).
    """
    name = type(model).__name__
    if name not in SAVABLE_MODELS or not isinstance(model, _model_classes(name)[0]):
        raise ValueError(f"save_model: can save {sorted(SAVABLE_MODELS)}, not {type(model).__qualname__}")
    stored, kind = _stored_tokenizer(tokenizer)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    _check_rebuildable(model, state, path)
    with writer_lock(
        path,
        busy=f"save_model: {path} is being written by another writer (a run of fit with it as "
        f"checkpoint_path, or another save); wait for it, or save elsewhere",
    ):
        write_checkpoint(
            {
                "format_version": MODEL_FORMAT_VERSION,
                "class": name,
                "config": asdict(model.config),
                "model": state,
                "tokenizer": stored,
                "tokenizer_kind": kind,
                "metadata": dict(metadata or {}),
            },
            path,
        )
    return Path(path)


def _check_rebuildable(model: nn.Module, state: dict[str, torch.Tensor], path: str | os.PathLike[str]) -> None:
    """What :func:`load_model` will build from the config, ``model_class(config_class(**config))``,
    must take ``state`` as it is: a model changed after it was built (adapted with LoRA, a layer
    replaced) is refused before anything is written, naming what differs. The comparison builds
    the fresh model on PyTorch's meta device, which allocates no memory."""
    model_class, config_class = _model_classes(type(model).__name__)
    with torch.device("meta"):
        fresh = model_class(config_class(**asdict(model.config))).state_dict()
    extra, missing = sorted(set(state) - set(fresh)), sorted(set(fresh) - set(state))
    shapes = [k for k in state if k in fresh and state[k].shape != fresh[k].shape]
    if extra or missing or shapes:
        lora = any(k.endswith((".lora_a", ".lora_b")) for k in extra)
        raise ValueError(
            f"save_model: {type(model).__name__}'s weights do not match a fresh model of its config, so "
            f"{path} could not be loaded again (extra {extra[:4]}{'...' if len(extra) > 4 else ''}, "
            f"missing {missing[:4]}{'...' if len(missing) > 4 else ''}, other shapes {shapes[:4]})"
            + (
                "; the model has LoRA layers: save merge_lora(model) for the adapted model as a whole, or "
                "lora_state_dict(model) for the adapters alone"
                if lora
                else ""
            )
        )


def load_model(
    path: str | os.PathLike[str], *, device: torch.device | str = "cpu"
) -> tuple[nn.Module, Any, dict[str, Any]]:
    """Rebuild a model written by :func:`save_model`: ``(model in eval mode, tokenizer or None, metadata)``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is truncated, corrupt (its checksum does not match), not a model
            file of this format version, names a class not in :data:`SAVABLE_MODELS`, or holds a
            config, tokenizer or weights that do not fit; the message names the file.
    """
    saved = read_checkpoint(path, where="load_model")
    if saved.get("format_version") != MODEL_FORMAT_VERSION:
        raise ValueError(
            f"load_model: {path} has format version {saved.get('format_version')!r}, expected {MODEL_FORMAT_VERSION}"
        )
    if saved.get("class") not in SAVABLE_MODELS:
        raise ValueError(f"load_model: {path} holds a {saved.get('class')!r}; known classes: {sorted(SAVABLE_MODELS)}")
    require_keys(
        saved,
        {"config": dict, "model": dict, "tokenizer": (bytes, str, type(None)), "metadata": (dict, type(None))},
        str(path),
        "load_model",
    )
    model_class, config_class = _model_classes(saved["class"])
    try:
        renamed = RENAMED_CONFIG_FIELDS.get(saved["class"], {})
        model = model_class(config_class(**{renamed.get(k, k): v for k, v in saved["config"].items()}))
        tokenizer = _rebuilt_tokenizer(saved["tokenizer"], saved.get("tokenizer_kind", "sentencepiece"))
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        raise ValueError(
            f"load_model: {path} holds a damaged config or tokenizer ({type(err).__name__}: {err})"
        ) from None
    check_model_matches(model, saved["model"], str(path), "load_model")
    model.load_state_dict(saved["model"])
    return model.to(device).eval(), tokenizer, dict(saved.get("metadata") or {})
