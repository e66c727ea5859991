"""Time one training step of the chapter 9 language model: the book's ``GPT`` against the same
model built from ``nn.TransformerEncoderLayer`` with a causal mask.

Two contenders compute the same function (same weights at the start, same batches, same loss,
each with its own AdamW):

* ``ours``  -- ``transformer_book.models.GPT`` (pre-LN blocks, GELU, learned positions, tied output);
* ``torch`` -- the same embedding, positions and tied output around an ``nn.TransformerEncoder``
  of ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu", batch_first=True)``
  holding the same weights (``transformer_book.twins.torch_encoder_layer``) and a final
  ``nn.LayerNorm``, called with a boolean causal ``mask`` and ``is_causal=True``.

Correctness first: in eval mode the two models' logits agree. Then ``--repeats`` interleaved
rounds (order rotating) of ``--steps`` training steps on random windows (batch ``--batch`` x
``--context`` tokens); the table reports ms per step (median and best round), tokens per second
and the throughput ratio ours / torch (> 1: the book's model trains faster).

Usage::

    python benchmarks/gpt_training_speed.py [--config cpu|shakespeare] [--device cpu|cuda] [--threads T]

``--config cpu`` (default) is nanoGPT's CPU setting (4 layers, 4 heads, width 128, context 64,
batch 12); ``shakespeare`` its 10.7M-parameter GPU setting (6 layers, 6 heads, width 384,
context 256, batch 64). Writes JSON (default ``benchmarks/results/gpt_training_speed_<config>.json``).
Not run by CI.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import median

import torch
import torch.nn.functional as F
from timing import interleaved, training_pass
from torch import nn

from transformer_book.masks import causal_mask
from transformer_book.models import GPT, GPTConfig
from transformer_book.twins import torch_encoder_layer

CONFIGS = {
    "cpu": dict(n_layers=4, n_heads=4, d_model=128, context=64, batch=12),
    "shakespeare": dict(n_layers=6, n_heads=6, d_model=384, context=256, batch=64),
}
RESULTS = Path(__file__).resolve().parent / "results"


class TorchGPT(nn.Module):
    """``ours``' embeddings and output around ``nn.TransformerEncoder`` layers with the same weights."""

    def __init__(self, ours: GPT) -> None:
        super().__init__()
        self.embedding, self.positional, self.output = ours.embedding, ours.positional, ours.output
        layers = [torch_encoder_layer(layer) for layer in ours.blocks.layers]
        self.encoder = nn.TransformerEncoder(layers[0], len(layers), enable_nested_tensor=False)
        self.encoder.layers = nn.ModuleList(layers)
        self.norm = nn.LayerNorm(ours.config.d_model, eps=ours.blocks.norm.eps)
        with torch.no_grad():
            self.norm.weight.copy_(ours.blocks.norm.gamma)
            self.norm.bias.copy_(ours.blocks.norm.beta)
        self.register_buffer("causal", causal_mask(ours.config.context), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        h = self.encoder(self.positional(self.embedding(tokens)), mask=self.causal[:n, :n], is_causal=True)
        return self.output(self.norm(h))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device, c = torch.device(args.device), CONFIGS[args.config]
    torch.manual_seed(0)
    ours = GPT(
        GPTConfig(
            65, context=c["context"], d_model=c["d_model"], n_heads=c["n_heads"], n_layers=c["n_layers"], dropout=0.0
        )
    ).to(device)
    with torch.no_grad():  # non-trivial norm parameters and biases, so the check covers them
        for p in ours.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p), alpha=0.05)
    theirs = TorchGPT(ours).to(device)
    twin = {k: v.clone() for k, v in ours.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 65, (c["batch"], c["context"] + 1), generator=g).to(device) for _ in range(args.steps)]
    ours.eval(), theirs.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(batches[0][:, :-1]), theirs(batches[0][:, :-1]), rtol=1e-4, atol=1e-4)
    ours.train(), theirs.train()
    # separate weights for the two contenders from here on (the twin shares the embedding)
    theirs.embedding = nn.Embedding.from_pretrained(twin["embedding.weight"].clone(), freeze=False)
    theirs.output = nn.Linear(c["d_model"], 65, bias=False).to(device)
    theirs.output.weight = theirs.embedding.weight
    theirs.positional = type(ours.positional)(c["context"], c["d_model"]).to(device)
    theirs.positional.load_state_dict(ours.positional.state_dict())
    optimizers = {
        name: torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
        for name, model in (("ours", ours), ("torch", theirs))
    }
    models = {"ours": ours, "torch": theirs}

    def loss_of(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(batch[:, :-1]).reshape(-1, 65), batch[:, 1:].reshape(-1))

    # one warm-up pass each, then rounds of one pass each, the order alternating
    passes = {name: training_pass(models[name], optimizers[name], batches, loss_of) for name in models}
    timing = interleaved(passes, device, args.repeats, warmup=1)
    samples = {name: [t / len(batches) for t in timing.samples[name]] for name in models}  # seconds per step
    tokens = c["batch"] * c["context"]
    rows = {
        name: {
            "median_ms": median(s) * 1e3,
            "min_ms": min(s) * 1e3,
            "tokens_per_s": tokens / median(s),
            "samples_ms": [x * 1e3 for x in s],
        }
        for name, s in samples.items()
    }
    ratio = rows["torch"]["median_ms"] / rows["ours"]["median_ms"]
    ratio_best = rows["torch"]["min_ms"] / rows["ours"]["min_ms"]
    result = {
        "benchmark": "gpt_training_speed",
        "config": args.config,
        **c,
        "device": device.type,
        "machine": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in ours.parameters()),
        "rows": rows,
        "ratio_ours_over_torch_median": ratio,
        "ratio_ours_over_torch_best": ratio_best,
    }
    print(
        f"\n{args.config}: {result['parameters']:,} parameters, {tokens} tokens per step, {device.type}, "
        f"{result['threads']} threads, torch {torch.__version__}\n"
    )
    print("| implementation | median ms/step | best ms/step | tokens/s (median) |")
    print("|---|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['median_ms']:.1f} | {row['min_ms']:.1f} | {row['tokens_per_s']:,.0f} |")
    print(f"\nthroughput ratio ours / torch: {ratio:.3f} (medians), {ratio_best:.3f} (best rounds)")
    output = args.output or RESULTS / f"gpt_training_speed_{args.config}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {output}")


if __name__ == "__main__":
    main()
