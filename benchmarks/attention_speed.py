"""Time the attention function, forward + backward: the book's ``scaled_dot_product_attention``
against PyTorch's ``F.scaled_dot_product_attention``, with a boolean padding mask.

Two contenders, same query, key and value tensors (batch 32, 8 heads, length 128, 32 features per
head: the shapes inside ``mha_speed.py``'s module), float32, and the same padding mask:

* ``ours``  -- ``transformer_book.attention.scaled_dot_product_attention(q, k, v, mask)``: the
  equation written out (scores, the masked softmax of chapter 1, weights times values), the
  weights returned; the book's mask convention, ``True`` = key excluded;
* ``torch`` -- ``F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)``: PyTorch's fused
  function, whose boolean ``attn_mask`` means the opposite, ``True`` = key attended to.

Every sequence has a random number of real keys (between half the length and all of it), so no
query's keys are all masked (there the two functions differ on purpose: the book returns zeros,
PyTorch NaN). Correctness first: both outputs and the gradients of the query, key and value agree.
One call = forward and the gradients with respect to q, k and v (``torch.autograd.grad`` with a
fixed upstream gradient). Timing as in every benchmark here (``benchmarks/timing.py``): a warm-up,
then ``--repeats`` interleaved rounds, order rotating, each measurement a block of calls lasting at
least ``--min-block-s``; median and best round per call, in ms, and their ratio ours / torch.

Usage::

    python benchmarks/attention_speed.py [--device cpu|cuda] [--repeats N] [--threads T] [--output PATH]

Writes JSON (default ``benchmarks/results/attention_speed.json``). Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import add_round_arguments, check_round_arguments, interleaved

from transformer_book.attention import scaled_dot_product_attention
from transformer_book.runtime import machine_description

BATCH, HEADS, LENGTH, D_HEAD = 32, 8, 128, 32
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "attention_speed.json"
OURS, TORCH = "ours: attention.scaled_dot_product_attention", "torch: F.scaled_dot_product_attention"


def inputs(device: torch.device, seed: int = 0, length: int = LENGTH):
    """``q, k, v`` (requiring gradients), the upstream gradient and the book's padding mask
    ``(B, 1, 1, n)``, ``True`` = excluded, at least half of every sequence real."""
    g = torch.Generator().manual_seed(seed)
    q, k, v, upstream = (torch.randn(BATCH, HEADS, length, D_HEAD, generator=g).to(device) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    lengths = torch.randint(length // 2, length + 1, (BATCH,), generator=g)
    mask = (torch.arange(length) >= lengths[:, None])[:, None, None, :].to(device)
    return q, k, v, upstream, mask


def run(
    device_name: str = "cpu",
    repeats: int = 15,
    warmup: int = 3,
    min_block_s: float = 0.2,
    threads: int | None = None,
    length: int = LENGTH,
) -> dict:
    device = torch.device(device_name)
    if threads is not None:
        torch.set_num_threads(threads)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    q, k, v, upstream, mask = inputs(device, length=length)
    attend = ~mask  # PyTorch's boolean attn_mask: True = attend

    def ours() -> tuple[torch.Tensor, ...]:
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return (out, *torch.autograd.grad(out, (q, k, v), grad_outputs=upstream))

    def theirs() -> tuple[torch.Tensor, ...]:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
        return (out, *torch.autograd.grad(out, (q, k, v), grad_outputs=upstream))

    # the two compute the same thing: outputs and gradients (a benchmark of different functions means nothing)
    for name, a, b in zip(("output", "dq", "dk", "dv"), ours(), theirs()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name} differs: {m}")
    contenders = {OURS: ours, TORCH: theirs}
    timing = interleaved(contenders, device, repeats, warmup=warmup, min_block_s=min_block_s)
    rows = [
        {
            "implementation": name,
            "median_ms": timing.median(name) * 1e3,
            "min_ms": timing.best(name) * 1e3,
            "max_ms": timing.worst(name) * 1e3,
            "samples_ms": [t * 1e3 for t in timing.samples[name]],
        }
        for name in contenders
    ]
    return {
        "benchmark": "attention_speed: scaled dot-product attention with a padding mask, forward + backward",
        "machine": machine_description(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "shape": {
            "batch": BATCH,
            "heads": HEADS,
            "length": length,
            "d_head": D_HEAD,
            "dtype": "float32",
            "real_key_share": float((~mask).float().mean()),
        },
        "repeats": repeats,
        "calls_per_measurement": timing.calls_per_block,
        "rows": rows,
        "ratio_ours_over_torch_median": timing.median(OURS) / timing.median(TORCH),
        "ratio_ours_over_torch_best": timing.best(OURS) / timing.best(TORCH),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    add_round_arguments(parser, repeats=15, warmup=3, min_block_s=0.2)
    parser.add_argument("--length", type=int, default=LENGTH, help=f"sequence length (default {LENGTH})")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the JSON")
    args = parser.parse_args(argv)
    check_round_arguments(parser, args.repeats, args.threads)
    if args.length < 2:
        parser.error("--length must be at least 2")
    result = run(args.device, args.repeats, args.warmup, args.min_block_s, args.threads, args.length)
    s = result["shape"]
    print(
        f"scaled dot-product attention, forward + backward, {s['dtype']}, batch {s['batch']}, {s['heads']} heads, "
        f"length {s['length']}, {s['d_head']} per head, {s['real_key_share']:.0%} of keys real; {result['machine']}, "
        f"torch {result['torch']}, {result['threads']} threads; median of {result['repeats']} rounds of "
        f"{result['calls_per_measurement']} call(s)\n"
    )
    print("| implementation | median ms | min ms | max ms |\n|---|---:|---:|---:|")
    for row in result["rows"]:
        print(f"| {row['implementation']} | {row['median_ms']:.2f} | {row['min_ms']:.2f} | {row['max_ms']:.2f} |")
    print(
        f"\nratio ours / torch: {result['ratio_ours_over_torch_median']:.3f} (medians), "
        f"{result['ratio_ours_over_torch_best']:.3f} (best rounds)"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
