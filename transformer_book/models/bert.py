r"""BERT (Devlin et al., 2019): a bidirectional encoder pretrained by masked-language modelling
and next-sentence prediction (chapter 13).

.. math::

    H^{(0)} = \operatorname{LN}\bigl(E_{tok}[x] + E_{seg}[s] + E_{pos}[0{:}n]\bigr), \qquad
    H^{(l)} = \operatorname{Block}_l\bigl(H^{(l-1)};\ M^{\text{pad}}\bigr)

The blocks are chapter 6's encoder layers in their post-LN form (as the original BERT), with
GELU and every position attending to every non-padding position: nothing is hidden from a
token except what the input itself hides behind ``[MASK]``. Two heads sit on top:

* masked-language modelling, at the selected positions only,
  :math:`P(x_t \mid \tilde{x}) = \operatorname{softmax}\bigl(\operatorname{LN}(\operatorname{GELU}
  (H_t W_T + b_T))\, E_{tok}^\top + b\bigr)`, its output matrix tied to the token embedding;
* next-sentence prediction on the pooled ``[CLS]`` vector,
  :math:`P(\text{IsNext}) = \operatorname{softmax}\bigl(\tanh(H_0 W_P + b_P)\, W_{NSP} + b_{NSP}\bigr)`.

The pretraining loss (:func:`pretraining_loss`) is the MLM cross-entropy averaged over the
selected positions only (never over padding or unselected tokens) plus the NSP cross-entropy.
:func:`parameter_count` gives the number of weights of any configuration by formula;
building :meth:`BERTConfig.base` on PyTorch's ``meta`` device checks it without allocating.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks
from transformer_book.contracts import IGNORE_INDEX
from transformer_book.layers import LayerNorm
from transformer_book.masks import padding_mask
from transformer_book.models.transformer import Encoder
from transformer_book.positional import position_encoding, position_names

__all__ = [
    "BERT",
    "BERTConfig",
    "POSITIONS",
    "BERTOutput",
    "PretrainingLoss",
    "parameter_count",
    "parameter_breakdown",
    "mean_pool",
    "pretraining_loss",
    "bert_loss",
    "evaluate_pretraining",
    "IGNORE_INDEX",
]

_WAYS = ("embedding", "bias")
"""The ways positions may enter a :class:`BERT`: added to the embeddings, or as a bias on the
attention scores (its attention rotates nothing)."""

POSITIONS = position_names(_WAYS)
"""The position encodings a :class:`BERT` takes: a learned vector per position (BERT's), the
sinusoidal table, or ALiBi's biases (MosaicBERT's)."""


@dataclass(frozen=True)
class BERTConfig:
    """Hyper-parameters of :class:`BERT`.

    ``max_len`` is the longest input (the number of learned positions); ``d_ff`` defaults to
    ``4 * d_model``;
    ``eps`` is the LayerNorms' epsilon (BERT's own code uses ``1e-12``); ``pad_id`` marks
    padding, which no position attends to. ``norm_first=True`` uses pre-LN layers with a final
    LayerNorm (chapter 5) instead of BERT's post-LN: the same model family, easier to train
    fast at a high learning rate. ``position`` names one of :data:`POSITIONS`, built by
    :func:`~transformer_book.positional.position_encoding` when :class:`BERT` asks for it:
    ``"learned"`` (BERT: one trained vector per position, added to the input), ``"sinusoidal"``
    (a fixed table added instead) or ``"alibi"`` (no position vector; every attention layer adds
    ALiBi's fixed distance penalty, :class:`~transformer_book.positional.ALiBi`, as MosaicBERT
    replaced BERT's learned positions). :meth:`base` and :meth:`large` give the two sizes of the paper.
    """

    vocab_size: int
    max_len: int = 512
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    d_ff: int | None = None
    n_segments: int = 2
    dropout: float = 0.1
    eps: float = 1e-12
    pad_id: int = 0
    norm_first: bool = False
    position: str = "learned"

    def __post_init__(self) -> None:
        checks.positive_int(
            "BERTConfig",
            vocab_size=self.vocab_size,
            max_len=self.max_len,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            n_segments=self.n_segments,
        )
        if self.d_ff is not None:
            checks.positive_int("BERTConfig", d_ff=self.d_ff)
        checks.divisible("BERTConfig", "d_model", self.d_model, "n_heads", self.n_heads)
        checks.probability("BERTConfig", "dropout", self.dropout)
        checks.finite_real("BERTConfig", "eps", self.eps, above=0)
        checks.boolean("BERTConfig", norm_first=self.norm_first)
        checks.integer("BERTConfig", "pad_id", self.pad_id, minimum=0, below=self.vocab_size)

    @property
    def ff_width(self) -> int:
        """The feed-forward width, ``d_ff`` or ``4 * d_model``."""
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @classmethod
    def base(cls, vocab_size: int = 30_522, **changes: Any) -> BERTConfig:
        """BERT-base: 12 layers, width 768, 12 heads, 512 positions (the paper's "110M")."""
        return cls(vocab_size, **{**dict(max_len=512, d_model=768, n_heads=12, n_layers=12), **changes})

    @classmethod
    def large(cls, vocab_size: int = 30_522, **changes: Any) -> BERTConfig:
        """BERT-large: 24 layers, width 1024, 16 heads, 512 positions (the paper's "340M")."""
        return cls(vocab_size, **{**dict(max_len=512, d_model=1024, n_heads=16, n_layers=24), **changes})


def _check_config(where: str, config: BERTConfig) -> None:
    if not isinstance(config, BERTConfig):
        raise ValueError(f"{where}: config must be a BERTConfig, got {type(config).__name__}")


def parameter_breakdown(config: BERTConfig) -> dict[str, int]:
    r"""The number of weights of each part of :class:`BERT`, by formula.

    With :math:`V` words, :math:`P` positions, :math:`S` segments, width :math:`d`,
    feed-forward width :math:`d_{ff}` and :math:`L` layers:

    .. math::

        \text{embeddings} &= (V + P + S)\, d + 2d \quad (P = 0 \text{ unless the positions are learned}) \\
        \text{one layer} &= \underbrace{4(d^2 + d)}_{W_Q, W_K, W_V, W_O}
            + \underbrace{2 d\, d_{ff} + d_{ff} + d}_{\text{FFN}} + \underbrace{4d}_{\text{2 LayerNorms}} \\
        \text{final LayerNorm} &= 2d \ \text{(pre-LN only)}, \qquad
        \text{pooler} = d^2 + d, \qquad
        \text{MLM head} = d^2 + d + 2d + V \ \text{(its output matrix is } E_{tok}\text{)}, \qquad
        \text{NSP head} = 2d + 2

    Returns:
        ``{"embeddings", "encoder", "pooler", "mlm_head", "nsp_head"}`` (``"encoder"`` is
        :math:`L` times one layer, plus the final LayerNorm of a pre-LN model). The encoder model that the paper sizes (BERT-base 110M,
        BERT-large 340M) is embeddings + encoder + pooler.
    """
    _check_config("parameter_breakdown", config)
    V, P, S, d, f, L = (
        config.vocab_size,
        config.max_len,
        config.n_segments,
        config.d_model,
        config.ff_width,
        config.n_layers,
    )
    layer = 4 * (d * d + d) + (2 * d * f + f + d) + 4 * d
    if config.position != "learned":
        P = 0  # no position vector is learned
    return {
        "embeddings": (V + P + S) * d + 2 * d,
        "encoder": L * layer + (2 * d if config.norm_first else 0),
        "pooler": d * d + d,
        "mlm_head": d * d + d + 2 * d + V,
        "nsp_head": 2 * d + 2,
    }


def parameter_count(config: BERTConfig, *, heads: bool = False) -> int:
    """Weights of the encoder model (embeddings, layers, pooler) by formula; with
    ``heads=True`` also the MLM and NSP heads. See :func:`parameter_breakdown`."""
    parts = parameter_breakdown(config)
    return sum(v for k, v in parts.items() if heads or k not in ("mlm_head", "nsp_head"))


class BERTOutput(NamedTuple):
    """What :meth:`BERT.forward` returns: ``hidden (B, n, d_model)``, ``mlm_logits
    (B, n, vocab_size)`` and ``nsp_logits (B, 2)`` (index 1 = "IsNext")."""

    hidden: torch.Tensor
    mlm_logits: torch.Tensor
    nsp_logits: torch.Tensor


class BERT(nn.Module):
    """BERT: token, segment and position embeddings, a post-LN encoder, MLM and NSP heads.

    Sub-modules: ``token_embedding``, ``segment_embedding``, ``positional`` (the
    :class:`~transformer_book.positional.PositionEncoding` named by ``config.position``: with ALiBi
    it adds nothing to the embeddings, and every attention layer adds its biases instead),
    ``embedding_norm`` (then ``embedding_dropout``), ``encoder`` (an
    :class:`~transformer_book.models.transformer.Encoder` of post-LN GELU layers, or pre-LN
    ones with a final LayerNorm when ``config.norm_first``), ``pooler``
    (dense + tanh on the ``[CLS]`` position), ``mlm_transform`` and ``mlm_norm`` with
    ``mlm_bias`` (the output matrix is ``token_embedding.weight``) and ``nsp``.

    Initialisation as BERT's code: weight matrices and embeddings
    :math:`\\mathcal{N}(0, 0.02^2)`, biases zero, LayerNorms gamma 1 and beta 0.

    Shapes: ``tokens`` ``(B, n)`` integer ids with ``n <= max_len``, ``segments`` ``(B, n)``
    ids in ``[0, n_segments)`` (default all 0). Padding (``pad_id``) is excluded as a key.

    Files written before the position encodings had one factory name the learned table
    ``position_embedding.weight``: ``load_state_dict`` (and so
    :func:`~transformer_book.checkpoints.load_model`) reads them, by ``renamed_keys``.
    """

    renamed_keys: ClassVar[dict[str, str]] = {"position_embedding.weight": "positional.embedding.weight"}
    """Old state-dict keys and the names they have now."""

    def __init__(self, config: BERTConfig) -> None:
        super().__init__()
        if not isinstance(config, BERTConfig):
            raise ValueError(f"BERT: config must be a BERTConfig, got {type(config).__name__}")
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.segment_embedding = nn.Embedding(c.n_segments, c.d_model)
        # initialise=False: reset_parameters below draws every weight, the learned table's too
        self.positional = position_encoding(
            c.position,
            d_model=c.d_model,
            n_heads=c.n_heads,
            max_len=c.max_len,
            initialise=False,
            ways=_WAYS,
            where="BERT",
        )
        self.embedding_norm = LayerNorm(c.d_model, c.eps)
        self.embedding_dropout = nn.Dropout(c.dropout)
        self.encoder = Encoder(
            c.n_layers,
            c.d_model,
            c.n_heads,
            c.ff_width,
            c.dropout,
            norm_first=c.norm_first,
            activation="gelu",
            eps=c.eps,
        )
        self.pooler = nn.Linear(c.d_model, c.d_model)
        self.mlm_transform = nn.Linear(c.d_model, c.d_model)
        self.mlm_norm = LayerNorm(c.d_model, c.eps)
        self.mlm_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.nsp = nn.Linear(c.d_model, 2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """BERT's initialisation (see the class docstring), in a fixed order: seeded runs repeat."""
        for name, parameter in self.named_parameters():
            if parameter.dim() >= 2:
                nn.init.normal_(parameter, std=0.02)
            elif not name.endswith(("gamma", "beta")):
                nn.init.zeros_(parameter)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for old, new in self.renamed_keys.items():  # a file of before the rename
            if prefix + old in state_dict and prefix + new not in state_dict:
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def _check(self, tokens: torch.Tensor, segments: torch.Tensor | None) -> torch.Tensor:
        c = self.config
        checks.id_tensor("BERT", "tokens", tokens, "(B, n)")
        B, n = tokens.shape
        if B == 0 or n == 0:
            raise ValueError(f"BERT: tokens have shape {(B, n)}; at least one sequence and one token")
        if n > c.max_len:
            raise ValueError(f"BERT: {n} positions exceed max_len={c.max_len}")
        checks.ids_within("BERT", "tokens", tokens, c.vocab_size)
        if segments is None:
            return torch.zeros_like(tokens)
        if (
            not isinstance(segments, torch.Tensor)
            or segments.shape != tokens.shape
            or segments.dtype.is_floating_point
            or segments.dtype == torch.bool
        ):
            what = (
                f"shape {tuple(segments.shape)}, dtype {segments.dtype}"
                if isinstance(segments, torch.Tensor)
                else type(segments).__name__
            )
            raise ValueError(f"BERT: segments must be an integer tensor of the tokens' shape {(B, n)}, got {what}")
        if not checks.compiling() and (segments.min() < 0 or segments.max() >= c.n_segments):
            raise ValueError(
                f"BERT: segments hold ids in [{int(segments.min())}, {int(segments.max())}], outside "
                f"[0, {c.n_segments})"
            )
        return segments

    def embed(self, tokens: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        r""":math:`H^{(0)} = \operatorname{dropout}(\operatorname{LN}(E_{tok}[x] + E_{seg}[s] + E_{pos}[0{:}n]))`,
        ``(B, n, d_model)`` (without :math:`E_{pos}` with ALiBi, whose positions bias the attention)."""
        segments = self._check(tokens, segments)
        x = self.positional.add(self.token_embedding(tokens) + self.segment_embedding(segments))
        return self.embedding_dropout(self.embedding_norm(x))

    def encode(self, tokens: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer's hidden states ``(B, n, d_model)``; padding keys are excluded, and with
        ALiBi every layer's scores get the distance penalty."""
        x, n = self.embed(tokens, segments), tokens.shape[1]
        bias = self.positional.attention_bias(n, n)  # None unless the positions bias the scores
        return self.encoder(x, padding_mask(tokens, self.config.pad_id), bias=bias)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scores over the vocabulary for hidden states ``(..., d_model)`` -> ``(..., vocab_size)``:
        :math:`\\operatorname{LN}(\\operatorname{GELU}(h W_T + b_T))\\, E_{tok}^\\top + b`."""
        h = self.mlm_norm(F.gelu(self.mlm_transform(hidden)))
        return F.linear(h, self.token_embedding.weight, self.mlm_bias)

    def nsp_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``(B, 2)`` next-sentence scores from the pooled ``[CLS]`` state
        :math:`\\tanh(H_0 W_P + b_P)`; index 1 means "B follows A"."""
        return self.nsp(torch.tanh(self.pooler(hidden[:, 0])))

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor | None = None) -> BERTOutput:
        hidden = self.encode(tokens, segments)
        return BERTOutput(hidden, self.mlm_logits(hidden), self.nsp_logits(hidden))

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"vocab_size={c.vocab_size}, max_len={c.max_len}, d_model={c.d_model}, n_layers={c.n_layers}, "
            f"position={c.position!r}"
        )


def mean_pool(hidden: torch.Tensor, tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    r"""The mean of the states of the non-padding positions, :math:`h = \frac{1}{n}\sum_{t:\,x_t \ne
    \text{PAD}} H_t`: ``hidden (B, n, d)`` and ``tokens (B, n)`` -> ``(B, d)``. A sentence
    encoder's vector (all-MiniLM-L6-v2's, before it is scaled to unit length), and the pooling of
    a classifier whose ``[CLS]`` state no pretraining loss read.

    Raises:
        ValueError: a row of nothing but padding (its mean would be 0/0).
    """
    real = (tokens != pad_id).unsqueeze(-1).to(hidden.dtype)  # (B, n, 1)
    count = real.sum(dim=1)
    if bool((count == 0).any()):
        raise ValueError("mean_pool: a row holds nothing but padding")
    return (hidden * real).sum(dim=1) / count


class PretrainingLoss(NamedTuple):
    """One batch's pretraining losses: ``total = mlm + nsp`` (for back-propagation), the MLM
    loss averaged over the ``n_predictions`` selected positions, the NSP loss averaged over the
    ``n_pairs`` pairs, and ``nsp_correct``, the number of pairs classified right. Without
    next-sentence prediction ``total = mlm`` and ``nsp``, ``nsp_correct`` are ``None``.

    The two counts are 0-d integer tensors on the model's device (``int()`` reads one): reading
    them back inside the loss would make a GPU wait for every step, and break a compiled step."""

    total: torch.Tensor
    mlm: torch.Tensor
    nsp: torch.Tensor | None
    nsp_correct: torch.Tensor | None
    n_predictions: torch.Tensor
    n_pairs: int


def _batch_fields(batch: Any, nsp: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fields of a :class:`~transformer_book.contracts.PretrainingBatch`, checked: targets of the
    tokens' shape with at least one selected position, and one ``is_next`` per row (with NSP)."""
    try:
        tokens, segments, targets, is_next = batch.tokens, batch.segments, batch.targets, batch.is_next
    except AttributeError:
        raise ValueError(
            f"pretraining_loss: batch must have tokens, segments, targets and is_next "
            f"(a PretrainingBatch), got {type(batch).__name__}"
        ) from None
    if targets.shape != tokens.shape:
        raise ValueError(f"pretraining_loss: targets have shape {tuple(targets.shape)}, tokens {tuple(tokens.shape)}")
    if nsp and is_next.shape != tokens.shape[:1]:
        raise ValueError(f"pretraining_loss: is_next must have shape ({tokens.shape[0]},), got {tuple(is_next.shape)}")
    if not checks.compiling() and not bool((targets != IGNORE_INDEX).any()):
        raise ValueError("pretraining_loss: no position is selected for the MLM loss (targets are all IGNORE_INDEX)")
    return tokens, segments, targets, is_next


def pretraining_loss(model: BERT, batch: Any, *, nsp: bool = True) -> PretrainingLoss:
    r"""BERT's pretraining loss on one batch.

    .. math::

        \mathcal{L} = -\frac{1}{|S|} \sum_{(b, t) \in S} \log P(x_{b,t} \mid \tilde{x}_b)
        \;-\; \frac{1}{B} \sum_{b} \log P(\text{IsNext}_b \mid \tilde{x}_b)

    where :math:`S` is the set of selected positions (``targets != IGNORE_INDEX``). Only the
    selected positions go through the MLM head, which is also what makes it cheap: about 15%
    of the positions, never padding. With ``nsp=False`` the second term is left out (RoBERTa's
    pretraining: masked-language modelling alone) and ``is_next`` is not read.

    Args:
        model: a :class:`BERT`.
        batch: ``tokens (B, n)``, ``segments (B, n)``, ``targets (B, n)`` (the original id at
            selected positions, ``IGNORE_INDEX`` elsewhere) and ``is_next (B,)`` (1 when B
            follows A), e.g. a :class:`~transformer_book.data.pretraining.PretrainingBatch`.

    The counts come back as tensors (see :class:`PretrainingLoss`), so that nothing waits for the
    device; compiled, the step breaks only at the two selections ``[selected]``, whose size is known
    only at run time.

    Raises:
        ValueError: shapes that do not match, or a batch with no selected position (its MLM
            loss would be 0/0; not checked inside a compiled step, where such a batch gives a NaN
            loss, at which :func:`~transformer_book.training.fit` stops).
    """
    tokens, segments, targets, is_next = _batch_fields(batch, nsp)  # checked
    selected = targets != IGNORE_INDEX
    n_predictions = selected.sum()
    hidden = model.encode(tokens, segments)
    mlm = F.cross_entropy(model.mlm_logits(hidden[selected]), targets[selected])
    if not nsp:
        return PretrainingLoss(mlm, mlm, None, None, n_predictions, tokens.shape[0])
    nsp_scores = model.nsp_logits(hidden)
    nsp_loss = F.cross_entropy(nsp_scores, is_next)
    correct = (nsp_scores.argmax(dim=-1) == is_next).sum()
    return PretrainingLoss(mlm + nsp_loss, mlm, nsp_loss, correct, n_predictions, tokens.shape[0])


def bert_loss(
    log: list[dict[str, float]] | None = None, *, nsp: bool = True
) -> Callable[[nn.Module, Any], tuple[torch.Tensor, int]]:
    """The loss function for :func:`~transformer_book.training.fit`: ``(mlm + nsp, n_predictions)``,
    or ``(mlm, n_predictions)`` with ``nsp=False`` (see :func:`pretraining_loss`).

    With a list ``log``, every call also appends ``{"training", "mlm", "nsp", "nsp_correct",
    "n_predictions", "n_pairs"}`` to it, so that the MLM and NSP curves can be drawn apart
    (``training`` tells the training steps from the validation passes; ``nsp`` and
    ``nsp_correct`` are ``None`` without next-sentence prediction).
    """
    if log is not None and not isinstance(log, list):
        raise ValueError(f"bert_loss: log must be a list or None, got {type(log).__name__}")
    checks.boolean("bert_loss", nsp=nsp)

    def loss_fn(model: nn.Module, batch: Any) -> tuple[torch.Tensor, int]:
        result = pretraining_loss(model, batch, nsp=nsp)
        if log is not None:
            log.append(
                {
                    "training": model.training,
                    "mlm": result.mlm.item(),
                    "nsp": None if result.nsp is None else result.nsp.item(),
                    "nsp_correct": None if result.nsp_correct is None else int(result.nsp_correct),
                    "n_predictions": int(result.n_predictions),
                    "n_pairs": result.n_pairs,
                }
            )
        return result.total, result.n_predictions

    return loss_fn


@torch.no_grad()
def evaluate_pretraining(
    model: BERT, batches: Iterable[Any], device: torch.device | str | None = None, *, nsp: bool = True
) -> dict[str, float]:
    """MLM loss (weighted by selected positions), NSP loss and accuracy (weighted by pairs) over
    ``batches``, in eval mode (the mode is restored after).

    Returns:
        ``{"mlm_loss", "mlm_perplexity", "nsp_loss", "nsp_accuracy", "n_predictions", "n_pairs"}``;
        with ``nsp=False`` (a model pretrained without next-sentence prediction, whose NSP head
        is untrained) without the two NSP entries.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    mlm = nsp_total = 0.0
    correct = predictions = pairs = 0
    try:
        for batch in batches:
            batch = type(batch)(*(t.to(device) for t in batch))
            result = pretraining_loss(model, batch, nsp=nsp)
            selected = int(result.n_predictions)
            mlm += float(result.mlm) * selected
            if nsp:
                nsp_total += float(result.nsp) * result.n_pairs
                correct += int(result.nsp_correct)
            predictions += selected
            pairs += result.n_pairs
    finally:
        model.train(was_training)
    if pairs == 0:
        raise ValueError("evaluate_pretraining: batches yielded nothing")
    scores = {
        "mlm_loss": mlm / predictions,
        "mlm_perplexity": math.exp(mlm / predictions),
        "n_predictions": predictions,
        "n_pairs": pairs,
    }
    if nsp:
        scores.update(nsp_loss=nsp_total / pairs, nsp_accuracy=correct / pairs)
    return scores
