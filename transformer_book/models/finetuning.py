r"""Fine-tuning heads on a pretrained BERT for four task shapes (chapter 14).

Each head is one new layer on top of the encoder's last hidden states :math:`H \in
\mathbb{R}^{n \times d}`; all the weights below it start from pretraining. Each is a
:class:`FineTuningHead`: it names the kind of targets it reads (``kind``, one of
:data:`~transformer_book.contracts.FINETUNING_KINDS`), and computes its own loss,
``loss(batch) -> (mean cross-entropy, count)``, and its own prediction, ``predict(batch)``.

* one sentence or a pair of sentences, one label (:class:`SequenceClassifier`, kind ``"class"``),
  from the pooled ``[CLS]`` vector as in pretraining's next-sentence head:
  :math:`P(y \mid x) = \operatorname{softmax}\bigl(\tanh(H_0 W_P + b_P)\, W_C + b_C\bigr)`
  (or from the mean of the token states, for a model pretrained without that head);
* one label per token (:class:`TokenTagger`, kind ``"tags"``):
  :math:`P(y_t \mid x) = \operatorname{softmax}(H_t W_T + b_T)`;
* an answer span in a passage (:class:`SpanExtractor`, kind ``"span"``), a start and an end
  score per token, :math:`s_t = H_t w_S + b_S` and :math:`e_t = H_t w_E + b_E`, trained with
  :math:`-\tfrac12(\log \operatorname{softmax}(s)_{i^*} + \log \operatorname{softmax}(e)_{j^*})`,
  and decoded as the best span :math:`\arg\max_{i \le j < i + L} s_i + e_j` (:func:`best_spans`).

:func:`finetuning_loss` and :func:`predict` call a head's own loss and prediction, the first in
the form that :func:`~transformer_book.training.fit` takes; :func:`freeze_encoder` keeps all but
the top layers fixed, to compare training the head alone with full fine-tuning.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks
from transformer_book.contracts import IGNORE_INDEX, FineTuningBatch
from transformer_book.lora import LoRALinear
from transformer_book.models.bert import BERT, mean_pool

__all__ = [
    "POOLINGS",
    "FineTuningHead",
    "SequenceClassifier",
    "TokenTagger",
    "SpanExtractor",
    "best_spans",
    "finetuning_loss",
    "predict",
    "freeze_encoder",
    "trainable_parameters",
]


POOLINGS = ("cls", "mean")
"""What :class:`SequenceClassifier` reads: the ``[CLS]`` state, or the mean of the token states."""


def _new_layer(d_model: int, outputs: int) -> nn.Linear:
    """A head's new layer, initialised as BERT's weights: N(0, 0.02^2), bias 0."""
    layer = nn.Linear(d_model, outputs)
    nn.init.normal_(layer.weight, std=0.02)
    nn.init.zeros_(layer.bias)
    return layer


def _check_head(where: str, bert: Any, dropout: float, *, pooling: str = POOLINGS[0], **sizes: Any) -> None:
    """The arguments of a head: a BERT, a dropout rate in [0, 1), positive sizes (at least two
    classes), and a known pooling."""
    if not isinstance(bert, BERT):
        raise ValueError(f"{where}: bert must be a BERT, got {type(bert).__name__}")
    checks.probability(where, "dropout", dropout)
    for name, size in sizes.items():
        checks.integer(where, name, size, minimum=2 if name == "n_classes" else 1)
    checks.choice(where, "pooling", pooling, POOLINGS)


def _outputs_fixed(bert: BERT) -> BERT:
    """``bert`` with the weights of its pretraining outputs (the MLM transform, its LayerNorm and
    bias, the NSP layer) fixed: no head uses them, so they stay as pretraining left them and count
    as neither trainable nor trained."""
    for module in (bert.mlm_transform, bert.mlm_norm, bert.nsp):
        module.requires_grad_(False)
    bert.mlm_bias.requires_grad_(False)
    return bert


class FineTuningHead(nn.Module, metaclass=ABCMeta):
    r"""What the heads share: a pretrained ``bert`` whose pretraining outputs are fixed (no head
    reads them), the ``kind`` of targets the head reads (``"class"``, ``"tags"`` or ``"span"``),
    whether it reads BERT's pooler (``reads_pooler``, for :func:`freeze_encoder`), and the two
    methods each head defines: :meth:`loss` and :meth:`predict`.

    Raises:
        ValueError: ``bert`` not a BERT, ``dropout`` outside [0, 1), or a bad size or pooling.
    """

    kind: ClassVar[str]
    reads_pooler: ClassVar[bool] = False

    def __init__(self, bert: BERT, *, dropout: float = 0.0, **arguments: Any) -> None:
        _check_head(type(self).__name__, bert, dropout, **arguments)
        super().__init__()
        self.bert = _outputs_fixed(bert)

    @abstractmethod
    def loss(self, batch: FineTuningBatch) -> tuple[torch.Tensor, int]:
        """``(mean cross-entropy, count)`` on one batch, what
        :func:`~transformer_book.training.fit` minimises."""

    @abstractmethod
    def predict(self, batch: FineTuningBatch) -> torch.Tensor:
        """The prediction for one batch, made in eval mode without gradients (:meth:`evaluating`)."""

    def checked_targets(self, batch: FineTuningBatch, shape: tuple[int, ...]) -> torch.Tensor:
        """``batch.targets``, which must be of shape ``shape`` and, where the batch states its
        kind, of this head's kind.

        Raises:
            ValueError: a batch of another kind, or targets of another shape.
        """
        name = type(self).__name__
        if batch.kind is not None and batch.kind != self.kind:
            raise ValueError(
                f"{name}.loss: the batch holds {batch.kind!r} targets, but a {name} reads {self.kind!r} targets"
            )
        if tuple(batch.targets.shape) != shape:
            raise ValueError(f"{name}.loss: {self.kind!r} targets must be {shape}, got {tuple(batch.targets.shape)}")
        return batch.targets

    @contextmanager
    def evaluating(self) -> Iterator[None]:
        """Run the block in eval mode without gradients; the mode is restored after."""
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.train(was_training)


class SequenceClassifier(FineTuningHead):
    r"""A label for a sentence or a sentence pair from a pooled vector of the encoder's states.

    :math:`\text{logits} = \operatorname{dropout}(\tanh(h W_P + b_P))\, W_C + b_C`, where
    :math:`W_P, b_P` are the pretrained pooler (next-sentence prediction's) and ``classifier``
    (:math:`W_C, b_C`) is new, initialised as BERT's weights. ``pooling`` says what :math:`h` is:
    ``"cls"``, the state of ``[CLS]``, :math:`h = H_0`, as BERT does; or ``"mean"``, the mean of the
    states of the non-padding positions, :math:`h = \frac{1}{n}\sum_t H_t`, for a model pretrained
    without next-sentence prediction, whose ``[CLS]`` state no pretraining loss ever read.
    ``tokens`` and ``segments`` ``(B, n)`` -> logits ``(B, n_classes)``.
    """

    kind, reads_pooler = "class", True

    def __init__(self, bert: BERT, n_classes: int, *, dropout: float = 0.1, pooling: str = "cls") -> None:
        super().__init__(bert, dropout=dropout, n_classes=n_classes, pooling=pooling)
        self.dropout, self.pooling = nn.Dropout(dropout), pooling
        self.classifier = _new_layer(bert.config.d_model, n_classes)

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.bert.encode(tokens, segments)
        if self.pooling == "cls":
            h = hidden[:, 0]
        else:
            h = mean_pool(hidden, tokens, self.bert.config.pad_id)
        return self.classifier(self.dropout(torch.tanh(self.bert.pooler(h))))

    def loss(self, batch: FineTuningBatch) -> tuple[torch.Tensor, int]:
        r""":math:`-\log P(y \mid x)`, the mean over the ``B`` sentences: ``(mean, B)``; targets ``(B,)``."""
        y = self.checked_targets(batch, (len(batch.tokens),))
        return F.cross_entropy(self(batch.tokens, batch.segments), y), len(y)

    def predict(self, batch: FineTuningBatch) -> torch.Tensor:
        """The most probable class of each sentence, ``(B,)``."""
        with self.evaluating():
            return self(batch.tokens, batch.segments).argmax(-1)

    def extra_repr(self) -> str:
        return f"pooling={self.pooling!r}"


class TokenTagger(FineTuningHead):
    r"""A tag for every token: :math:`\text{logits}_t = \operatorname{dropout}(H_t)\, W_T + b_T`.

    ``tokens`` and ``segments`` ``(B, n)`` -> logits ``(B, n, n_tags)``.
    """

    kind = "tags"

    def __init__(self, bert: BERT, n_tags: int, *, dropout: float = 0.1) -> None:
        super().__init__(bert, dropout=dropout, n_tags=n_tags)
        self.dropout = nn.Dropout(dropout)
        self.tagger = _new_layer(bert.config.d_model, n_tags)

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        return self.tagger(self.dropout(self.bert.encode(tokens, segments)))

    def loss(self, batch: FineTuningBatch) -> tuple[torch.Tensor, int]:
        r""":math:`-\log P(y_t \mid x)`, the mean over the tokens that have a tag (targets ``(B, n)``,
        ``IGNORE_INDEX`` elsewhere): ``(mean, count)``.

        Raises:
            ValueError: no token of the batch has a tag.
        """
        y = self.checked_targets(batch, tuple(batch.tokens.shape))
        scored = y != IGNORE_INDEX
        count = int(scored.sum())
        if count == 0:
            raise ValueError("TokenTagger.loss: no token of the batch has a tag (all targets are IGNORE_INDEX)")
        return F.cross_entropy(self(batch.tokens, batch.segments)[scored], y[scored]), count

    def predict(self, batch: FineTuningBatch) -> torch.Tensor:
        """The most probable tag of each token, ``(B, n)``."""
        with self.evaluating():
            return self(batch.tokens, batch.segments).argmax(-1)


def _check_allowed(allowed: torch.Tensor | None, tokens: torch.Tensor) -> None:
    if allowed is None:
        return
    if allowed.dtype != torch.bool or allowed.shape != tokens.shape:
        raise ValueError(
            f"SpanExtractor: allowed must be a bool tensor of the tokens' shape "
            f"{tuple(tokens.shape)}, got {allowed.dtype} {tuple(allowed.shape)}"
        )
    if not allowed.any(dim=1).all():
        raise ValueError("SpanExtractor: a row of allowed is all False (no position may hold the answer)")


def _check_answers(answers: torch.Tensor, allowed: torch.Tensor | None, n: int) -> None:
    """Every answer ``(i*, j*)`` lies in ``[0, n)``, at allowed positions (every one when ``allowed`` is
    ``None``), with ``i* <= j*``."""
    if allowed is None:
        allowed = torch.ones(len(answers), n, dtype=torch.bool, device=answers.device)
    inside = ((answers >= 0) & (answers < n)).all(dim=1)
    valid = inside & allowed.gather(1, answers.clamp(0, n - 1)).all(dim=1) & (answers[:, 0] <= answers[:, 1])
    if not valid.all():
        row = int((~valid).nonzero()[0, 0])
        raise ValueError(
            f"SpanExtractor.loss: the answer {tuple(answers[row].tolist())} of row {row} starts or ends "
            f"outside the allowed positions, or ends before it starts"
        )


class SpanExtractor(FineTuningHead):
    r"""Start and end scores for an answer span: :math:`s_t = H_t w_S + b_S`, :math:`e_t = H_t w_E + b_E`
    (``span``, one ``nn.Linear(d_model, 2)``), set to :math:`-\infty` where ``allowed`` is
    ``False`` so that an answer lies in the passage.

    ``tokens``, ``segments`` ``(B, n)`` and ``allowed`` ``(B, n)`` bool (``None``: every
    position) -> ``(start_logits, end_logits)``, each ``(B, n)``.
    """

    kind = "span"

    def __init__(self, bert: BERT) -> None:
        super().__init__(bert)
        self.span = _new_layer(bert.config.d_model, 2)

    def forward(
        self, tokens: torch.Tensor, segments: torch.Tensor | None = None, allowed: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _check_allowed(allowed, tokens)
        start, end = self.span(self.bert.encode(tokens, segments)).unbind(-1)
        if allowed is not None:
            start = start.masked_fill(~allowed, float("-inf"))
            end = end.masked_fill(~allowed, float("-inf"))
        return start, end

    def loss(self, batch: FineTuningBatch) -> tuple[torch.Tensor, int]:
        r""":math:`-\tfrac12(\log \operatorname{softmax}(s)_{i^*} + \log \operatorname{softmax}(e)_{j^*})`,
        the mean over the ``B`` questions: ``(mean, B)``; targets ``(B, 2)``, the answers
        :math:`(i^*, j^*)`.

        Raises:
            ValueError: an answer outside the allowed positions, or one that ends before it starts.
        """
        answers = self.checked_targets(batch, (len(batch.tokens), 2))
        s, e = self(batch.tokens, batch.segments, batch.allowed)
        _check_answers(answers, batch.allowed, batch.tokens.shape[1])
        return (F.cross_entropy(s, answers[:, 0]) + F.cross_entropy(e, answers[:, 1])) / 2, len(answers)

    def predict(self, batch: FineTuningBatch, *, max_answer_length: int = 30) -> torch.Tensor:
        """The best span of each row, ``(B, 2)``, at most ``max_answer_length`` pieces long (:func:`best_spans`)."""
        with self.evaluating():
            return best_spans(*self(batch.tokens, batch.segments, batch.allowed), max_answer_length)


def _check_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, max_length: int) -> None:
    checks.positive_int("best_spans", max_length=max_length)
    if start_logits.dim() != 2 or start_logits.shape != end_logits.shape:
        raise ValueError(
            f"best_spans: start and end logits must both be (B, n), got {tuple(start_logits.shape)} "
            f"and {tuple(end_logits.shape)}"
        )


def best_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, max_length: int) -> torch.Tensor:
    r"""The best span of each row, :math:`\arg\max_{i \le j < i + L}\, s_i + e_j` with
    :math:`L` = ``max_length``: ``(B, n)`` scores -> ``(B, 2)`` int64 ``(start, end)``, end
    inclusive. Positions scored :math:`-\infty` are never chosen while any finite span exists.

    Raises:
        ValueError: scores of different or non-2-D shapes, or ``max_length`` not a positive int.
    """
    _check_spans(start_logits, end_logits, max_length)
    n = start_logits.shape[1]
    i = torch.arange(n, device=start_logits.device)
    band = (i[None, :] >= i[:, None]) & (i[None, :] < i[:, None] + max_length)  # (n, n): i <= j < i + L
    scores = (start_logits[:, :, None] + end_logits[:, None, :]).masked_fill(~band, float("-inf"))
    flat = scores.flatten(1).argmax(dim=1)
    return torch.stack([flat // n, flat % n], dim=1)


def _head(where: str, model: Any) -> FineTuningHead:
    if not isinstance(model, FineTuningHead):
        raise ValueError(
            f"{where}: model must be a FineTuningHead (a SequenceClassifier, TokenTagger or "
            f"SpanExtractor), got {type(model).__name__}"
        )
    return model


def finetuning_loss(model: FineTuningHead, batch: FineTuningBatch) -> tuple[torch.Tensor, int]:
    """The head's own loss on one batch (:meth:`FineTuningHead.loss`), for
    :func:`~transformer_book.training.fit`: ``(mean cross-entropy, count)``; the count is
    sentences for the classifier and the span extractor (whose loss is the mean of the start and
    end cross-entropies) and scored tokens for the tagger.

    Raises:
        ValueError: a model that is not a :class:`FineTuningHead`, a batch of another kind,
            targets of the wrong shape, a tagging batch with no scored token, or an answer
            outside the allowed positions.
    """
    return _head("finetuning_loss", model).loss(batch)


def predict(model: FineTuningHead, batch: FineTuningBatch, **options: Any) -> torch.Tensor:
    """The head's own prediction for one batch (:meth:`FineTuningHead.predict`), in eval mode
    (the mode is restored after): class ids ``(B,)``, tag ids ``(B, n)``, or spans ``(B, 2)``
    from :func:`best_spans`. ``options`` go to the head: the span extractor's
    ``max_answer_length`` (30 if not given).

    Raises:
        ValueError: a model that is not a :class:`FineTuningHead`.
    """
    return _head("predict", model).predict(batch, **options)


def _checked_encoder(model: FineTuningHead, trainable_layers: int) -> BERT:
    bert = _head("freeze_encoder", model).bert
    checks.integer("freeze_encoder", "trainable_layers", trainable_layers, minimum=0, below=bert.config.n_layers + 1)
    return bert


def freeze_encoder(model: FineTuningHead, *, trainable_layers: int = 0) -> int:
    """Fix the weights of ``model.bert`` except its top ``trainable_layers`` encoder layers; the
    head always trains. With at least one layer trained, what lies above the layers trains too:
    a pre-LN encoder's final LayerNorm, and the pooler under a head that reads it
    (``reads_pooler``: the :class:`SequenceClassifier`). BERT's MLM and NSP output layers, unused by the heads, are fixed
    already (the heads fix them); the embeddings stay fixed. On a model adapted with
    :func:`~transformer_book.lora.apply_lora`, every LoRA layer's factors stay trainable and its
    base weight fixed, in the fixed layers and the trained ones alike: freezing the encoder
    does not undo the adaptation, and training the top layers does not unfreeze a base weight.

    Returns the number of trainable parameters.

    Raises:
        ValueError: a model that is not a :class:`FineTuningHead`, or ``trainable_layers``
            outside ``[0, n_layers]``.
    """
    bert = _checked_encoder(model, trainable_layers)  # model.bert
    n_layers = bert.config.n_layers
    for parameter in bert.parameters():
        parameter.requires_grad_(False)
    for layer in list(bert.encoder.layers)[n_layers - trainable_layers :]:
        for parameter in layer.parameters():
            parameter.requires_grad_(True)
    if trainable_layers > 0:
        trained_on_top = [bert.encoder.norm] if bert.encoder.norm is not None else []  # pre-LN's final norm
        if model.reads_pooler:
            trained_on_top.append(bert.pooler)  # the classifier reads it
        for module in trained_on_top:
            module.requires_grad_(True)
    for module in bert.modules():  # adapters (apply_lora) train and their base stays fixed, in every layer
        if isinstance(module, LoRALinear):
            module.requires_grad_(True)
            module.base.requires_grad_(False)
    return trainable_parameters(model)


def trainable_parameters(model: nn.Module) -> int:
    """The number of weights that training changes (``requires_grad``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
