r"""Low-rank adaptation, LoRA (Hu et al., 2021) (chapter 20).

Fine-tuning changes every weight of a pretrained model; LoRA keeps them and learns a change of
low rank instead. A pretrained linear layer :math:`h = x W^\top + b`, with
:math:`W \in \mathbb{R}^{d_{out} \times d_{in}}`, becomes

.. math::

    h = x W^\top + b + \frac{\alpha}{r}\, x A^\top B^\top, \qquad
    \Delta W = \frac{\alpha}{r}\, B A, \quad A \in \mathbb{R}^{r \times d_{in}},\
    B \in \mathbb{R}^{d_{out} \times r},

with :math:`W` and :math:`b` frozen and only :math:`A` and :math:`B` trained:
:math:`r (d_{in} + d_{out})` weights instead of :math:`d_{in} d_{out}`. :math:`B` starts at
zero, so training starts from the pretrained model exactly, and :math:`\alpha / r` keeps the
size of the update roughly independent of the rank (Hu et al.: tuning :math:`\alpha` is like
tuning the learning rate, so it need not be retuned when :math:`r` changes). Since the update is
a matrix of the layer's own shape, it can be added to :math:`W` once training is over
(:meth:`LoRALinear.merge`, :func:`merge_lora`): the adapted model then costs no more to run than
the original.

* :class:`LoRALinear` wraps one ``nn.Linear``;
* :func:`apply_lora` wraps the layers of a model chosen by attribute name (by default the query
  and value projections ``w_q`` and ``w_v`` of every
  :class:`~transformer_book.attention.MultiHeadAttention`, Hu et al.'s choice) and freezes
  everything else but the modules named in ``train`` (a new classification head);
* :func:`merge_lora` folds every update into its weight, leaving plain ``nn.Linear`` layers;
* :func:`lora_state_dict` keeps only what training changed (a small adapter file) and
  :func:`trainable_parameters` counts it.

Reference: Hu et al. 2021, *LoRA: Low-Rank Adaptation of Large Language Models*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks
from transformer_book.attention import MultiHeadAttention

__all__ = ["LoRALinear", "apply_lora", "merge_lora", "lora_state_dict", "trainable_parameters"]


def _check_rank(where: str, linear: object, r: object, alpha: object, dropout: object = 0.0) -> None:
    """The arguments of one LoRA layer: an ``nn.Linear`` of floating-point weights, a rank
    ``1 <= r <= min(d_in, d_out)``, a finite ``alpha > 0`` and a dropout rate in ``[0, 1)``."""
    if not isinstance(linear, nn.Linear):
        raise ValueError(f"{where}: expected an nn.Linear to adapt, got {type(linear).__name__}")
    if not linear.weight.dtype.is_floating_point:
        raise ValueError(f"{where}: the layer's weight must be floating point, got {linear.weight.dtype}")
    checks.integer(where, "r", r, minimum=1)
    if r > min(linear.in_features, linear.out_features):
        raise ValueError(
            f"{where}: r={r} exceeds min(d_in, d_out) = min({linear.in_features}, "
            f"{linear.out_features}): a rank-{r} update of that matrix is not low rank"
        )
    checks.finite_real(where, "alpha", alpha, above=0.0)
    checks.probability(where, "dropout", dropout)


class LoRALinear(nn.Module):
    r"""A frozen ``nn.Linear`` plus a trained low-rank update (Hu et al., 2021).

    .. math::

        h = x W^\top + b + \frac{\alpha}{r}\, \operatorname{dropout}(x)\, A^\top B^\top

    ``base`` is the wrapped layer, kept as it is with ``requires_grad=False`` on its weight and
    bias; ``lora_a`` is :math:`A` ``(r, d_in)`` and ``lora_b`` is :math:`B` ``(d_out, r)``, on
    the base's device and in its dtype; ``scaling`` is :math:`\alpha / r`. ``dropout`` acts on
    the input of the low-rank branch only (the base layer sees ``x`` itself).

    Initialisation: :math:`B = 0`, so that the layer starts as the pretrained one, and
    :math:`A` Kaiming-uniform with :math:`a = \sqrt{5}`, as ``nn.Linear`` initialises its
    weight (and as Hu et al.'s own code does), that is :math:`U(-1/\sqrt{d_{in}}, 1/\sqrt{d_{in}})`.
    With this bound :math:`x A^\top` has entries of the size of :math:`x`'s whatever the width
    and the rank, so that the size of the update, and of :math:`B`'s gradient
    :math:`\tfrac{\alpha}{r} g^\top (x A^\top)`, is set by :math:`\alpha / r` alone. (A normal
    :math:`A` with standard deviation :math:`1/r` would make the branch shrink with the rank a
    second time.) While :math:`B = 0` the gradient with respect to :math:`A` is zero too: the
    first step moves :math:`B` only.

    :meth:`merge` adds :math:`\Delta W = \frac{\alpha}{r} B A` (:meth:`delta_weight`) to the base
    weight and makes :meth:`forward` skip the branch (``merged`` is then ``True``; for
    inference: a merged layer passes no gradient to :math:`A` and :math:`B`); :meth:`unmerge`
    subtracts it again, which restores the weight up to float rounding.

    :attr:`weight` and :attr:`bias` are the weight and bias the layer applies
    (:math:`W + \Delta W` and :math:`b`), so code that reads a linear layer's weight, such as
    :class:`~transformer_book.attention.MultiHeadAttention`'s packed projection, sees the adapted
    layer. Write to ``base.weight``, not to :attr:`weight` (a new tensor while unmerged).

    Shapes: ``x`` ``(..., d_in)`` -> ``(..., d_out)``.

    Raises:
        ValueError: ``base`` is not an ``nn.Linear``, ``r`` is not an int in
            ``[1, min(d_in, d_out)]``, ``alpha`` is not a finite positive number, or ``dropout``
            lies outside ``[0, 1)``.
    """

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0) -> None:
        _check_rank("LoRALinear", base, r, alpha, dropout)
        super().__init__()
        self.base = base.requires_grad_(False)
        self.r, self.alpha, self.scaling = r, float(alpha), float(alpha) / r
        self.dropout = nn.Dropout(dropout)
        like = dict(device=base.weight.device, dtype=base.weight.dtype)
        self.lora_a = nn.Parameter(torch.empty(r, base.in_features, **like))  # A: (r, d_in)
        self.lora_b = nn.Parameter(torch.empty(base.out_features, r, **like))  # B: (d_out, r)
        self.merged = False
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """:math:`A` Kaiming-uniform (:math:`a = \\sqrt{5}`), :math:`B = 0`; the base is untouched."""
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        nn.init.zeros_(self.lora_b)

    @property
    def in_features(self) -> int:
        """:math:`d_{in}`, the base layer's."""
        return self.base.in_features

    @property
    def out_features(self) -> int:
        """:math:`d_{out}`, the base layer's."""
        return self.base.out_features

    @property
    def weight(self) -> torch.Tensor:
        """The weight the layer applies, ``(d_out, d_in)``: :math:`W + \\Delta W` while unmerged
        (a new tensor, differentiable in :math:`A` and :math:`B`), ``base.weight`` once merged."""
        return self.base.weight if self.merged else self.base.weight + self.delta_weight()

    @property
    def bias(self) -> torch.Tensor | None:
        """The base layer's bias :math:`b` (``None`` without one); LoRA leaves it as it is."""
        return self.base.bias

    def delta_weight(self) -> torch.Tensor:
        r"""The update :math:`\Delta W = \frac{\alpha}{r} B A`, ``(d_out, d_in)``, of rank at most :math:`r`."""
        return self.scaling * (self.lora_b @ self.lora_a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged:  # W already holds W + (alpha / r) B A
            return self.base(x)
        low_rank = F.linear(F.linear(self.dropout(x), self.lora_a), self.lora_b)  # x A^T B^T: (..., d_out)
        return self.base(x) + self.scaling * low_rank

    @torch.no_grad()
    def merge(self) -> LoRALinear:
        """Add :math:`\\Delta W` to the base weight in place, so that :meth:`forward` is one
        product; a merged layer stays merged (calling it again changes nothing). Returns ``self``."""
        if not self.merged:
            self.base.weight.add_(self.delta_weight())
            self.merged = True
        return self

    @torch.no_grad()
    def unmerge(self) -> LoRALinear:
        """Subtract :math:`\\Delta W` from the base weight again (the original weight up to float
        rounding) and go back to the two-branch forward. Returns ``self``."""
        if self.merged:
            self.base.weight.sub_(self.delta_weight())
            self.merged = False
        return self

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
            f"alpha={self.alpha:g}, scaling={self.scaling:g}, dropout={self.dropout.p:g}, merged={self.merged}"
        )


def _check_module(where: str, model: object) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"{where}: model must be an nn.Module, got {type(model).__name__}")


def _under(name: str, prefixes: Sequence[str]) -> bool:
    """Whether the qualified module name ``name`` is one of ``prefixes`` or lies inside one."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _names_of(model: nn.Module, kind: type | None = None) -> dict[str, nn.Module]:
    """Every module of ``model`` by qualified name (shared modules under each of their names)."""
    return {name: m for name, m in model.named_modules(remove_duplicate=False) if kind is None or isinstance(m, kind)}


def _tied(model: nn.Module) -> dict[int, list[str]]:
    """The parameters of ``model`` reachable under more than one name (tied weights), by ``id``."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return {key: found for key, found in names.items() if len(found) > 1}


def _names(where: str, argument: str, value: object) -> tuple[str, ...]:
    """A sequence of non-empty str (not one str, whose letters would be taken for names)."""
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: {argument} must be a sequence of module names, e.g. ('w_q', 'w_v'), got {value!r}")
    return tuple(value)


def _check_apply(
    model: nn.Module, targets: Sequence[str], r: int, alpha: float, dropout: float, train: Sequence[str]
) -> dict[str, nn.Linear]:
    """Check every argument of :func:`apply_lora` before the model is touched (a refused call
    leaves it as it was) and return the layers to wrap, by qualified name."""
    where = "apply_lora"
    _check_module(where, model)
    targets, train = _names(where, "targets", targets), _names(where, "train", train)
    if not targets:
        raise ValueError(f"{where}: targets is empty: name at least one linear layer to adapt")
    if any(isinstance(m, LoRALinear) for m in model.modules()):
        raise ValueError(
            f"{where}: the model has LoRA layers already (apply_lora was applied); "
            "merge_lora it first, or adapt a fresh copy of the base model"
        )
    linears = _names_of(model, nn.Linear)
    found = {name: m for name, m in linears.items() if name.rpartition(".")[2] in targets}
    missing = [t for t in targets if not any(name.rpartition(".")[2] == t for name in found)]
    if missing:
        known = sorted({name.rpartition(".")[2] for name in linears})
        raise ValueError(
            f"{where}: no nn.Linear is named {missing} in {type(model).__name__}; its linear layers are named {known}"
        )
    for name, linear in found.items():
        _check_rank(f"{where} ({name})", linear, r, alpha, dropout)
        if sum(m is linear for m in linears.values()) > 1:
            raise ValueError(
                f"{where}: the layer {name} is shared with another name; wrapping it under one "
                "name would leave the other unadapted"
            )
    tied, modules = _tied(model), _names_of(model)
    for name, linear in found.items():
        for parameter in linear.parameters():
            if id(parameter) in tied:
                raise ValueError(
                    f"{where}: {name}'s weight is tied to {tied[id(parameter)]}; adapting (and later "
                    "merging into) it would change the tied weights too"
                )
    for prefix in train:
        if not any(_under(name, (prefix,)) for name in modules):
            raise ValueError(f"{where}: train names {prefix!r}, but {type(model).__name__} has no module of that name")
    for shared in tied.values():
        inside = [_under(name.rpartition(".")[0], train) for name in shared]
        if any(inside) and not all(inside):
            raise ValueError(
                f"{where}: training {train} would also train the tied weight {shared}; name all of "
                "its modules in train, or none"
            )
    return found


def _keep_branch_unpacked(parent: nn.Module, attribute: str, dropout: float) -> None:
    """A self-attention that packs its Q, K and V products reads ``w_q.weight``, ..., which holds
    the update but not the branch's dropout: with dropout the attention computes them one by one."""
    if (
        dropout > 0
        and isinstance(parent, MultiHeadAttention)
        and attribute in ("w_q", "w_k", "w_v")
        and "pack_projections" not in vars(parent)
    ):
        parent.pack_projections = False
        parent._lora_unpacked = True


def apply_lora(
    model: nn.Module,
    *,
    targets: Sequence[str] = ("w_q", "w_v"),
    r: int = 8,
    alpha: float = 16.0,
    dropout: float = 0.0,
    train: Sequence[str] = (),
) -> nn.Module:
    r"""Adapt ``model`` in place with LoRA: every ``nn.Linear`` whose attribute name is in
    ``targets`` becomes a :class:`LoRALinear` around it, and every other parameter is frozen
    except those of the modules whose qualified name is or starts with one of ``train`` (a new
    task head: ``"classifier"`` of a
    :class:`~transformer_book.models.finetuning.SequenceClassifier`, say).

    The book's attention projections are ``w_q``, ``w_k``, ``w_v`` and ``w_o`` (in every layer
    of :class:`~transformer_book.models.bert.BERT` and :class:`~transformer_book.models.gpt.GPT`);
    the feed-forward layers are ``linear1`` and ``linear2``. Each wrapped layer adds
    :math:`r (d_{in} + d_{out})` trainable weights. The base weight of a LoRA layer stays frozen
    even inside a ``train`` module. :math:`A` is drawn from the global random generator, one
    layer after another in the model's order, so a seeded call repeats.

    Tied weights are never adapted or unfrozen by accident: a target whose weight is shared
    (GPT's ``output``, tied to the token embedding) is refused, and so is a ``train`` list that
    names some but not all of the modules holding a tied weight.

    Returns:
        ``model`` itself, adapted.

    Raises:
        ValueError: a target or a ``train`` name that matches no module, ``targets``/``train``
            given as one str, ``r`` not an int in ``[1, min(d_in, d_out)]`` of every target,
            ``alpha`` not a finite positive number, ``dropout`` outside ``[0, 1)``, a model with
            LoRA layers already, or a tied or shared target. Nothing is changed then.
    """
    found = _check_apply(model, targets, r, alpha, dropout, train)  # {qualified name: nn.Linear}
    model.requires_grad_(False)
    for name, linear in found.items():
        parent_name, _, attribute = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, attribute, LoRALinear(linear, r, alpha, dropout))
        _keep_branch_unpacked(parent, attribute, dropout)
    for name, module in model.named_modules():
        if _under(name, train):
            module.requires_grad_(True)
    for module in model.modules():
        if isinstance(module, LoRALinear):
            module.base.requires_grad_(False)  # W and b stay as pretrained
    return model


def _lora_layers(where: str, model: nn.Module) -> dict[str, LoRALinear]:
    """The LoRA layers of ``model`` by qualified name; a ValueError when there is none."""
    _check_module(where, model)
    layers = dict(_names_of(model, LoRALinear))
    if not layers:
        raise ValueError(f"{where}: {type(model).__name__} has no LoRA layer (apply_lora it first)")
    return layers


def merge_lora(model: nn.Module) -> nn.Module:
    r"""Replace every :class:`LoRALinear` of ``model`` by its base ``nn.Linear`` holding the merged
    weight :math:`W + \frac{\alpha}{r} B A`: a model with no LoRA left and the same outputs (up to
    float rounding), as fast as the original. In place; returns ``model`` (the merged base layer
    when ``model`` is itself a :class:`LoRALinear`). The merged layers stay frozen, as the base
    weights were.

    Raises:
        ValueError: ``model`` has no LoRA layer.
    """
    layers = _lora_layers("merge_lora", model)
    if isinstance(model, LoRALinear):
        return model.merge().base
    for name, layer in layers.items():
        parent_name, _, attribute = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, attribute, layer.merge().base)
        if vars(parent).pop("_lora_unpacked", False):  # no branch left: packing is exact again
            del parent.pack_projections
    return model


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """What fine-tuning with LoRA changed: every LoRA factor (``...lora_a``, ``...lora_b``) and
    every other trainable parameter (the ``train`` modules of :func:`apply_lora`), under the names
    of ``model.state_dict()``, detached.

    A few thousand weights instead of the whole model: load them into a fresh copy of the base
    model adapted the same way, ``apply_lora(base, ...).load_state_dict(adapter, strict=False)``
    (which reports the base's own weights as missing, and nothing as unexpected).

    Raises:
        ValueError: ``model`` has no LoRA layer.
    """
    layers = _lora_layers("lora_state_dict", model)
    factors = {id(p) for layer in layers.values() for p in (layer.lora_a, layer.lora_b)}
    return {
        name: tensor.detach()
        for name, tensor in model.state_dict(keep_vars=True).items()
        if id(tensor) in factors or (isinstance(tensor, nn.Parameter) and tensor.requires_grad)
    }


def trainable_parameters(model: nn.Module) -> tuple[int, int]:
    """``(trainable, total)``: the number of weights with ``requires_grad`` and of all weights of
    ``model``, a tied weight counted once. (``finetuning.trainable_parameters`` gives the first alone.)"""
    _check_module("trainable_parameters", model)
    parameters = list(model.parameters())  # each tied weight once
    return sum(p.numel() for p in parameters if p.requires_grad), sum(p.numel() for p in parameters)
