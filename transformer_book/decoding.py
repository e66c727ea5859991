r"""Generating output sequences from a trained encoder-decoder (chapters 7 and 8).

Greedy decoding picks the most probable next token at every step,

.. math::

    \hat y_t = \operatorname*{arg\,max}_{v \in \mathcal{V}} P(v \mid \hat y_{<t}, x),

starting from :math:`\hat y_0 = \mathrm{SOS}`, until the sentence emits EOS or reaches the
length limit. A batch decodes all its sentences together: each sentence stops at *its own*
EOS and is padded with PAD from then on, and the loop ends when every sentence has stopped.

The functions here work with any model that has the encoder-decoder interface of
:class:`~transformer_book.models.transformer.Transformer` and :class:`~transformer_book.models.rnn.RNNSeq2Seq`
(:class:`~transformer_book.contracts.EncoderDecoder`):

* ``model.encode(src) -> (memory, src_mask)``
* ``model.decode(tgt_in, memory, src_mask) -> states (B, n, d)``
* ``model.decode_step(new_tokens, memory, src_mask, cache) -> (states, cache)``
* ``model.output(states) -> logits (..., V)``

Sampling (:func:`generate`) and beam search also drive a decoder-only language model such as
chapter 9's GPT (:class:`~transformer_book.contracts.LanguageModel`), given a prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from transformer_book import checks
from transformer_book.contracts import CachedLanguageModel, EncoderDecoder, LanguageModel, conforms, pad_sequences
from transformer_book.tokenizers.subword import EOS_ID, PAD_ID, SOS_ID

__all__ = [
    "greedy_decode",
    "translate",
    "filter_top_k",
    "filter_top_p",
    "next_token_distribution",
    "generate",
    "length_penalty",
    "beam_search",
]


def _check_src(src: torch.Tensor, where: str, name: str = "src") -> None:
    """A non-empty ``(B, m)`` integer tensor (``src``, or ``name``: the prompt)."""
    checks.id_tensor(where, name, src, "(B, m)")
    if src.shape[0] == 0 or src.shape[1] == 0:
        raise ValueError(f"{where}: {name} has shape {tuple(src.shape)}; it needs at least one sentence and one token")


def _max_len(model: nn.Module) -> int | None:
    """The most positions the model takes: its config's ``max_len`` (encoder-decoders) or
    ``context`` (GPT); ``None`` when it has neither."""
    config = getattr(model, "config", None)
    return getattr(config, "max_len", None) or getattr(config, "context", None)


def _check_greedy(where: str, model: nn.Module, src: torch.Tensor, max_new_tokens: int) -> None:
    """An encoder-decoder, a ``(B, m)`` integer ``src`` and a positive ``max_new_tokens`` within
    the model's ``max_len``."""
    if not conforms(model, EncoderDecoder):
        raise TypeError(
            f"{where}: {type(model).__name__} is not an encoder-decoder (encode, decode, decode_step, "
            "output; transformer_book.contracts.EncoderDecoder)"
        )
    _check_src(src, where)
    checks.positive_int(where, max_new_tokens=max_new_tokens)
    limit = _max_len(model)
    if limit is not None and max_new_tokens > limit:
        raise ValueError(f"{where}: max_new_tokens={max_new_tokens} exceeds the model's max_len={limit}")


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    *,
    max_new_tokens: int,
    sos_id: int = SOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> torch.Tensor:
    """Greedy decoding of a batch of source sentences.

    Runs the model in evaluation mode (and restores its mode afterwards). At each step the
    decoder reads the whole prefix generated so far; chapter 9 adds a cache that avoids
    recomputing it.

    Args:
        model: an encoder-decoder (see the module docstring).
        src: ``(B, m)`` source ids, PAD-padded.
        max_new_tokens: the most tokens generated per sentence (EOS included).

    Returns:
        ``(B, T)`` int64 ids, ``T <= max_new_tokens``, without SOS: each row is the sentence's
        tokens, its EOS (unless it hit the limit), then PAD.

    Raises:
        ValueError: ``src`` is not a non-empty 2-D integer tensor, or ``max_new_tokens`` is not a
            positive int or exceeds the model's ``config.max_len``.
    """
    _check_greedy("greedy_decode", model, src, max_new_tokens)
    was_training = model.training
    model.eval()
    try:
        memory, src_mask = model.encode(src)
        generated = torch.full((src.shape[0], 1), sos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_new_tokens):
            states = model.decode(generated, memory, src_mask)  # (B, t, d)
            next_token = model.output(states[:, -1]).argmax(dim=-1)  # (B,): the last position only
            next_token = next_token.masked_fill(finished, pad_id)  # stopped sentences get PAD
            generated = torch.cat([generated, next_token[:, None]], dim=1)
            finished |= next_token == eos_id  # each sentence its own EOS
            if bool(finished.all()):
                break
    finally:
        model.train(was_training)
    return generated[:, 1:]


def translate(
    model: nn.Module,
    sentences: Sequence[str],
    source_tokenizer: Any,
    target_tokenizer: Any = None,
    *,
    batch_size: int = 100,
    max_new_tokens: int | None = None,
    device: torch.device | str | None = None,
    beam_size: int = 1,
    normalize: str | None = "length",
) -> list[str]:
    """Translate sentences and return the detokenised translations: greedy decoding, or with
    ``beam_size`` > 1 the best hypothesis of :func:`beam_search` ranked by ``normalize``
    (default: the mean log-probability per token, chapter 8's choice).

    Sentences are encoded with ``source_tokenizer`` (EOS appended), decoded in batches of
    similar length, and written out with ``target_tokenizer`` (default: the same tokeniser);
    the result is in the input order.

    Long inputs are rejected, not cut: a sentence that needs more positions than the model's
    ``config.max_len`` raises, naming the sentence. By default at most
    ``2 * (source length) + 10`` tokens are generated, capped at ``max_len``.

    Raises:
        ValueError: an empty or non-string sentence, one longer than the model's maximum, or a
            ``batch_size``, ``beam_size`` or ``normalize`` that :func:`beam_search` would refuse.
    """
    if isinstance(sentences, str):
        raise ValueError("translate: sentences must be a sequence of str, got one str")
    checks.positive_int("translate", batch_size=batch_size)
    if max_new_tokens is not None:  # None means the default; 0 is not "the default"
        checks.positive_int("translate", max_new_tokens=max_new_tokens)
    _check_beam(beam_size, normalize, False, where="translate")
    target_tokenizer = target_tokenizer or source_tokenizer
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str) or not sentence.strip():
            raise ValueError(
                f"translate: sentence {index} is {'empty' if isinstance(sentence, str) else type(sentence).__name__}"
            )
    encoded = source_tokenizer.encode_batch(list(sentences), add_eos=True)
    limit = _max_len(model)
    if limit is not None:
        for index, ids in enumerate(encoded):
            if len(ids) > limit:
                raise ValueError(
                    f"translate: sentence {index} has {len(ids)} tokens with EOS, more than the "
                    f"model's max_len={limit}; split it into shorter sentences"
                )
    device = torch.device(device) if device is not None else next(model.parameters()).device
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out: list[str] = [""] * len(encoded)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = pad_sequences([encoded[i] for i in chunk], PAD_ID).to(device)
        budget = 2 * src.shape[1] + 10 if max_new_tokens is None else max_new_tokens
        if limit is not None:
            budget = min(budget, limit)
        if beam_size == 1:
            rows = list(greedy_decode(model, src, max_new_tokens=budget).cpu())
        else:  # each element's hypotheses come best first
            found = beam_search(model, src=src, beam_size=beam_size, max_new_tokens=budget, normalize=normalize)
            rows = [torch.tensor(hypotheses[0][0], dtype=torch.long) for hypotheses in found]
        for i, row in zip(chunk, rows):
            out[i] = target_tokenizer.decode(row)
    return out


# --------------------------------------------------------------------------------------
# Chapter 8: truncated distributions, sampling and beam search; chapter 9: the cache
# --------------------------------------------------------------------------------------


def filter_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    r"""Keep the ``k`` highest logits of every row, set the others to :math:`-\infty`.

    A token tied with the ``k``-th highest logit is kept too (so a row may keep more than
    ``k``): which of equal tokens to drop would otherwise depend on the sort's order.

    Raises:
        ValueError: ``k`` is not a positive int.
    """
    checks.positive_int("filter_top_k", k=k)
    return _top_k(logits, k)


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`filter_top_k` with a ``k`` the caller has checked."""
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1): the k-th highest
    return logits.masked_fill(logits < kth, float("-inf"))


def _check_top_p(where: str, p: float, logits: torch.Tensor) -> None:
    """``p`` in (0, 1], and ``logits`` without NaN."""
    checks.probability(where, "p", p, zero=False, one=True)
    if torch.isnan(logits).any():
        raise ValueError(f"{where}: logits hold NaN")


def filter_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    r"""Nucleus filtering (Holtzman et al., 2020): keep the most probable tokens until their
    probability reaches ``p``, set the others to :math:`-\infty`.

    Token :math:`v` is kept when the tokens *more* probable than it hold less than ``p``:

    .. math:: \sum_{u:\, P(u) > P(v)} P(u) < p ,

    so the token whose probability crosses ``p`` is kept, the most probable token always is,
    and tokens tied in probability are kept or dropped together.

    Raises:
        ValueError: ``p`` outside :math:`(0, 1]`, or NaN logits.
    """
    _check_top_p("filter_top_p", p, logits)
    probs = torch.softmax(logits.float(), dim=-1)
    # mass strictly above each token: sum over u of P(u) [P(u) > P(v)], via the sorted cumulative sum
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    cumulative = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass before, in sorted order
    # equal probabilities must see the same "mass above": take the smallest over each tie group
    first_of_tie = torch.searchsorted(-sorted_probs.contiguous(), -sorted_probs.contiguous(), side="left")
    above_sorted = cumulative.gather(-1, first_of_tie)
    above = torch.empty_like(above_sorted).scatter_(-1, order, above_sorted)
    return logits.masked_fill(above >= p, float("-inf"))


def _check_sampling(where: str, temperature: float, top_k: int | None, top_p: float | None) -> None:
    """The settings of sampling: a finite ``temperature >= 0``, a positive int ``top_k`` and a
    ``top_p`` in (0, 1] (``None``: no such filter)."""
    checks.finite_real(where, "temperature", temperature, at_least=0)
    if top_k is not None:
        checks.positive_int(where, top_k=top_k)
    if top_p is not None:
        checks.probability(where, "top_p", top_p, zero=False, one=True)


def _check_logits(where: str, logits: torch.Tensor, temperature: float, top_p: float | None) -> None:
    """Logits without NaN (checked here unless :func:`filter_top_p` will check them: one pass over
    the logits, not two) or +inf, and no row that is -inf everywhere."""
    if (top_p is None or temperature == 0) and torch.isnan(logits).any():
        raise ValueError(f"{where}: logits hold NaN (a diverged model, or a bad input)")
    if torch.isposinf(logits).any():
        raise ValueError(f"{where}: logits hold +inf (a diverged model, or a bad input)")
    if logits.numel() and torch.isneginf(logits).all(dim=-1).any():
        raise ValueError(
            f"{where}: a row of logits is -inf everywhere: every token is excluded, "
            "and there is no distribution to draw from"
        )


def next_token_distribution(
    logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    r"""The distribution that sampling draws from: :math:`\operatorname{softmax}(z / T)` after
    top-k and then top-p filtering of :math:`z / T`. ``temperature=0`` is the limit
    :math:`T \to 0`: all mass on the argmax (greedy decoding).

    Returns:
        Probabilities of ``logits``' shape, each row summing to one.

    Raises:
        ValueError: a negative, infinite or NaN temperature, NaN or +inf logits, a row of
            logits that is -inf everywhere, or a bad ``top_k`` or ``top_p``.
    """
    _check_sampling("next_token_distribution", temperature, top_k, top_p)
    return _distribution("next_token_distribution", logits, temperature, top_k, top_p)


def _distribution(
    where: str, logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None
) -> torch.Tensor:
    """:func:`next_token_distribution` with settings the caller has checked (:func:`generate`
    checks them once, not at every step); the logits, new at every step, are checked here."""
    _check_logits(where, logits, temperature, top_p)
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(torch.float32)
    scaled = logits.float() / temperature
    if top_k is not None:
        scaled = _top_k(scaled, top_k)
    if top_p is not None:
        scaled = filter_top_p(scaled, top_p)
    return torch.softmax(scaled, dim=-1)


def _select(obj: Any, index: torch.Tensor) -> Any:
    """Rows ``index`` (dim 0) of every tensor or cache in a nested structure."""
    from transformer_book.attention import KVCache

    if isinstance(obj, torch.Tensor):
        return obj.index_select(0, index)
    if isinstance(obj, KVCache):
        return obj.select(index)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_select(o, index) for o in obj)
    return obj


class _Session:
    """Scores continuations of a batch of prefixes, for an encoder-decoder (``src`` given) or a
    decoder-only model (``prompt`` given), with or without the key/value cache.

    ``prefix`` holds every row's tokens so far (SOS, or the prompt, first); :meth:`logits`
    returns the next-token logits of every row; :meth:`advance` appends one token per row;
    :meth:`select` keeps some rows (beam search).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        src: torch.Tensor | None,
        prompt: torch.Tensor | None,
        sos_id: int,
        use_cache: bool,
        max_new_tokens: int,
        where: str,
    ) -> None:
        self.model, self.use_cache = model, use_cache
        self.seq2seq = conforms(model, EncoderDecoder)
        if not self.seq2seq and not conforms(model, CachedLanguageModel if use_cache else LanguageModel):
            raise TypeError(
                f"{where}: {type(model).__name__} is neither an encoder-decoder (encode, decode, "
                "decode_step, output) nor a language model (callable on ids"
                f"{', with decode_step for use_cache=True' if use_cache else ''}); see "
                "transformer_book.contracts"
            )
        if self.seq2seq:
            if src is None or prompt is not None:
                raise ValueError(f"{where}: an encoder-decoder model needs src (and no prompt)")
            _check_src(src, where)
            _check_max_new_tokens(model, max_new_tokens, 1, where)
            was_training = model.training
            model.eval()  # the memory is encoded once, here: without dropout, whatever the caller's mode
            try:
                self.memory, self.src_mask = model.encode(src)
            finally:
                model.train(was_training)
            self.prefix = torch.full((src.shape[0], 1), sos_id, dtype=torch.long, device=src.device)
        else:
            if prompt is None or src is not None:
                raise ValueError(f"{where}: a decoder-only model needs a prompt (and no src)")
            _check_src(prompt, where, "prompt")
            _check_max_new_tokens(model, max_new_tokens, prompt.shape[1], where)
            self.memory = self.src_mask = None
            self.prefix = prompt
        self.cache: Any = None
        self.pending = self.prefix  # the tokens the cache has not seen yet

    def logits(self) -> torch.Tensor:
        model = self.model
        if self.seq2seq:
            if self.use_cache:
                states, self.cache = model.decode_step(self.pending, self.memory, self.src_mask, self.cache)
                return model.output(states[:, -1])
            return model.output(model.decode(self.prefix, self.memory, self.src_mask)[:, -1])
        if self.use_cache:
            out, self.cache = model.decode_step(self.pending, self.cache)
            return out[:, -1]
        return model(self.prefix)[:, -1]

    def advance(self, tokens: torch.Tensor) -> None:
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)
        self.pending = tokens[:, None]

    def select(self, index: torch.Tensor) -> None:
        self.prefix, self.pending = self.prefix.index_select(0, index), self.pending.index_select(0, index)
        self.memory, self.src_mask, self.cache = (_select(x, index) for x in (self.memory, self.src_mask, self.cache))


def _check_max_new_tokens(model: nn.Module, max_new_tokens: int, start: int, where: str) -> None:
    checks.positive_int(where, max_new_tokens=max_new_tokens)
    limit = _max_len(model)
    if limit is not None and start + max_new_tokens - 1 > limit:
        raise ValueError(
            f"{where}: {start} prefix tokens + {max_new_tokens} new ones need "
            f"{start + max_new_tokens - 1} positions, more than the model's {limit}"
        )


@torch.inference_mode()
def generate(
    model: nn.Module,
    *,
    src: torch.Tensor | None = None,
    prompt: torch.Tensor | None = None,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    sos_id: int = SOS_ID,
    eos_id: int | None = EOS_ID,
    pad_id: int = PAD_ID,
) -> torch.Tensor:
    """Generate continuations, greedily (``temperature=0``, the default) or by sampling from
    :func:`next_token_distribution` (temperature, top-k, top-p). Runs in inference mode: no
    autograd bookkeeping, which a step of a small model notices (SmolLM2-135M on a CPU: 3% faster
    than under ``no_grad``).

    For an encoder-decoder pass ``src`` ``(B, m)``: decoding starts from SOS. For a
    decoder-only model pass ``prompt`` ``(B, n)`` (equal-length prompts). Each row stops at
    its own ``eos_id`` (``None``: never) and is padded with ``pad_id`` afterwards.
    ``use_cache=False`` recomputes the whole prefix at every step (the reference the cache is
    checked against).

    Returns:
        ``(B, T)`` new token ids, ``T <= max_new_tokens`` (the prompt or SOS not included).

    Raises:
        ValueError: a bad ``src`` or ``prompt``, ``max_new_tokens`` not a positive int or beyond
            the model's positions, or a sampling setting that :func:`next_token_distribution`
            would refuse (checked once, whatever the temperature).
    """
    _check_sampling("generate", temperature, top_k, top_p)
    session = _Session(
        model,
        src=src,
        prompt=prompt,
        sos_id=sos_id,
        use_cache=use_cache,
        max_new_tokens=max_new_tokens,
        where="generate",
    )
    was_training = model.training
    model.eval()
    try:
        finished = torch.zeros(session.prefix.shape[0], dtype=torch.bool, device=session.prefix.device)
        new = []
        for _ in range(max_new_tokens):
            logits = session.logits()  # (B, V)
            if temperature == 0:
                token = logits.argmax(dim=-1)
            else:
                probs = _distribution("generate", logits, temperature, top_k, top_p)
                token = torch.multinomial(probs, 1, generator=generator)[:, 0]
            token = token.masked_fill(finished, pad_id)
            new.append(token)
            session.advance(token)
            if eos_id is not None:
                finished |= token == eos_id
                if bool(finished.all()):
                    break
    finally:
        model.train(was_training)
    return torch.stack(new, dim=1)


def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    r"""GNMT's length penalty (Wu et al., 2016): :math:`lp(Y) = (5 + |Y|)^\alpha / 6^\alpha`.
    Dividing a hypothesis's log-probability by it favours longer outputs; :math:`\alpha = 0`
    gives 1 (no normalisation)."""
    return ((5.0 + length) / 6.0) ** alpha


def _check_beam(beam_size: int, normalize: str | None, shrink: bool, where: str = "beam_search") -> None:
    checks.positive_int(where, beam_size=beam_size)
    checks.choice(where, "normalize", normalize, (None, "length", "gnmt"))
    checks.boolean(where, shrink=shrink)


@torch.no_grad()
def beam_search(
    model: nn.Module,
    *,
    src: torch.Tensor | None = None,
    prompt: torch.Tensor | None = None,
    beam_size: int,
    max_new_tokens: int,
    normalize: str | None = None,
    alpha: float = 0.6,
    shrink: bool = False,
    use_cache: bool = True,
    sos_id: int = SOS_ID,
    eos_id: int = EOS_ID,
) -> list[list[tuple[list[int], float]]]:
    r"""Beam search: keep the ``beam_size`` (:math:`k`) most probable prefixes at every step.

    Every live hypothesis is extended by every token, and the candidates are scored by their
    summed log-probability :math:`\sum_t \log P(y_t \mid y_{<t}, x)` (a negative number; higher
    is better). Taken in that order, a candidate that ends in EOS becomes a finished hypothesis,
    the others stay live. Two ways to fill the beam:

    * ``shrink=False`` (fixed :math:`k`): finished hypotheses take no slot. The best ``beam_size``
      candidates that do not end in EOS stay live, and every EOS candidate ranked above the last
      of them is finished; the beam stays :math:`k` wide.
    * ``shrink=True``: finished hypotheses keep their slots. An element with :math:`f` finished
      hypotheses takes its best :math:`k - f` candidates; those ending in EOS are finished, so
      the next step's beam is one narrower for each.

    Each batch element finishes on its own, once it has ``beam_size`` finished hypotheses, or at
    ``max_new_tokens`` (then its live hypotheses count as finished). The fixed beam may return more
    than ``beam_size``; the shrinking one returns exactly ``beam_size`` (fewer only when fewer
    candidates have a non-zero probability). Finished hypotheses are ranked by

    * ``normalize=None``: the summed log-probability (favours short outputs);
    * ``"length"``: the mean log-probability per token (EOS counted);
    * ``"gnmt"``: the sum divided by :func:`length_penalty` with ``alpha``.

    Args:
        model: an encoder-decoder, given ``src`` ``(B, m)``, or a decoder-only language model,
            given ``prompt`` ``(B, n)`` (see the module docstring).
        beam_size: :math:`k`, the live hypotheses kept per element (at most).
        max_new_tokens: the most tokens a hypothesis gets (EOS included).
        shrink: narrow the beam by one for every finished hypothesis (default: fixed :math:`k`).
        use_cache: read the decoder's keys and values from a cache (``False``: recompute every
            prefix; same result).

    Returns:
        For each of the ``B`` batch elements, a list of its finished hypotheses, best first, as
        ``(tokens, score)``: ``tokens`` a list of ids without SOS (or the prompt), with their EOS
        when they have one; ``score`` the float the hypotheses are ranked by (``normalize``).

    Raises:
        ValueError: ``beam_size`` below 1, an unknown ``normalize``, a ``shrink`` that is not a
            bool, or a bad input.
    """
    _check_beam(beam_size, normalize, shrink)
    session = _Session(
        model,
        src=src,
        prompt=prompt,
        sos_id=sos_id,
        use_cache=use_cache,
        max_new_tokens=max_new_tokens,
        where="beam_search",
    )  # checks the prefix and the length
    start = session.prefix.shape[1]

    def final_score(total: float, length: int) -> float:
        if normalize == "length":
            return total / length
        if normalize == "gnmt":
            return total / float(length_penalty(length, alpha))
        return total

    batch = session.prefix.shape[0]
    device = session.prefix.device
    finished: list[list[tuple[list[int], float]]] = [[] for _ in range(batch)]
    owner = torch.arange(batch, device=device)  # the batch element of every live row
    scores = torch.zeros(batch, device=device)  # summed log-probabilities of the live rows
    was_training = model.training
    model.eval()
    try:
        for step in range(max_new_tokens):
            log_probs = torch.log_softmax(session.logits().float(), dim=-1)  # (R, V)
            vocab = log_probs.shape[-1]
            candidates = scores[:, None] + log_probs  # (R, V)
            keep_rows, keep_tokens, keep_scores = [], [], []
            for b in owner.unique(sorted=True).tolist():
                rows = torch.nonzero(owner == b).flatten()
                flat = candidates[rows].flatten()  # (r * V,)
                slots = beam_size - len(finished[b]) if shrink else beam_size
                order = torch.argsort(flat, descending=True, stable=True)[: 2 * slots]
                used = 0
                for position in order.tolist():
                    row, token = rows[position // vocab].item(), position % vocab
                    total = flat[position].item()
                    if total == float("-inf"):
                        break
                    if token == eos_id or step + 1 == max_new_tokens:  # finished (at the limit: still live)
                        tokens = session.prefix[row, start:].tolist() + [token]
                        finished[b].append((tokens, final_score(total, len(tokens))))
                    else:
                        keep_rows.append(row)
                        keep_tokens.append(token)
                        keep_scores.append(total)
                    used += 1 if shrink or token != eos_id else 0  # fixed k: a finished one takes no slot
                    if used == slots:
                        break
                if len(finished[b]) >= beam_size:  # this element is done
                    drop = [i for i, r in enumerate(keep_rows) if owner[r].item() == b]
                    for i in reversed(drop):
                        del keep_rows[i], keep_tokens[i], keep_scores[i]
            if not keep_rows:
                break
            index = torch.tensor(keep_rows, device=device)
            session.select(index)
            owner = owner.index_select(0, index)
            scores = torch.tensor(keep_scores, device=device)
            session.advance(torch.tensor(keep_tokens, device=device))
    finally:
        model.train(was_training)
    return [sorted(hyps, key=lambda h: h[1], reverse=True) for hyps in finished]
