r"""Real pretrained checkpoints in the book's own models (chapter 15): Hugging Face ``transformers``
BERT and GPT-2 weights loaded into :class:`~transformer_book.models.bert.BERT` and
:class:`~transformer_book.models.gpt.GPT` by name mapping.

The book's BERT has the same pieces as ``transformers``' ``BertForPreTraining`` under other names,
so a checkpoint is a renaming away: ``bert.encoder.layer.3.attention.self.query.weight`` is
``encoder.layers.3.self_attn.w_q.weight``, ``...attention.output.LayerNorm.weight`` is
``...norm1.gamma``, and so on (:func:`bert_parameter_names` lists every pair). Nothing is
transposed: both store ``nn.Linear`` weights as ``(out, in)``. GPT-2 needs two more steps: its
``Conv1D`` layers store ``(in, out)`` (transposed here), and one ``c_attn`` matrix holds
:math:`W^Q, W^K, W^V` side by side (split here); its GELU is the tanh approximation
(``activation="gelu_tanh"``).

``transformers`` is an optional dependency (``pip install transformers accelerate``, or the extra
``pretrained`` of a git install); the functions here accept a model object or a plain state dict,
so only the caller needs it.
"""

from __future__ import annotations

import socket
from typing import Any

import torch
from torch import nn

from transformer_book.models.bert import BERT, BERTConfig
from transformer_book.models.gpt import GPT, GPTConfig

__all__ = [
    "hub_reachable",
    "bert_config_from_hf",
    "bert_parameter_names",
    "load_hf_bert",
    "gpt_config_from_hf",
    "load_hf_gpt2",
]

_LAYER = {
    "attention.self.query": "self_attn.w_q",
    "attention.self.key": "self_attn.w_k",
    "attention.self.value": "self_attn.w_v",
    "attention.output.dense": "self_attn.w_o",
    "intermediate.dense": "ffn.linear1",
    "output.dense": "ffn.linear2",
}
_LAYER_NORMS = {"attention.output.LayerNorm": "norm1", "output.LayerNorm": "norm2"}


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """Whether a TCP connection to ``host`` on port 443 opens within ``timeout`` seconds: the
    chapters ask before downloading a Hugging Face checkpoint, and skip the comparison offline."""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def bert_config_from_hf(hf_config: Any, **changes: Any) -> BERTConfig:
    """The :class:`~transformer_book.models.bert.BERTConfig` of a ``transformers.BertConfig``.

    Raises:
        ValueError: a configuration the book's BERT cannot represent (an activation other than
            exact GELU, a feed-forward width or head count that does not fit, ...).
    """
    for name in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
        "type_vocab_size",
        "layer_norm_eps",
        "hidden_act",
    ):
        if not hasattr(hf_config, name):
            raise ValueError(f"bert_config_from_hf: the configuration has no {name!r}; is it a BertConfig?")
    if hf_config.hidden_act != "gelu":
        raise ValueError(
            f"bert_config_from_hf: hidden_act {hf_config.hidden_act!r}; the book's BERT uses exact GELU ('gelu')"
        )
    if getattr(hf_config, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"bert_config_from_hf: position_embedding_type {hf_config.position_embedding_type!r}; "
            "only 'absolute' positions are supported"
        )
    values = dict(
        vocab_size=hf_config.vocab_size,
        max_len=hf_config.max_position_embeddings,
        d_model=hf_config.hidden_size,
        n_heads=hf_config.num_attention_heads,
        n_layers=hf_config.num_hidden_layers,
        d_ff=hf_config.intermediate_size,
        n_segments=hf_config.type_vocab_size,
        dropout=hf_config.hidden_dropout_prob,
        eps=hf_config.layer_norm_eps,
        pad_id=getattr(hf_config, "pad_token_id", 0) or 0,
    )
    return BERTConfig(**{**values, **changes})


def bert_parameter_names(n_layers: int) -> dict[str, str]:
    """``{transformers name: book name}`` for every parameter of a ``BertForPreTraining`` with
    ``n_layers`` layers (the decoder matrix, tied to the word embedding in both, is left out)."""
    names = {
        "bert.embeddings.word_embeddings.weight": "token_embedding.weight",
        "bert.embeddings.position_embeddings.weight": "positional.embedding.weight",
        "bert.embeddings.token_type_embeddings.weight": "segment_embedding.weight",
        "bert.embeddings.LayerNorm.weight": "embedding_norm.gamma",
        "bert.embeddings.LayerNorm.bias": "embedding_norm.beta",
        "bert.pooler.dense.weight": "pooler.weight",
        "bert.pooler.dense.bias": "pooler.bias",
        "cls.predictions.transform.dense.weight": "mlm_transform.weight",
        "cls.predictions.transform.dense.bias": "mlm_transform.bias",
        "cls.predictions.transform.LayerNorm.weight": "mlm_norm.gamma",
        "cls.predictions.transform.LayerNorm.bias": "mlm_norm.beta",
        "cls.predictions.bias": "mlm_bias",
        "cls.seq_relationship.weight": "nsp.weight",
        "cls.seq_relationship.bias": "nsp.bias",
    }
    for i in range(n_layers):
        theirs, ours = f"bert.encoder.layer.{i}.", f"encoder.layers.{i}."
        for a, b in _LAYER.items():
            names[f"{theirs}{a}.weight"], names[f"{theirs}{a}.bias"] = f"{ours}{b}.weight", f"{ours}{b}.bias"
        for a, b in _LAYER_NORMS.items():
            names[f"{theirs}{a}.weight"], names[f"{theirs}{a}.bias"] = f"{ours}{b}.gamma", f"{ours}{b}.beta"
    return names


def load_hf_bert(source: nn.Module | dict[str, torch.Tensor], config: BERTConfig) -> BERT:
    """A :class:`~transformer_book.models.bert.BERT` holding the weights of a ``transformers``
    ``BertForPreTraining`` (a model, or its ``state_dict``).

    A state dict of ``BertModel`` or ``BertForMaskedLM`` (no ``bert.`` prefix, or no NSP head)
    is accepted too: the missing heads keep their initialisation, and the returned model says
    which in its attribute ``missing_from_checkpoint``.

    Raises:
        ValueError: a tensor whose shape does not match ``config``, a checkpoint with names this
            mapping does not know, or one that lacks the encoder itself.
    """
    if not isinstance(config, BERTConfig):
        raise ValueError(f"load_hf_bert: config must be a BERTConfig, got {type(config).__name__}")
    state = source.state_dict() if isinstance(source, nn.Module) else dict(source)
    if state and not any(k.startswith(("bert.", "cls.")) for k in state):  # a BertModel's own names
        state = {f"bert.{k}": v for k, v in state.items()}
    names = bert_parameter_names(config.n_layers)
    ignored = {
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
        "bert.embeddings.position_ids",
        "bert.embeddings.token_type_ids",
    }
    unknown = sorted(k for k in state if k not in names and k not in ignored)
    if unknown:
        raise ValueError(
            f"load_hf_bert: {len(unknown)} names the mapping does not know, e.g. {unknown[:3]}; "
            f"is the checkpoint a BERT with {config.n_layers} layers?"
        )
    model = BERT(config)
    ours = model.state_dict()
    missing = sorted(b for a, b in names.items() if a not in state)
    if any(not (b.startswith(("mlm_", "nsp.", "pooler."))) for b in missing):
        raise ValueError(
            f"load_hf_bert: the checkpoint lacks encoder weights, e.g. "
            f"{[b for b in missing if not b.startswith(('mlm_', 'nsp.', 'pooler.'))][:3]}"
        )
    with torch.no_grad():
        for theirs, name in names.items():
            if theirs not in state:
                continue
            tensor = state[theirs]
            if tuple(tensor.shape) != tuple(ours[name].shape):
                raise ValueError(
                    f"load_hf_bert: {theirs} has shape {tuple(tensor.shape)}, but {name} of this "
                    f"configuration has {tuple(ours[name].shape)}"
                )
            ours[name].copy_(tensor)
    if "cls.predictions.decoder.bias" in state and "cls.predictions.bias" not in state:
        with torch.no_grad():
            model.mlm_bias.copy_(state["cls.predictions.decoder.bias"])
        missing.remove("mlm_bias")
    model.missing_from_checkpoint = missing
    return model


def gpt_config_from_hf(hf_config: Any, **changes: Any) -> GPTConfig:
    """The :class:`~transformer_book.models.gpt.GPTConfig` of a ``transformers.GPT2Config``.

    Raises:
        ValueError: a configuration the book's GPT cannot represent (another activation, scaled
            or re-ordered attention, a LayerNorm epsilon other than 1e-5).
    """
    for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "activation_function"):
        if not hasattr(hf_config, name):
            raise ValueError(f"gpt_config_from_hf: the configuration has no {name!r}; is it a GPT2Config?")
    if hf_config.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(
            f"gpt_config_from_hf: activation_function {hf_config.activation_function!r}; the mapping "
            "supports GPT-2's tanh GELU ('gelu_new')"
        )
    if getattr(hf_config, "scale_attn_by_inverse_layer_idx", False) or getattr(
        hf_config, "reorder_and_upcast_attn", False
    ):
        raise ValueError(
            "gpt_config_from_hf: scale_attn_by_inverse_layer_idx and reorder_and_upcast_attn are not supported"
        )
    if getattr(hf_config, "layer_norm_epsilon", 1e-5) != 1e-5:
        raise ValueError(
            f"gpt_config_from_hf: layer_norm_epsilon {hf_config.layer_norm_epsilon}; the book's GPT uses 1e-5"
        )
    values = dict(
        vocab_size=hf_config.vocab_size,
        context=hf_config.n_positions,
        d_model=hf_config.n_embd,
        n_heads=hf_config.n_head,
        n_layers=hf_config.n_layer,
        d_ff=hf_config.n_inner,
        dropout=hf_config.resid_pdrop,
        activation="gelu_tanh",
        tie_output=True,
    )
    return GPTConfig(**{**values, **changes})


def _check_gpt2_config(config: GPTConfig) -> None:
    if not isinstance(config, GPTConfig):
        raise ValueError(f"load_hf_gpt2: config must be a GPTConfig, got {type(config).__name__}")
    if config.activation != "gelu_tanh" or not config.tie_output:
        raise ValueError(
            "load_hf_gpt2: GPT-2 needs activation='gelu_tanh' and tie_output=True (see gpt_config_from_hf)"
        )


def load_hf_gpt2(source: nn.Module | dict[str, torch.Tensor], config: GPTConfig) -> GPT:
    """A :class:`~transformer_book.models.gpt.GPT` holding the weights of a ``transformers``
    ``GPT2LMHeadModel`` or ``GPT2Model`` (a model, or its ``state_dict``).

    Raises:
        ValueError: ``config`` without ``activation="gelu_tanh"`` or with an untied output, a
            tensor whose shape does not match, or names the mapping does not know.
    """
    _check_gpt2_config(config)
    state = source.state_dict() if isinstance(source, nn.Module) else dict(source)
    if state and not any(k.startswith("transformer.") for k in state):  # a GPT2Model's own names
        state = {f"transformer.{k}": v for k, v in state.items()}
    d = config.d_model
    pieces: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name in ("lm_head.weight",) or name.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # the output matrix is the embedding; the causal-mask buffers of old checkpoints
        parts = name.split(".")
        if name == "transformer.wte.weight":
            pieces["embedding.weight"] = tensor
        elif name == "transformer.wpe.weight":
            pieces["positional.embedding.weight"] = tensor
        elif name in ("transformer.ln_f.weight", "transformer.ln_f.bias"):
            pieces[f"blocks.norm.{'gamma' if parts[-1] == 'weight' else 'beta'}"] = tensor
        elif parts[:2] == ["transformer", "h"] and len(parts) == 5 and parts[3] in ("ln_1", "ln_2"):
            norm = "norm1" if parts[3] == "ln_1" else "norm2"
            pieces[f"blocks.layers.{parts[2]}.{norm}.{'gamma' if parts[4] == 'weight' else 'beta'}"] = tensor
        elif parts[:2] == ["transformer", "h"] and len(parts) == 6:
            ours, module, kind = f"blocks.layers.{parts[2]}.", f"{parts[3]}.{parts[4]}", parts[5]
            if module == "attn.c_attn":
                for letter, chunk in zip("qkv", tensor.split(d, dim=-1)):
                    pieces[f"{ours}self_attn.w_{letter}.{kind}"] = chunk.t() if kind == "weight" else chunk
            elif module in ("attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                target = {"attn.c_proj": "self_attn.w_o", "mlp.c_fc": "ffn.linear1", "mlp.c_proj": "ffn.linear2"}[
                    module
                ]
                pieces[f"{ours}{target}.{kind}"] = tensor.t() if kind == "weight" else tensor
            else:
                raise ValueError(f"load_hf_gpt2: the mapping does not know {name!r}")
        else:
            raise ValueError(f"load_hf_gpt2: the mapping does not know {name!r}")
    model = GPT(config)
    ours_state = model.state_dict()
    missing = sorted(set(ours_state) - set(pieces) - {"output.weight"})
    if missing:
        raise ValueError(f"load_hf_gpt2: the checkpoint lacks {len(missing)} weights, e.g. {missing[:3]}")
    with torch.no_grad():
        for name, tensor in pieces.items():
            if name not in ours_state:
                raise ValueError(f"load_hf_gpt2: {name} does not exist in a GPT with {config.n_layers} layers")
            if tuple(tensor.shape) != tuple(ours_state[name].shape):
                raise ValueError(
                    f"load_hf_gpt2: {name} would get shape {tuple(tensor.shape)}, the model has "
                    f"{tuple(ours_state[name].shape)}"
                )
            ours_state[name].copy_(tensor)
    return model
