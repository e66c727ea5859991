r"""Recurrent encoder-decoder baselines for translation (chapter 7).

Three decoders share one encoder, a bidirectional GRU over the source:

.. math::

    \overrightarrow{h}_j = \operatorname{GRU}(E_{src}[x_j], \overrightarrow{h}_{j-1}), \qquad
    \overleftarrow{h}_j = \operatorname{GRU}(E_{src}[x_j], \overleftarrow{h}_{j+1}), \qquad
    h_j = [\overrightarrow{h}_j; \overleftarrow{h}_j] \in \mathbb{R}^{2 d_{hidden}},

and, per layer :math:`l`, the decoder's initial state summarises the whole sentence
(:math:`|x|` real tokens, the padding packed away):

.. math:: s_0^{(l)} = \tanh\bigl(W_{init}^{(l)} [\overrightarrow{h}_{|x|}^{(l)}; \overleftarrow{h}_1^{(l)}] + b^{(l)}\bigr).

* ``attention=None`` (Cho et al., 2014): one fixed vector, :math:`c = s_0^{(top)}`, is all the
  decoder knows about the source; it joins every input and the pre-output.
* ``attention="luong"`` (Luong et al., 2015, global attention, *general* score, no input
  feeding): the decoder GRU runs first, then every position attends at once.
* ``attention="bahdanau"`` (Bahdanau et al., 2015, additive score): the context of step
  ``t`` depends on the state :math:`s_{t-1}`, and it is an input of the GRU step that makes
  :math:`s_t` -- so the decoder must loop over time, one step after the other. This
  sequential dependence is what the Transformer removes.

Conventions as in :class:`~transformer_book.models.transformer.Transformer` (so that the decoders and the
training loss serve both): ``tgt_in`` is the target shifted right with SOS first, the output
at position ``t`` predicts target token ``t``, and sources are right-padded with ``pad_id``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from transformer_book import checks
from transformer_book.attention import softmax
from transformer_book.masks import padding_mask

__all__ = ["BahdanauAttention", "LuongAttention", "RNNSeq2SeqConfig", "RNNSeq2Seq"]

ATTENTIONS = (None, "bahdanau", "luong")


def _check_attention_inputs(
    attention: nn.Module,
    query: torch.Tensor,
    keys: torch.Tensor,
    mask: torch.Tensor | None,
    projected_keys: torch.Tensor | None = None,
) -> None:
    """For ``attention`` (a :class:`BahdanauAttention` or :class:`LuongAttention`): floating
    ``(B, n, d_query)`` queries and ``(B, m, d_key)`` keys, a boolean mask of shape
    ``(B, 1 or n, m)`` (or none), and precomputed ``projected_keys`` of shape
    ``(B, m, d_attention)`` (or none)."""
    owner, d_query, d_key = type(attention).__name__, attention.d_query, attention.d_key
    d_attention = getattr(attention, "d_attention", None)
    if projected_keys is not None and projected_keys.shape != keys.shape[:2] + (d_attention,):
        raise ValueError(
            f"{owner}: projected_keys must have shape {tuple(keys.shape[:2]) + (d_attention,)} "
            f"(project_keys(keys)), got {tuple(projected_keys.shape)}"
        )
    for name, t, width in (("query", query, d_query), ("keys", keys, d_key)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[-1] != width or not t.dtype.is_floating_point:
            what = f"shape {tuple(t.shape)}, dtype {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{owner}: {name} must be a floating (B, length, {width}) tensor, got {what}")
    if query.shape[0] != keys.shape[0]:
        raise ValueError(f"{owner}: batch sizes differ: query {tuple(query.shape)}, keys {tuple(keys.shape)}")
    if mask is None:
        return
    batch, n, m = query.shape[0], query.shape[1], keys.shape[1]
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        what = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{owner}: mask must be boolean (True = key excluded), got {what}")
    if mask.dim() != 3 or mask.shape[0] != batch or mask.shape[1] not in (1, n) or mask.shape[2] != m:
        raise ValueError(
            f"{owner}: mask must have shape ({batch}, 1, {m}) or ({batch}, {n}, {m}) for query "
            f"{tuple(query.shape)} and keys {tuple(keys.shape)}, got {tuple(mask.shape)}"
        )


class BahdanauAttention(nn.Module):
    r"""Additive attention (Bahdanau, Cho and Bengio, 2015).

    .. math::

        e_{tj} = v^\top \tanh(W q_t + U k_j + b), \qquad
        \alpha_{tj} = \frac{\exp e_{tj}}{\sum_{l} \exp e_{tl}}, \qquad
        c_t = \sum_j \alpha_{tj}\, k_j

    with :math:`W \in \mathbb{R}^{d_a \times d_q}` (``w``), :math:`U \in \mathbb{R}^{d_a \times d_k}`
    and :math:`b` (``u``), :math:`v \in \mathbb{R}^{d_a}` (``v``). In the translation model the
    query is the previous decoder state :math:`s_{t-1}` and the keys are the encoder states
    :math:`h_j`. :math:`U k_j + b` does not depend on ``t``: :meth:`project_keys` computes it
    once per sentence, and ``forward(..., projected_keys=...)`` reuses it at every step.

    Args:
        d_query: :math:`d_q`, width of the queries.
        d_key: :math:`d_k`, width of the keys (which are also the values).
        d_attention: :math:`d_a`, width of the hidden layer of the score.

    Shapes: ``query`` ``(B, n, d_q)``, ``keys`` ``(B, m, d_k)``, ``mask`` ``(B, 1, m)`` or
    ``(B, n, m)`` boolean, True = key excluded (PAD keys get weight exactly 0; a query with no
    key left gets zero weights and a zero context). Returns ``(context (B, n, d_k), weights
    (B, n, m))``.
    """

    def __init__(self, d_query: int, d_key: int, d_attention: int) -> None:
        super().__init__()
        checks.positive_int("BahdanauAttention", d_query=d_query, d_key=d_key, d_attention=d_attention)
        self.d_query, self.d_key, self.d_attention = d_query, d_key, d_attention
        self.w = nn.Linear(d_query, d_attention, bias=False)
        self.u = nn.Linear(d_key, d_attention, bias=True)
        self.v = nn.Linear(d_attention, 1, bias=False)

    def extra_repr(self) -> str:
        return f"d_query={self.d_query}, d_key={self.d_key}, d_attention={self.d_attention}"

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """:math:`U k_j + b` for every key: ``(B, m, d_k)`` -> ``(B, m, d_a)``."""
        return self.u(keys)

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _check_attention_inputs(self, query, keys, mask, projected_keys)
        if projected_keys is None:
            projected_keys = self.project_keys(keys)
        # (B, n, 1, d_a) + (B, 1, m, d_a) -> (B, n, m, d_a) -> scores (B, n, m)
        hidden = torch.tanh(self.w(query).unsqueeze(2) + projected_keys.unsqueeze(1))
        scores = self.v(hidden).squeeze(-1)
        weights = softmax(scores, mask)  # (B, n, m), 0 on excluded keys
        return torch.bmm(weights, keys), weights


class LuongAttention(nn.Module):
    r"""Multiplicative attention with Luong, Pham and Manning's (2015) *general* score.

    .. math::

        e_{tj} = q_t^\top W_a\, k_j, \qquad
        \alpha_{tj} = \frac{\exp e_{tj}}{\sum_{l} \exp e_{tl}}, \qquad
        c_t = \sum_j \alpha_{tj}\, k_j

    with :math:`W_a \in \mathbb{R}^{d_q \times d_k}` stored as ``w_a = nn.Linear(d_k, d_q,
    bias=False)`` (so ``w_a.weight`` is :math:`W_a`). In the translation model the query is
    the *current* decoder state :math:`s_t`, so all positions are scored in one batched
    product :math:`S\, (K W_a^\top)^\top`.

    Shapes: as :class:`BahdanauAttention`: ``query`` ``(B, n, d_q)``, ``keys`` ``(B, m, d_k)``,
    ``mask`` ``(B, 1, m)`` or ``(B, n, m)`` -> ``(context (B, n, d_k), weights (B, n, m))``.
    """

    def __init__(self, d_query: int, d_key: int) -> None:
        super().__init__()
        checks.positive_int("LuongAttention", d_query=d_query, d_key=d_key)
        self.d_query, self.d_key = d_query, d_key
        self.w_a = nn.Linear(d_key, d_query, bias=False)

    def extra_repr(self) -> str:
        return f"d_query={self.d_query}, d_key={self.d_key}"

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _check_attention_inputs(self, query, keys, mask)
        scores = torch.bmm(query, self.w_a(keys).transpose(1, 2))  # (B, n, m)
        weights = softmax(scores, mask)
        return torch.bmm(weights, keys), weights


@dataclass(frozen=True)
class RNNSeq2SeqConfig:
    """Hyper-parameters of :class:`RNNSeq2Seq`.

    ``attention`` is ``None`` (a fixed context, Cho et al. 2014), ``"bahdanau"`` (additive,
    recomputed from the previous state at every step) or ``"luong"`` (general score, all
    steps in parallel). ``share_embeddings`` uses one embedding for source and target (needs
    one vocabulary); ``tie_output`` makes the output layer's weight the target embedding,
    which then sets the decoder's output width to ``d_embedding`` (else ``d_hidden``).
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_embedding: int = 256
    d_hidden: int = 512
    n_layers: int = 1
    dropout: float = 0.1
    attention: str | None = "bahdanau"
    pad_id: int = 0
    share_embeddings: bool = False
    tie_output: bool = False

    def __post_init__(self) -> None:
        checks.positive_int(
            "RNNSeq2SeqConfig",
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            d_embedding=self.d_embedding,
            d_hidden=self.d_hidden,
            n_layers=self.n_layers,
        )
        checks.probability("RNNSeq2SeqConfig", "dropout", self.dropout)
        checks.choice("RNNSeq2SeqConfig", "attention", self.attention, ATTENTIONS)
        checks.integer(
            "RNNSeq2SeqConfig",
            "pad_id",
            self.pad_id,
            minimum=0,  # an id of both vocabularies
            below=min(self.src_vocab_size, self.tgt_vocab_size),
        )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "RNNSeq2SeqConfig: share_embeddings needs one vocabulary, got "
                f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}"
            )


def _check_tokens(tokens: torch.Tensor, name: str, vocab_size: int) -> None:
    checks.id_tensor("RNNSeq2Seq", name, tokens, "(B, length)")
    if tokens.numel() == 0:
        raise ValueError(f"RNNSeq2Seq: {name} is empty, shape {tuple(tokens.shape)}")
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise ValueError(
            f"RNNSeq2Seq: {name} holds ids in [{int(tokens.min())}, {int(tokens.max())}], "
            f"outside the vocabulary [0, {vocab_size})"
        )


class RNNSeq2Seq(nn.Module):
    r"""A recurrent encoder-decoder with the interface of :class:`~transformer_book.models.transformer.Transformer`.

    ``forward(src, tgt_in)``: ``src`` ``(B, m)`` right-padded and ``tgt_in`` ``(B, n)`` integer
    ids -> logits ``(B, n, tgt_vocab_size)``, by teacher forcing. Split as ``encode`` ->
    ``(memory, src_mask)``, ``decode`` -> states ``(B, n, d_out)``, ``output`` (the final
    ``nn.Linear``); ``decode_logits`` = ``output(decode(...))``.

    With :math:`x_t` = ``tgt_in[:, t]`` (the previous target token), :math:`e_t = E_{tgt}[x_t]`,
    encoder states :math:`h_j` and initial state :math:`s_0` (module docstring), the decoder is

    * ``attention=None``: :math:`c = s_0^{(top)}`, :math:`s_t = \operatorname{GRU}([e_t; c], s_{t-1})`,
      :math:`o_t = \tanh(W_o [s_t; e_t; c] + b_o)`;
    * ``"luong"``: :math:`s_t = \operatorname{GRU}(e_t, s_{t-1})`, :math:`c_t` = :class:`LuongAttention`
      of :math:`s_t` over the :math:`h_j`, :math:`o_t = \tilde{s}_t = \tanh(W_c [c_t; s_t] + b_c)`;
    * ``"bahdanau"``: :math:`c_t` = :class:`BahdanauAttention` of :math:`s_{t-1}` over the
      :math:`h_j`, :math:`s_t = \operatorname{GRU}([e_t; c_t], s_{t-1})`,
      :math:`o_t = \tanh(W_o [s_t; e_t; c_t] + b_o)`;

    and :math:`P(y_t \mid y_{<t}, x) = \operatorname{softmax}(W_{out}\, o_t + b_{out})`.
    :math:`W_o` / :math:`W_c` is ``pre_output``; the GRU and the attention use the top
    layer's state. Dropout acts on the source and target embeddings, between stacked GRU
    layers, and on :math:`o_t` (so ``decode`` returns dropped-out states in training mode).

    Initialisation: every parameter uniform in :math:`[-0.1, 0.1]` (Luong et al., 2015), the
    PAD embedding zero.
    """

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        if not isinstance(config, RNNSeq2SeqConfig):
            raise ValueError(f"RNNSeq2Seq: config must be an RNNSeq2SeqConfig, got {type(config).__name__}")
        self.config = c = config
        e, h, layers = c.d_embedding, c.d_hidden, c.n_layers
        self.d_out = e if c.tie_output else h
        self.src_embedding = nn.Embedding(c.src_vocab_size, e, padding_idx=c.pad_id)
        self.tgt_embedding = (
            self.src_embedding if c.share_embeddings else nn.Embedding(c.tgt_vocab_size, e, padding_idx=c.pad_id)
        )
        self.dropout = nn.Dropout(c.dropout)
        between_layers = c.dropout if layers > 1 else 0.0  # nn.GRU warns about dropout with one layer
        self.encoder = nn.GRU(e, h, layers, batch_first=True, bidirectional=True, dropout=between_layers)
        self.bridge = nn.ModuleList(nn.Linear(2 * h, h) for _ in range(layers))  # W_init^(l)
        if c.attention is None:
            self.attention = None
            self.decoder = nn.GRU(e + h, h, layers, batch_first=True, dropout=between_layers)
            self.pre_output = nn.Linear(h + e + h, self.d_out)  # [s_t; e_t; c]
        elif c.attention == "luong":
            self.attention = LuongAttention(h, 2 * h)
            self.decoder = nn.GRU(e, h, layers, batch_first=True, dropout=between_layers)
            self.pre_output = nn.Linear(2 * h + h, self.d_out)  # [c_t; s_t]
        else:
            self.attention = BahdanauAttention(h, 2 * h, h)
            self.decoder = nn.GRU(e + 2 * h, h, layers, batch_first=True, dropout=between_layers)
            self.pre_output = nn.Linear(h + e + 2 * h, self.d_out)  # [s_t; e_t; c_t]
        self.output = nn.Linear(self.d_out, c.tgt_vocab_size)
        if c.tie_output:
            self.output.weight = self.tgt_embedding.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform in [-0.1, 0.1] (``parameters()`` visits a shared tensor once, in a fixed
        order, so seeded initialisation repeats), then zero the PAD embedding rows."""
        for p in self.parameters():
            nn.init.uniform_(p, -0.1, 0.1)
        with torch.no_grad():
            for embedding in dict.fromkeys([self.src_embedding, self.tgt_embedding]):
                embedding.weight[self.config.pad_id].zero_()

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"attention={c.attention!r}, d_embedding={c.d_embedding}, d_hidden={c.d_hidden}, "
            f"n_layers={c.n_layers}, d_out={self.d_out}, dropout={c.dropout}"
        )

    # ----------------------------------------------------------------------------------
    # encoder
    # ----------------------------------------------------------------------------------

    def encode(self, src: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """``src`` ``(B, m)`` -> ``((outputs (B, m, 2 d_hidden), s_0 (B, n_layers, d_hidden)),
        src_mask (B, 1, m))``.

        ``outputs[:, j]`` is :math:`h_j = [\\overrightarrow{h}_j; \\overleftarrow{h}_j]` of the top
        layer (zero at PAD positions); ``s_0`` the decoder's initial state per layer. Both are
        batch-first, so a beam search can index or repeat the memory along dim 0. The packed
        GRU never reads PAD, so neither depends on how much padding follows a sentence.

        Raises:
            ValueError: if ``src`` is not a ``(B, m)`` integer tensor of in-vocabulary ids, if a
                sentence has no real token, or if a PAD comes before a real token.
        """
        _check_tokens(src, "src", self.config.src_vocab_size)
        return self._encode(src)

    def _encode(self, src: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """:meth:`encode` of a ``src`` whose type, shape and ids the caller has checked."""
        c = self.config
        src_mask = padding_mask(src, c.pad_id)  # (B, 1, m), True at PAD
        real = ~src_mask[:, 0]  # (B, m)
        lengths = real.sum(dim=1)
        if (lengths == 0).any():
            empty = torch.nonzero(lengths == 0).flatten().tolist()
            raise ValueError(f"RNNSeq2Seq: src sentences {empty} have no real token (all PAD)")
        if (src_mask[:, 0, :-1] & real[:, 1:]).any():
            bad = torch.nonzero((src_mask[:, 0, :-1] & real[:, 1:]).any(dim=1)).flatten().tolist()
            raise ValueError(
                f"RNNSeq2Seq: src must be right-padded (PAD only after the last real token); "
                f"sentences {bad} have PAD before a real token"
            )
        x = self.dropout(self.src_embedding(src))  # (B, m, E)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        packed_out, h_n = self.encoder(packed)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=src.shape[1])
        # h_n: (n_layers * 2, B, H), ordered layer 0 fwd, layer 0 bwd, layer 1 fwd, ...; the
        # forward direction ends at the last real token, the backward one at the first token.
        batch, h = src.shape[0], c.d_hidden
        finals = h_n.view(c.n_layers, 2, batch, h)
        s0 = torch.stack(
            [
                torch.tanh(bridge(torch.cat([finals[l, 0], finals[l, 1]], dim=-1)))
                for l, bridge in enumerate(self.bridge)
            ],
            dim=1,
        )  # (B, n_layers, H)
        return (outputs, s0), src_mask

    # ----------------------------------------------------------------------------------
    # decoder
    # ----------------------------------------------------------------------------------

    def _check_memory(
        self, tgt_in: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor], src_mask: torch.Tensor | None
    ) -> None:
        c = self.config
        if (
            not isinstance(memory, (tuple, list))
            or len(memory) != 2
            or not all(isinstance(t, torch.Tensor) for t in memory)
        ):
            raise ValueError(
                f"RNNSeq2Seq: memory must be the pair (outputs, s_0) returned by encode, got {type(memory).__name__}"
            )
        outputs, s0 = memory
        batch = tgt_in.shape[0]
        if outputs.dim() != 3 or outputs.shape[0] != batch or outputs.shape[2] != 2 * c.d_hidden:
            raise ValueError(
                f"RNNSeq2Seq: memory outputs must have shape ({batch}, m, {2 * c.d_hidden}) for tgt_in "
                f"{tuple(tgt_in.shape)}, got {tuple(outputs.shape)}"
            )
        if tuple(s0.shape) != (batch, c.n_layers, c.d_hidden):
            raise ValueError(
                f"RNNSeq2Seq: memory initial state must have shape ({batch}, {c.n_layers}, {c.d_hidden}) "
                f"for tgt_in {tuple(tgt_in.shape)}, got {tuple(s0.shape)}"
            )
        if src_mask is not None and (
            not isinstance(src_mask, torch.Tensor)
            or src_mask.dtype != torch.bool
            or tuple(src_mask.shape) != (batch, 1, outputs.shape[1])
        ):
            what = (
                f"shape {tuple(src_mask.shape)}, dtype {src_mask.dtype}"
                if isinstance(src_mask, torch.Tensor)
                else type(src_mask).__name__
            )
            raise ValueError(
                f"RNNSeq2Seq: src_mask must be boolean of shape ({batch}, 1, {outputs.shape[1]}), got {what}"
            )

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: tuple[torch.Tensor, torch.Tensor],
        src_mask: torch.Tensor | None,
        *,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``tgt_in`` ``(B, n)`` and ``encode``'s output -> decoder states :math:`o_t`
        ``(B, n, d_out)``; with ``need_weights=True`` also the attention weights ``(B, n, m)``
        (row ``t``: how much step ``t`` read each source position). ``src_mask`` ``(B, 1, m)``
        is ``encode``'s; ``None`` lets every source position be attended.

        Raises:
            ValueError: for bad ``tgt_in``, a ``memory`` or ``src_mask`` of another batch size
                or width, or ``need_weights=True`` on a model without attention.
        """
        _check_tokens(tgt_in, "tgt_in", self.config.tgt_vocab_size)
        self._check_memory(tgt_in, memory, src_mask)
        if need_weights and self.attention is None:
            raise ValueError("RNNSeq2Seq: need_weights=True needs attention, but this model has attention=None")
        o, weights, _ = self._run_decoder(tgt_in, memory, src_mask, memory[1])
        return (o, weights) if need_weights else o

    def decode_step(
        self,
        tgt_new: torch.Tensor,
        memory: tuple[torch.Tensor, torch.Tensor],
        src_mask: torch.Tensor | None,
        state: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Incremental decoding: carry on from ``state`` (``None``: the start, :math:`s_0`).

        ``tgt_new`` ``(B, k)`` are the next ``k`` decoder inputs. Returns ``(o (B, k, d_out),
        state (B, n_layers, d_hidden))``, batch-first so that a beam search can reorder it;
        ``o`` equals the last ``k`` positions of :meth:`decode` over the whole prefix.
        """
        _check_tokens(tgt_new, "tgt_new", self.config.tgt_vocab_size)
        self._check_memory(tgt_new, memory, src_mask)
        if state is not None and (not isinstance(state, torch.Tensor) or state.shape != memory[1].shape):
            what = tuple(state.shape) if isinstance(state, torch.Tensor) else type(state).__name__
            raise ValueError(f"RNNSeq2Seq: state must have shape {tuple(memory[1].shape)}, got {what}")
        o, _, s_final = self._run_decoder(tgt_new, memory, src_mask, memory[1] if state is None else state)
        return o, s_final

    def _run_decoder(
        self,
        tgt_in: torch.Tensor,
        memory: tuple[torch.Tensor, torch.Tensor],
        src_mask: torch.Tensor | None,
        s_start: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The decoder from state ``s_start`` ``(B, n_layers, H)``: ``(o, weights or None, final state)``."""
        outputs, s0 = memory
        y = self.dropout(self.tgt_embedding(tgt_in))  # (B, n, E)
        s_init = s_start.transpose(0, 1).contiguous()  # (n_layers, B, H), as nn.GRU wants
        weights = None
        if self.attention is None:
            context = s0[:, -1:].expand(-1, tgt_in.shape[1], -1)  # c = s_0 of the top layer, (B, n, H)
            states, s_final = self.decoder(torch.cat([y, context], dim=-1), s_init)  # (B, n, H)
            o = torch.tanh(self.pre_output(torch.cat([states, y, context], dim=-1)))
        elif isinstance(self.attention, LuongAttention):
            states, s_final = self.decoder(y, s_init)  # all steps at once: s_t needs no context
            context, weights = self.attention(states, outputs, src_mask)  # (B, n, 2H), (B, n, m)
            o = torch.tanh(self.pre_output(torch.cat([context, states], dim=-1)))
        else:
            states, context, weights, s_final = self._bahdanau_steps(y, outputs, src_mask, s_init)
            o = torch.tanh(self.pre_output(torch.cat([states, y, context], dim=-1)))
        return self.dropout(o), weights, s_final.transpose(0, 1)

    def _bahdanau_steps(
        self, y: torch.Tensor, outputs: torch.Tensor, src_mask: torch.Tensor | None, s: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The time loop: ``c_t`` from ``s_{t-1}``, then ``s_t`` from ``[e_t; c_t]``.

        ``y`` ``(B, n, E)``, ``outputs`` ``(B, m, 2H)``, ``s`` ``(n_layers, B, H)`` -> states
        ``(B, n, H)``, contexts ``(B, n, 2H)``, weights ``(B, n, m)``, final ``s``.
        """
        projected = self.attention.project_keys(outputs)  # U h_j + b, once for all steps
        states, contexts, weights = [], [], []
        for t in range(y.shape[1]):
            context, alpha = self.attention(s[-1].unsqueeze(1), outputs, src_mask, projected_keys=projected)
            state, s = self.decoder(torch.cat([y[:, t : t + 1], context], dim=-1), s)  # one step
            states.append(state)
            contexts.append(context)
            weights.append(alpha)
        return torch.cat(states, dim=1), torch.cat(contexts, dim=1), torch.cat(weights, dim=1), s

    def decode_logits(
        self, tgt_in: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor], src_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """``output(decode(tgt_in, memory, src_mask))``: logits ``(B, n, tgt_vocab_size)``."""
        return self.output(self.decode(tgt_in, memory, src_mask))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: ``src`` ``(B, m)``, ``tgt_in`` ``(B, n)`` -> logits ``(B, n, tgt_vocab_size)``."""
        _check_tokens(src, "src", self.config.src_vocab_size)
        _check_tokens(tgt_in, "tgt_in", self.config.tgt_vocab_size)
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(f"RNNSeq2Seq: batch sizes differ: src {tuple(src.shape)}, tgt_in {tuple(tgt_in.shape)}")
        memory, src_mask = self._encode(src)  # checked once, here: the memory is encode's own
        return self.output(self._run_decoder(tgt_in, memory, src_mask, memory[1])[0])
