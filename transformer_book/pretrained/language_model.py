r"""A real small language model in the book's own code: a LLaMA-architecture GGUF file (SmolLM2-135M-Instruct)
loaded into :class:`~transformer_book.models.modern.ModernGPT` (chapters 15-18, 20).

A GGUF file (llama.cpp's format) holds everything a model needs: its hyper-parameters and its
tokenizer as key-value metadata, and its tensors, most of them quantized in blocks
(:mod:`transformer_book.quantization`). :func:`read_gguf` reads both with llama.cpp's own
``gguf`` package; the book's :func:`~transformer_book.quantization.dequantize` turns the blocks
into float32 weights (the tests check it against ``gguf``'s on every tensor);
:func:`modern_config_from_gguf` reads the architecture, and the tensors go into the book's
``ModernGPT`` by name:

=========================  ==================================
GGUF                       book
=========================  ==================================
``token_embd``             ``embedding`` (and the tied output)
``blk.i.attn_norm``        ``blocks.i.norm1.gamma``
``blk.i.attn_q/k/v``       ``blocks.i.self_attn.w_q/w_k/w_v``
``blk.i.attn_output``      ``blocks.i.self_attn.w_o``
``blk.i.ffn_norm``         ``blocks.i.norm2.gamma``
``blk.i.ffn_gate/up``      ``blocks.i.ffn.w1/w3`` (SwiGLU)
``blk.i.ffn_down``         ``blocks.i.ffn.w2``
``output_norm``            ``norm.gamma``
=========================  ==================================

Nothing is permuted: llama.cpp's LLaMA rotates the adjacent feature pairs :math:`(2i, 2i+1)`,
as :class:`~transformer_book.positional.RotaryEmbedding` does (the converter that wrote the file
reordered the rows of :math:`W^Q` and :math:`W^K` from Hugging Face's halves convention). The
vocabulary, merges and special tokens become a
:class:`~transformer_book.tokenizers.bytebpe.ByteLevelBPE` with the file's pre-tokenizer, and the chat
template (Jinja) is kept to write prompts the way the model was instruction-tuned to read them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from transformer_book.models.modern import ModernGPT, ModernGPTConfig
from transformer_book.pretrained.catalogue import Checkpoint, CheckpointError, FetchedCheckpoint, fetch_checkpoint
from transformer_book.quantization import dequantize
from transformer_book.tokenizers.bytebpe import PRETOKENIZERS, ByteLevelBPE

__all__ = [
    "GGUFTensor",
    "GGUFFile",
    "PretrainedLM",
    "read_gguf",
    "modern_config_from_gguf",
    "gguf_tensor_names",
    "tokenizer_from_gguf",
    "load_gguf",
    "load_language_model",
]


class GGUFTensor(NamedTuple):
    """One tensor of a GGUF file: its ``kind`` (``"Q4_1"``, ``"Q8_0"``, ``"F32"``, ...), its
    ``shape`` in PyTorch's order (``(out, in)`` for a matrix) and its ``raw`` bytes."""

    kind: str
    shape: tuple[int, ...]
    raw: Any


class GGUFFile(NamedTuple):
    """A GGUF file read by :func:`read_gguf`: ``metadata`` (key -> value) and ``tensors`` (name -> :class:`~transformer_book.pretrained.language_model.GGUFTensor`)."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]


class PretrainedLM(NamedTuple):
    """What :func:`load_gguf` and :func:`load_language_model` return: the ``model`` (a
    :class:`~transformer_book.models.modern.ModernGPT` in eval mode, float32), its ``tokenizer``, the ``chat_template`` (Jinja,
    or ``None``), the special ids (``bos_id``, ``eos_id``), the file's ``metadata`` and, through
    the catalogue, ``fetched`` (where the file came from)."""

    model: ModernGPT
    tokenizer: ByteLevelBPE
    chat_template: str | None
    bos_id: int | None
    eos_id: int | None
    metadata: dict[str, Any]
    fetched: FetchedCheckpoint | None

    def describe(self) -> str:
        """One line: the name, where it came from, its size and the pinned hash of its file."""
        c = self.model.config
        n = sum(p.numel() for p in self.model.parameters())
        where = (
            f"{self.fetched.entry.name} from the {self.fetched.source}"
            if self.fetched is not None
            else str(self.metadata.get("general.name", "a GGUF file"))
        )
        digest = (
            f"; {self.fetched.entry.weights.name} sha256 {self.fetched.entry.weights.sha256[:16]}..."
            if self.fetched is not None
            else ""
        )
        return (
            f"{where}: {n:,} parameters ({c.n_layers} layers, width {c.d_model}, {c.n_heads} query heads, "
            f"{c.kv_heads} key/value heads), {len(self.tokenizer):,} tokens{digest}"
        )

    def chat_prompt(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True) -> str:
        """``messages`` (``[{"role": "user", "content": ...}, ...]``) written with the model's chat
        template, ending with the assistant's turn opened when ``add_generation_prompt``.

        Raises:
            ValueError: the file has no chat template, or ``messages`` is not a list of role/content dicts.
        """
        if self.chat_template is None:
            raise ValueError("chat_prompt: this model's file has no chat template")
        if isinstance(messages, (str, Mapping)) or not all(
            isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise ValueError("chat_prompt: messages must be a list of {'role': str, 'content': str} dicts")
        try:
            import jinja2
        except ImportError as err:  # pragma: no cover - a dependency of the package
            raise ImportError("chat_prompt needs jinja2: pip install jinja2") from err
        environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        return environment.from_string(self.chat_template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt
        )


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """The metadata and tensors of a GGUF file, through llama.cpp's ``gguf`` package (memory-mapped).

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: the file is not a GGUF file, or is cut short (a tensor ends past its end).
    """
    try:
        from gguf import GGUFReader
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ImportError("reading GGUF files needs llama.cpp's gguf package: pip install gguf") from err
    path = Path(path)
    try:
        reader = GGUFReader(str(path))
    except FileNotFoundError:
        raise
    except Exception as err:  # any failure of the parser: a file it cannot read
        raise CheckpointError(
            f"{path}: not a GGUF file this reader understands ({type(err).__name__}: {err})"
        ) from None
    size = path.stat().st_size
    for tensor in reader.tensors:  # a memory map cut short would hand back shorter arrays
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size:
            raise CheckpointError(
                f"{path}: cut short: tensor {tensor.name} ends at byte {end:,}, the file has "
                f"{size:,} (an interrupted download or copy?)"
            )
    metadata = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        try:
            metadata[name] = field.contents()
        except Exception:  # a field type the reader cannot turn into Python
            continue
    tensors = {
        t.name: GGUFTensor(t.tensor_type.name, tuple(int(s) for s in reversed(t.shape.tolist())), t.data)
        for t in reader.tensors
    }
    return GGUFFile(path, metadata, tensors)


def modern_config_from_gguf(metadata: Mapping[str, Any]) -> ModernGPTConfig:
    """The :class:`~transformer_book.models.modern.ModernGPTConfig` of a LLaMA-architecture GGUF file's metadata.

    Raises:
        CheckpointError: another architecture, a missing key, a rotary dimension other than the
            head width, or a vocabulary size that does not match the tokens.
    """
    architecture = metadata.get("general.architecture")
    if architecture != "llama":
        raise CheckpointError(
            f"modern_config_from_gguf: architecture {architecture!r}; only 'llama' files load into ModernGPT"
        )
    needed = [
        "block_count",
        "context_length",
        "embedding_length",
        "feed_forward_length",
        "attention.head_count",
        "attention.head_count_kv",
        "attention.layer_norm_rms_epsilon",
    ]
    missing = [f"llama.{k}" for k in needed if f"llama.{k}" not in metadata]
    if missing:
        raise CheckpointError(f"modern_config_from_gguf: the file's metadata lacks {missing}")
    d_model, n_heads = int(metadata["llama.embedding_length"]), int(metadata["llama.attention.head_count"])
    rope_dimensions = int(metadata.get("llama.rope.dimension_count", d_model // n_heads))
    if rope_dimensions != d_model // n_heads:
        raise CheckpointError(
            f"modern_config_from_gguf: rotary positions on {rope_dimensions} of each head's "
            f"{d_model // n_heads} features; ModernGPT rotates them all"
        )
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab_size = int(metadata.get("llama.vocab_size", len(tokens) if tokens is not None else 0))
    if tokens is not None and len(tokens) != vocab_size:
        raise CheckpointError(f"modern_config_from_gguf: {len(tokens)} tokens but a vocabulary of {vocab_size}")
    return ModernGPTConfig(
        vocab_size=vocab_size,
        context=int(metadata["llama.context_length"]),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(metadata["llama.attention.head_count_kv"]),
        n_layers=int(metadata["llama.block_count"]),
        d_ff=int(metadata["llama.feed_forward_length"]),
        dropout=0.0,
        tie_output="output.weight" not in metadata.get("_tensor_names", ()),
        rope_base=float(metadata.get("llama.rope.freq_base", 10000.0)),
        norm_eps=float(metadata["llama.attention.layer_norm_rms_epsilon"]),
    )


def gguf_tensor_names(n_layers: int, *, tied: bool = True) -> dict[str, str]:
    """``{GGUF name: ModernGPT name}`` for every tensor of a LLaMA file with ``n_layers`` blocks
    (``output.weight`` too when the output layer is not ``tied`` to the embedding)."""
    names = {"token_embd.weight": "embedding.weight", "output_norm.weight": "norm.gamma"}
    if not tied:
        names["output.weight"] = "output.weight"
    for i in range(n_layers):
        theirs, ours = f"blk.{i}.", f"blocks.{i}."
        names.update(
            {
                f"{theirs}attn_norm.weight": f"{ours}norm1.gamma",
                f"{theirs}attn_q.weight": f"{ours}self_attn.w_q.weight",
                f"{theirs}attn_k.weight": f"{ours}self_attn.w_k.weight",
                f"{theirs}attn_v.weight": f"{ours}self_attn.w_v.weight",
                f"{theirs}attn_output.weight": f"{ours}self_attn.w_o.weight",
                f"{theirs}ffn_norm.weight": f"{ours}norm2.gamma",
                f"{theirs}ffn_gate.weight": f"{ours}ffn.w1.weight",
                f"{theirs}ffn_up.weight": f"{ours}ffn.w3.weight",
                f"{theirs}ffn_down.weight": f"{ours}ffn.w2.weight",
            }
        )
    return names


def tokenizer_from_gguf(metadata: Mapping[str, Any]) -> ByteLevelBPE:
    """The byte-level BPE tokenizer of a GGUF file (``tokenizer.ggml.model`` ``"gpt2"``): its tokens
    in id order, its merges, its control tokens as special tokens, its pre-tokenizer.

    Raises:
        CheckpointError: another tokenizer model, or a pre-tokenizer the book does not have.
    """
    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise CheckpointError(f"tokenizer_from_gguf: tokenizer model {model!r}; only byte-level BPE ('gpt2') is read")
    pre = metadata.get("tokenizer.ggml.pre", "gpt2")
    pretokenizer = "gpt2" if pre in ("default", "gpt-2", "gpt2") else pre
    if pretokenizer not in PRETOKENIZERS:
        raise CheckpointError(f"tokenizer_from_gguf: pre-tokenizer {pre!r}; the book has {PRETOKENIZERS}")
    tokens = list(metadata["tokenizer.ggml.tokens"])
    kinds = list(metadata.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    specials = [token for token, kind in zip(tokens, kinds) if kind == 3]  # llama.cpp's CONTROL tokens
    merges = [tuple(merge.split(" ")) for merge in metadata["tokenizer.ggml.merges"]]
    try:
        return ByteLevelBPE(merges, specials, tokens=tokens, pretokenizer=pretokenizer)
    except ValueError as err:
        raise CheckpointError(f"tokenizer_from_gguf: {err}") from None


def load_gguf(
    path: str | os.PathLike[str], *, device: torch.device | str | None = None, fetched: FetchedCheckpoint | None = None
) -> PretrainedLM:
    """A LLaMA-architecture GGUF file as the book's :class:`~transformer_book.models.modern.ModernGPT` (float32, eval mode) with its
    tokenizer and chat template.

    Raises:
        CheckpointError: a missing tensor, a tensor of another shape than the configuration
            needs, an unknown tensor name (each named), or the errors of :func:`read_gguf`.
    """
    file = read_gguf(path)
    metadata = dict(file.metadata, _tensor_names=tuple(file.tensors))
    config = modern_config_from_gguf(metadata)
    names = gguf_tensor_names(config.n_layers, tied=config.tie_output)
    missing = sorted(set(names) - set(file.tensors))
    unknown = sorted(set(file.tensors) - set(names))
    if missing or unknown:
        raise CheckpointError(
            f"{file.path}: "
            + "; ".join(
                part
                for part in [
                    f"the file lacks {len(missing)} tensors, e.g. {missing[:3]}" if missing else "",
                    f"{len(unknown)} tensors are not LLaMA's, e.g. {unknown[:3]}" if unknown else "",
                ]
                if part
            )
        )
    model = ModernGPT(config)
    state = model.state_dict()
    with torch.no_grad():
        for theirs, ours in names.items():
            tensor = file.tensors[theirs]
            if tuple(tensor.shape) != tuple(state[ours].shape):
                raise CheckpointError(
                    f"{file.path}: {theirs} has shape {tensor.shape}, but {ours} of this "
                    f"configuration has {tuple(state[ours].shape)}"
                )
            try:
                state[ours].copy_(dequantize(tensor.raw, tensor.kind, tensor.shape))
            except ValueError as err:
                raise CheckpointError(f"{file.path}: {theirs}: {err}") from None
    model.eval()
    if device is not None:
        model = model.to(device)
    tokenizer = tokenizer_from_gguf(file.metadata)
    meta = file.metadata
    return PretrainedLM(
        model,
        tokenizer,
        meta.get("tokenizer.chat_template"),
        meta.get("tokenizer.ggml.bos_token_id"),
        meta.get("tokenizer.ggml.eos_token_id"),
        {k: v for k, v in meta.items() if not k.startswith("tokenizer.ggml.")},
        fetched,
    )


def load_language_model(
    name: str | Checkpoint = "SmolLM2-135M-Instruct", *, download: bool = True, device: torch.device | str | None = None
) -> PretrainedLM:
    """A catalogue language model (a GGUF file) fetched offline first and loaded by :func:`load_gguf`.

    Raises:
        CheckpointError: it cannot be fetched or verified, or its file does not load.
    """
    fetched = fetch_checkpoint(name, download=download)
    return load_gguf(fetched.paths[fetched.entry.weights.name], device=device, fetched=fetched)
