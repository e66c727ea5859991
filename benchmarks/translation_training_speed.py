"""Time one training step of the chapter 7 translator: the book's ``Transformer`` against ``nn.Transformer``.

Two contenders compute the same function (same weights at the start, same batches, same loss,
same optimizer settings), each with its own AdamW:

* ``ours``  -- ``transformer_book.models.Transformer`` with ``final_norm=True`` (so that both
  stacks end in a LayerNorm, as ``nn.Transformer``'s do), post-LN, dropout 0.1, train mode;
* ``torch`` -- ``nn.Transformer(batch_first=True)`` holding the same encoder and decoder weights
  (``transformer_book.twins.torch_transformer``), inside a small wrapper with the same
  embedding (scaled by ``sqrt(d_model)``, shared by source and target), the same sinusoidal
  positional encoding (the package's ``SinusoidalPositionalEncoding``, dropout included) and the
  same tied output projection; masks in PyTorch's convention (``src_key_padding_mask``,
  ``tgt_key_padding_mask``, ``memory_key_padding_mask`` and a causal ``tgt_mask`` with
  ``tgt_is_causal=True``, booleans, True = excluded).

One training step = forward, label-smoothed cross-entropy (0.1) over the non-PAD targets
(``F.cross_entropy(..., ignore_index=PAD, label_smoothing=0.1)``, which the correctness check
confirms equals the book's ``label_smoothed_cross_entropy``), backward, ``AdamW.step()``.

Data: ``--batches`` fixed batches of ``--batch-size`` sentence pairs whose lengths (EOS
included) are drawn from a seeded log-normal resembling Multi30k after subword tokenisation
(source mean about 14 tokens, clipped to 5..40; the target's length is the source's times a
noisy ratio near 1), token ids uniform over the vocabulary, each batch padded to its own longest
sentence. Throughput counts only the non-PAD target tokens.

Method (as ``mha_speed.py``): correctness first -- in eval mode (no dropout), float32, the two
models' logits on the same padded batch agree, and so do the gradients of a few parameters for
one loss evaluation; then a warm-up, then ``--repeats`` interleaved rounds, the order rotating
each round. One measurement = enough passes over the batches to last ``--min-block-s``; the
table reports per step the median and minimum over rounds, target tokens per second, and the
throughput ratio ours / torch (> 1: the book's model trains faster). On CUDA every measurement
is bracketed by ``torch.cuda.synchronize()``.

Usage::

    python benchmarks/translation_training_speed.py --smoke                  # seconds: tiny sizes, 1 round
    python benchmarks/translation_training_speed.py --threads 2 --repeats 7  # the chapter 7 sizes on CPU
    python benchmarks/translation_training_speed.py --device cuda --amp      # bf16 autocast on a GPU

Prints a Markdown table and writes the same numbers as JSON (default
``benchmarks/results/translation_training_speed.json``). Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import add_round_arguments, check_round_arguments, interleaved
from torch import nn

from transformer_book.models import Transformer, TransformerConfig, shift_right
from transformer_book.objectives import label_smoothed_cross_entropy
from transformer_book.positional import SinusoidalPositionalEncoding
from transformer_book.runtime import machine_description
from transformer_book.twins import torch_transformer

PAD, SOS, EOS, N_SPECIAL = 0, 1, 2, 4  # ids 0..3: PAD, SOS, EOS, UNK
SMOOTHING = 0.1
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "translation_training_speed.json"
SMOKE_OUTPUT = Path(tempfile.gettempdir()) / "translation_training_speed_smoke.json"

# The chapter 7 translator (joint subword vocabulary, shared embeddings) and a Multi30k-like batch.
FULL = dict(
    vocab=8000, d_model=256, n_heads=4, d_ff=1024, layers=3, max_len=128, dropout=0.1, batch_size=128, batches=2
)
# --smoke: tiny sizes that run in a few seconds (for a CI smoke test of this script).
SMOKE = dict(vocab=300, d_model=32, n_heads=4, d_ff=64, layers=2, max_len=64, dropout=0.1, batch_size=8, batches=2)
LENGTH_MEDIAN, LENGTH_SIGMA, MIN_LENGTH, MAX_LENGTH = 13.5, 0.35, 5, 40  # source lengths incl. EOS


def _load_average() -> float | None:
    """The 1-minute load average (other work on the machine disturbs the timings), if known."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class TorchTranslator(nn.Module):
    """``nn.Transformer`` between the book's embedding, positional encoding and tied output.

    Built from a :class:`Transformer` with shared, tied embeddings and ``final_norm=True``;
    every weight is copied, so at construction both compute the same function.
    ``forward(src (B, m), tgt_in (B, n))`` -> logits ``(B, n, V)``.
    """

    def __init__(self, ours: Transformer) -> None:
        super().__init__()
        c = ours.config
        if not (c.share_embeddings and c.tie_output and c.scale_embeddings and c.position == "sinusoidal"):
            raise ValueError("TorchTranslator: needs shared, tied, scaled embeddings and sinusoidal positions")
        self.pad_id, self.scale = c.pad_id, math.sqrt(c.d_model)
        self.embedding = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.src_positional = SinusoidalPositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.tgt_positional = SinusoidalPositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.transformer = torch_transformer(ours.encoder, ours.decoder)
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.output.weight = self.embedding.weight
        with torch.no_grad():
            self.embedding.weight.copy_(ours.src_embedding.weight)
        parameter = next(ours.parameters())
        self.to(device=parameter.device, dtype=parameter.dtype).train(ours.training)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        n = tgt_in.shape[1]
        src_padding = src == self.pad_id  # (B, m), True = excluded, as in nn.Transformer
        tgt_padding = tgt_in == self.pad_id  # (B, n)
        causal = torch.ones(n, n, dtype=torch.bool, device=tgt_in.device).triu(diagonal=1)  # (n, n)
        x = self.src_positional(self.embedding(src) * self.scale)
        y = self.tgt_positional(self.embedding(tgt_in) * self.scale)
        h = self.transformer(
            x,
            y,
            tgt_mask=causal,
            src_key_padding_mask=src_padding,
            tgt_key_padding_mask=tgt_padding,
            memory_key_padding_mask=src_padding,
            tgt_is_causal=True,
        )
        return self.output(h)


def make_batches(n_batches: int, batch_size: int, vocab: int, max_len: int, seed: int, device: torch.device):
    """``n_batches`` of ``(src, tgt_in, tgt_out)``, each ``(B, longest in the batch)``, padded with PAD.

    Lengths count EOS: source ~ round(LogNormal(log 13.5, 0.35)) clipped to 5..40 (and to
    ``max_len``), target = source times LogNormal(0, 0.15), clipped likewise.
    """
    generator = torch.Generator().manual_seed(seed)
    top = min(MAX_LENGTH, max_len)
    batches = []
    for _ in range(n_batches):
        normal = torch.randn(2, batch_size, generator=generator, dtype=torch.float64)
        src_len = (LENGTH_MEDIAN * torch.exp(LENGTH_SIGMA * normal[0])).round().clamp(MIN_LENGTH, top).long()
        tgt_len = (src_len * torch.exp(0.15 * normal[1])).round().clamp(MIN_LENGTH, top).long()

        def pad(lengths: torch.Tensor) -> torch.Tensor:
            tokens = torch.randint(N_SPECIAL, vocab, (batch_size, int(lengths.max())), generator=generator)
            positions = torch.arange(tokens.shape[1])
            tokens[positions == (lengths - 1)[:, None]] = EOS
            tokens[positions >= lengths[:, None]] = PAD
            return tokens

        src, tgt_out = pad(src_len), pad(tgt_len)
        batches.append(tuple(t.to(device) for t in (src, shift_right(tgt_out, SOS), tgt_out)))
    return batches


def _loss(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=PAD, label_smoothing=SMOOTHING
    )


def check_same_function(ours: Transformer, theirs: TorchTranslator, batch) -> dict:
    """Eval mode, float32: logits and a few gradients agree; raise AssertionError if not.

    Returns the tolerances used and the largest differences seen.
    """
    src, tgt_in, tgt_out = batch
    was_training = ours.training
    ours.eval()
    theirs.eval()
    tol_logits = dict(rtol=1e-4, atol=1e-4)
    tol_grads = dict(rtol=1e-3, atol=1e-5)
    try:
        with torch.no_grad():
            reference = theirs(src, tgt_in)
            mine = ours(src, tgt_in)
        torch.testing.assert_close(mine, reference, **tol_logits, msg=lambda m: f"logits differ: {m}")
        # the loss used for timing is the book's label-smoothed loss
        torch.testing.assert_close(
            _loss(mine, tgt_out),
            label_smoothed_cross_entropy(mine, tgt_out, pad_id=PAD, smoothing=SMOOTHING),
            rtol=1e-5,
            atol=1e-6,
        )
        d = ours.config.d_model
        pairs = {  # ours -> (theirs, slice of theirs)
            "shared embedding / output": (ours.src_embedding.weight, theirs.embedding.weight, slice(None)),
            "encoder.layers[0].self_attn.w_q": (
                ours.encoder.layers[0].self_attn.w_q.weight,
                theirs.transformer.encoder.layers[0].self_attn.in_proj_weight,
                slice(0, d),
            ),
            "decoder.layers[-1].cross_attn.w_k": (
                ours.decoder.layers[-1].cross_attn.w_k.weight,
                theirs.transformer.decoder.layers[-1].multihead_attn.in_proj_weight,
                slice(d, 2 * d),
            ),
            "decoder.layers[0].ffn.linear1": (
                ours.decoder.layers[0].ffn.linear1.weight,
                theirs.transformer.decoder.layers[0].linear1.weight,
                slice(None),
            ),
            "encoder.norm.gamma": (ours.encoder.norm.gamma, theirs.transformer.encoder.norm.weight, slice(None)),
            "decoder.norm.beta": (ours.decoder.norm.beta, theirs.transformer.decoder.norm.bias, slice(None)),
        }
        for model in (ours, theirs):
            model.zero_grad(set_to_none=True)
            _loss(model(src, tgt_in), tgt_out).backward()
        grad_diffs = {}
        for name, (mine_p, their_p, part) in pairs.items():
            torch.testing.assert_close(
                mine_p.grad,
                their_p.grad[part],
                **tol_grads,
                msg=lambda m, name=name: f"gradient of {name} differs: {m}",
            )
            grad_diffs[name] = (mine_p.grad - their_p.grad[part]).abs().max().item()
        n_ours = sum(p.numel() for p in ours.parameters())
        n_theirs = sum(p.numel() for p in theirs.parameters())
        assert n_ours == n_theirs, f"parameter counts differ: ours {n_ours}, torch {n_theirs}"
    finally:
        for model in (ours, theirs):
            model.zero_grad(set_to_none=True)
            model.train(was_training)
    return {
        "logits": {**tol_logits, "max_abs_diff": (mine - reference).abs().max().item()},
        "gradients": {**tol_grads, "max_abs_diff": grad_diffs},
        "parameters": n_ours,
    }


def _step_function(model: nn.Module, optimizer: torch.optim.Optimizer, batches, autocast):
    """One pass over ``batches``: per batch forward, loss, backward, AdamW step."""

    def one_pass() -> None:
        for src, tgt_in, tgt_out in batches:
            with autocast():
                loss = _loss(model(src, tgt_in), tgt_out)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return one_pass


def run(
    device_name: str = "cpu",
    repeats: int = 7,
    warmup: int = 1,
    min_block_s: float = 0.5,
    threads: int | None = None,
    amp: bool = False,
    sizes: dict | None = None,
    seed: int = 0,
) -> dict:
    sizes = {**FULL, **(sizes or {})}
    device = torch.device(device_name)
    if threads is not None:
        torch.set_num_threads(threads)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    if amp and device.type != "cuda":
        raise SystemExit("--amp: bf16 autocast is measured on CUDA only")
    load_before = _load_average()
    torch.manual_seed(seed)
    config = TransformerConfig(
        sizes["vocab"],
        sizes["vocab"],
        d_model=sizes["d_model"],
        n_heads=sizes["n_heads"],
        d_ff=sizes["d_ff"],
        n_encoder_layers=sizes["layers"],
        n_decoder_layers=sizes["layers"],
        dropout=sizes["dropout"],
        max_len=sizes["max_len"],
        pad_id=PAD,
        final_norm=True,
        share_embeddings=True,
    )
    ours = Transformer(config).to(device).train()
    with torch.no_grad():  # non-zero biases and norm parameters, so that the check covers them
        for p in ours.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p), alpha=0.02)
    theirs = TorchTranslator(ours)  # same weights, same device, train mode
    batches = make_batches(sizes["batches"], sizes["batch_size"], sizes["vocab"], sizes["max_len"], seed, device)
    check = check_same_function(ours, theirs, batches[0])

    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if amp else nullcontext
    optimizer_options = dict(lr=5e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01)
    if device.type == "cuda":
        optimizer_options["fused"] = True
    contenders = {
        name: _step_function(model, torch.optim.AdamW(model.parameters(), **optimizer_options), batches, autocast)
        for name, model in (("ours", ours), ("torch", theirs))
    }
    names = list(contenders)
    # warm-up passes, then blocks of enough passes to last min_block_s, in rounds whose order rotates
    timing = interleaved(contenders, device, repeats, warmup=warmup, min_block_s=min_block_s)
    passes = timing.calls_per_block
    samples = timing.samples  # seconds per pass

    steps = len(batches)
    tokens_per_pass = sum(int((tgt_out != PAD).sum()) for _, _, tgt_out in batches)
    src_tokens = sum(int((src != PAD).sum()) for src, _, _ in batches)
    padded = sum(tgt_out.numel() for _, _, tgt_out in batches)
    rows = []
    for name in names:
        median, minimum = timing.median(name), timing.best(name)
        rows.append(
            {
                "implementation": name,
                "median_ms_per_step": median / steps * 1e3,
                "min_ms_per_step": minimum / steps * 1e3,
                "max_ms_per_step": max(samples[name]) / steps * 1e3,
                "samples_ms_per_step": [s / steps * 1e3 for s in samples[name]],
                "tokens_per_s_median": tokens_per_pass / median,
                "tokens_per_s_best": tokens_per_pass / minimum,
            }
        )
    by_name = {row["implementation"]: row for row in rows}
    return {
        "benchmark": "translation_training_speed: one training step (forward, label-smoothed loss, backward, AdamW)",
        "machine": machine_description(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "load_average_1min": {"before": load_before, "after": _load_average()},
        "precision": "bf16 autocast" if amp else "float32",
        "config": {
            "vocab": sizes["vocab"],
            "d_model": sizes["d_model"],
            "n_heads": sizes["n_heads"],
            "d_ff": sizes["d_ff"],
            "n_encoder_layers": sizes["layers"],
            "n_decoder_layers": sizes["layers"],
            "dropout": sizes["dropout"],
            "max_len": sizes["max_len"],
            "norm_first": config.norm_first,
            "final_norm": True,
            "share_embeddings": True,
            "tie_output": True,
            "parameters": check["parameters"],
            "label_smoothing": SMOOTHING,
            "optimizer": {"name": "AdamW", **optimizer_options},
        },
        "data": {
            "batch_size": sizes["batch_size"],
            "batches": steps,
            "seed": seed,
            "lengths": f"source ~ round(LogNormal(log {LENGTH_MEDIAN}, {LENGTH_SIGMA})) clipped to "
            f"{MIN_LENGTH}..{MAX_LENGTH}, target = source x LogNormal(0, 0.15), EOS included",
            "padded_lengths": [[src.shape[1], tgt_out.shape[1]] for src, _, tgt_out in batches],
            "mean_source_tokens": src_tokens / (steps * sizes["batch_size"]),
            "mean_target_tokens": tokens_per_pass / (steps * sizes["batch_size"]),
            "target_tokens_per_step": tokens_per_pass / steps,
            "target_padding_fraction": 1 - tokens_per_pass / padded,
        },
        "correctness": check,
        "repeats": repeats,
        "steps_per_measurement": passes * steps,
        "rows": rows,
        "ratio_ours_to_torch_throughput": by_name["torch"]["median_ms_per_step"]
        / by_name["ours"]["median_ms_per_step"],
        "ratio_ours_to_torch_throughput_of_best": by_name["torch"]["min_ms_per_step"]
        / by_name["ours"]["min_ms_per_step"],
    }


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def markdown(result: dict) -> str:
    c, d, load = result["config"], result["data"], result["load_average_1min"]
    lines = [
        f"Translation Transformer, one training step (forward, label-smoothed loss, backward, AdamW), "
        f"{result['precision']}: vocab {c['vocab']}, d_model {c['d_model']}, {c['n_heads']} heads, d_ff {c['d_ff']}, "
        f"{c['n_encoder_layers']}+{c['n_decoder_layers']} layers, dropout {c['dropout']}, "
        f"batch {d['batch_size']} pairs, mean {d['mean_target_tokens']:.1f} target tokens per pair "
        f"({d['target_tokens_per_step']:.0f} non-PAD target tokens per step)",
        "",
        "| machine | torch | device | threads | load average (1 min) before, after |",
        "|---|---|---|---|---|",
        f"| {result['machine']} | {result['torch']} | {result['device']} | {result['threads']} "
        f"| {_fmt(load['before'])}, {_fmt(load['after'])} |",
        "",
        f"median of {result['repeats']} interleaved measurements of {result['steps_per_measurement']} step(s) each",
        "",
        "| implementation | median ms/step | min ms/step | max ms/step | target tokens/s (median) | target tokens/s (best) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['implementation']} | {row['median_ms_per_step']:.1f} | {row['min_ms_per_step']:.1f} "
            f"| {row['max_ms_per_step']:.1f} | {row['tokens_per_s_median']:.0f} | {row['tokens_per_s_best']:.0f} |"
        )
    lines += [
        "",
        f"throughput ratio ours / torch: {result['ratio_ours_to_torch_throughput']:.3f} (medians), "
        f"{result['ratio_ours_to_torch_throughput_of_best']:.3f} (best); > 1 means the book's model trains faster",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    add_round_arguments(
        parser, repeats=7, warmup=1, min_block_s=0.5, warmup_help="untimed passes over the batches per contender first"
    )
    parser.add_argument("--amp", action="store_true", help="bf16 autocast (CUDA only)")
    parser.add_argument("--vocab", type=int, default=None, help=f"joint vocabulary (default {FULL['vocab']})")
    parser.add_argument("--d-model", type=int, default=None, help=f"default {FULL['d_model']}")
    parser.add_argument("--n-heads", type=int, default=None, help=f"default {FULL['n_heads']}")
    parser.add_argument("--d-ff", type=int, default=None, help=f"default {FULL['d_ff']}")
    parser.add_argument(
        "--layers", type=int, default=None, help=f"encoder and decoder layers each (default {FULL['layers']})"
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help=f"sentence pairs per step (default {FULL['batch_size']})"
    )
    parser.add_argument(
        "--batches",
        type=int,
        default=None,
        help=f"distinct batches, one step each, per pass (default {FULL['batches']})",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and 1 round: a few seconds, for CI")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"where to write the JSON (default {DEFAULT_OUTPUT.relative_to(DEFAULT_OUTPUT.parents[2])}; "
        "with --smoke, a file in the temporary directory, so the recorded results stay)",
    )
    args = parser.parse_args(argv)
    sizes = dict(SMOKE) if args.smoke else {}
    for key in ("vocab", "d_model", "n_heads", "d_ff", "layers", "batch_size", "batches"):
        value = getattr(args, key)
        if value is not None:
            if value < 1:
                parser.error(f"--{key.replace('_', '-')} must be at least 1")
            sizes[key] = value
    if args.vocab is not None and args.vocab <= N_SPECIAL:
        parser.error(f"--vocab must exceed the {N_SPECIAL} special ids")
    repeats, warmup, min_block_s = (1, 1, 0.0) if args.smoke else (args.repeats, args.warmup, args.min_block_s)
    check_round_arguments(parser, repeats, args.threads)
    if args.amp and args.device != "cuda":
        parser.error("--amp is for --device cuda only")
    result = run(args.device, repeats, warmup, min_block_s, args.threads, args.amp, sizes)
    result["smoke"] = args.smoke
    table = markdown(result)
    print(table)
    if args.output is None:
        args.output = SMOKE_OUTPUT if args.smoke else DEFAULT_OUTPUT
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({**result, "markdown": table}, indent=2) + "\n")
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
