"""Pretraining throughput of the chapter 13 BERT, in sequences per second: the book's ``BERT``
against the same model whose encoder is PyTorch's ``nn.TransformerEncoderLayer``.

Two contenders compute the same function (same weights at the start, same batches, same loss,
each with its own AdamW):

* ``ours``  -- ``transformer_book.models.BERT`` (post-LN GELU layers of chapter 6);
* ``torch`` -- the same embeddings and heads around ``nn.TransformerEncoderLayer(norm_first=False,
  activation="gelu", batch_first=True)`` layers holding the same weights
  (``transformer_book.twins.torch_encoder_layer``), called with ``src_key_padding_mask``.

A step is one pretraining step as chapter 13 takes it: sentence pairs of random lengths (mean 68) padded
to the batch's longest, 15% of the real positions selected for the MLM loss (computed at those
positions only), the NSP loss on ``[CLS]``, backward, AdamW. Correctness first: in eval mode both
give the same loss. Then ``--repeats`` interleaved rounds (order rotating) of ``--steps`` steps;
the table reports ms per step (median and best round), sequences per second and the ratio
ours / torch (> 1: the book's model trains faster).

Usage::

    python benchmarks/bert_pretraining_speed.py [--config chapter|gpu|base] [--device cpu|cuda] [--amp]

``--config chapter`` (default) is chapter 13's CPU model (2 layers, width 128, 2 heads, batch 32
pairs of up to 128 tokens, vocabulary 8,000); ``gpu`` its GPU model (4 layers, width 256, 4 heads,
batch 128); ``base`` is BERT-base (12 layers, width 768,
vocabulary 30,522) at length 128, batch 32, for a GPU. Writes JSON (default
``benchmarks/results/bert_pretraining_speed_<config>[_<device>].json``). Not run by CI.
"""

from __future__ import annotations

import argparse
import json
from contextlib import nullcontext
from pathlib import Path
from statistics import median
from typing import NamedTuple

import torch
from timing import interleaved, training_pass
from torch import nn

from transformer_book.models.bert import BERT, IGNORE_INDEX, BERTConfig, pretraining_loss
from transformer_book.runtime import machine_description
from transformer_book.twins import torch_encoder_layer

CONFIGS = {
    "chapter": dict(vocab_size=8_000, max_len=128, d_model=128, n_heads=2, n_layers=2, batch=32, length=128),
    "gpu": dict(vocab_size=8_000, max_len=128, d_model=256, n_heads=4, n_layers=4, batch=128, length=128),
    "base": dict(vocab_size=30_522, max_len=512, d_model=768, n_heads=12, n_layers=12, batch=32, length=128),
}
RESULTS = Path(__file__).resolve().parent / "results"


class Batch(NamedTuple):
    tokens: torch.Tensor
    segments: torch.Tensor
    targets: torch.Tensor
    is_next: torch.Tensor


class TorchEncoder(nn.Module):
    """``nn.TransformerEncoderLayer`` twins of a BERT encoder's layers, with a key-padding mask."""

    def __init__(self, ours: BERT) -> None:
        super().__init__()
        self.layers = nn.ModuleList(torch_encoder_layer(layer) for layer in ours.encoder.layers)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if bias is not None:  # the twin is BERT's learned-position model; ALiBi has no twin here
            raise ValueError("TorchEncoder: an attention bias (ALiBi) has no nn.TransformerEncoderLayer twin here")
        key_padding = mask[:, 0, :]  # (B, 1, n) book mask -> (B, n), True = excluded in both
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=key_padding)
        return x


def make_batches(c: dict, steps: int, device: torch.device) -> list[Batch]:
    """Pairs of random lengths in [length/4, 3 length/4 + 8] (mean 68 for length 128; chapter 13's
    WikiText-2 pairs have a mean of 65 pieces), [CLS] first, two segments, 15% selected."""
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(steps):
        lengths = torch.randint(c["length"] // 4, c["length"] * 3 // 4 + 9, (c["batch"],), generator=g)
        n = int(lengths.max())
        real = torch.arange(n) < lengths[:, None]
        tokens = torch.where(real, torch.randint(5, c["vocab_size"], (c["batch"], n), generator=g), 0)
        tokens[:, 0] = 2
        segments = ((torch.arange(n) >= lengths[:, None] // 2) & real).long()
        selected = (torch.rand(c["batch"], n, generator=g) < 0.15) & real
        selected[:, 0] = False
        targets = torch.where(selected, torch.randint(5, c["vocab_size"], (c["batch"], n), generator=g), IGNORE_INDEX)
        is_next = torch.randint(0, 2, (c["batch"],), generator=g)
        batches.append(Batch(*(t.to(device) for t in (tokens, segments, targets, is_next))))
    return batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="chapter")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", action="store_true", help="bfloat16 autocast (CUDA only)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device, c = torch.device(args.device), CONFIGS[args.config]
    config = BERTConfig(
        c["vocab_size"],
        max_len=c["max_len"],
        d_model=c["d_model"],
        n_heads=c["n_heads"],
        n_layers=c["n_layers"],
        dropout=0.1,
    )
    torch.manual_seed(0)
    ours = BERT(config).to(device)
    with torch.no_grad():  # non-trivial norm parameters and biases, so the check covers them
        for p in ours.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p), alpha=0.05)
    theirs = BERT(config).to(device)
    theirs.load_state_dict(ours.state_dict())
    theirs.encoder = TorchEncoder(theirs).to(device)
    batches = make_batches(c, args.steps, device)
    ours.eval(), theirs.eval()
    with torch.no_grad():
        a, b = pretraining_loss(ours, batches[0]), pretraining_loss(theirs, batches[0])
        torch.testing.assert_close(a.total, b.total, rtol=1e-4, atol=1e-4)
    ours.train(), theirs.train()
    models = {"ours": ours, "torch": theirs}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01) for name, m in models.items()}
    autocast = (
        (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if args.amp and device.type == "cuda" else nullcontext
    )

    def loss_of(model: torch.nn.Module, batch: object) -> torch.Tensor:
        return pretraining_loss(model, batch).total

    # one warm-up pass each, then rounds of one pass each, the order alternating
    passes = {name: training_pass(models[name], optimizers[name], batches, loss_of, autocast) for name in models}
    timing = interleaved(passes, device, args.repeats, warmup=1)
    samples = {name: [t / len(batches) for t in timing.samples[name]] for name in models}  # seconds per step
    rows = {
        name: {
            "median_ms": median(s) * 1e3,
            "min_ms": min(s) * 1e3,
            "sequences_per_s": c["batch"] / median(s),
            "samples_ms": [x * 1e3 for x in s],
        }
        for name, s in samples.items()
    }
    ratio = rows["torch"]["median_ms"] / rows["ours"]["median_ms"]
    ratio_best = rows["torch"]["min_ms"] / rows["ours"]["min_ms"]
    padded = sum(int((b.tokens != 0).sum()) for b in batches) / sum(b.tokens.numel() for b in batches)
    result = {
        "benchmark": "bert_pretraining_speed",
        "config": args.config,
        **c,
        "device": device.type,
        "amp": bool(args.amp and device.type == "cuda"),
        "machine": machine_description(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in ours.parameters()),
        "real_token_share": padded,
        "rows": rows,
        "ratio_ours_over_torch_median": ratio,
        "ratio_ours_over_torch_best": ratio_best,
    }
    print(
        f"\n{args.config}: {result['parameters']:,} parameters, batches of {c['batch']} pairs of up to {c['length']} "
        f"tokens ({padded:.0%} real), {result['machine']}, {result['threads']} threads, torch {torch.__version__}"
        f"{', bf16 autocast' if result['amp'] else ''}\n"
    )
    print("| implementation | median ms/step | best ms/step | sequences/s (median) |")
    print("|---|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['median_ms']:.1f} | {row['min_ms']:.1f} | {row['sequences_per_s']:,.1f} |")
    print(f"\nthroughput ratio ours / torch: {ratio:.3f} (medians), {ratio_best:.3f} (best rounds)")
    suffix = "" if device.type == "cpu" else f"_{device.type}"
    output = args.output or RESULTS / f"bert_pretraining_speed_{args.config}{suffix}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {output}")


if __name__ == "__main__":
    main()
