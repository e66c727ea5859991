"""Time multi-head attention, forward + backward: the book's module against ``nn.MultiheadAttention``.

Three contenders, same weights (``transformer_book.twins.torch_multihead_attention``), same
input, self-attention without a mask, float32, batch 32, length 128, d_model 256, 8 heads:

* ``ours, fused``    -- ``MultiHeadAttention(..., need_weights=False)``: PyTorch's fused
  ``F.scaled_dot_product_attention`` inside the book's projections and head reshapes;
* ``torch``          -- ``nn.MultiheadAttention(..., need_weights=False)``, the baseline;
* ``ours, explicit`` -- ``MultiHeadAttention(..., need_weights=True)``: the book's own
  ``scaled_dot_product_attention`` (scores, masked softmax, weights @ V), weights returned.

One measurement = ``inner`` calls of forward and backward (gradients w.r.t. the input and
every parameter, through ``torch.autograd.grad`` with a fixed upstream gradient). The
contenders are measured in rounds, interleaved, the order rotating each round, after a
warm-up; the reported time is the median over rounds (per call, in ms), with the minimum
beside it (on a busy machine the minimum is the steadier estimate of the undisturbed cost). On CUDA every
measurement is bracketed by ``torch.cuda.synchronize()``.

Usage::

    python benchmarks/mha_speed.py [--device cpu|cuda] [--repeats N] [--threads T] [--output PATH]

Prints a Markdown table and writes the same numbers as JSON (default
``benchmarks/results/mha_speed.json``). Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch
from timing import add_round_arguments, check_round_arguments, interleaved

from transformer_book.attention import MultiHeadAttention
from transformer_book.runtime import machine_description
from transformer_book.twins import torch_multihead_attention

BATCH, LENGTH, D_MODEL, N_HEADS = 32, 128, 256, 8
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "mha_speed.json"


def _step_function(module: torch.nn.Module, x: torch.Tensor, upstream: torch.Tensor, need_weights: bool):
    """One forward and backward pass (both modules take ``(query, key, value, need_weights=)``)."""
    inputs = [x, *module.parameters()]

    def step() -> None:
        out, _ = module(x, x, x, need_weights=need_weights)
        torch.autograd.grad(out, inputs, grad_outputs=upstream)

    return step


def run(
    device_name: str = "cpu",
    repeats: int = 15,
    warmup: int = 3,
    min_block_s: float = 0.2,
    threads: int | None = None,
    seed: int = 0,
) -> dict:
    device = torch.device(device_name)
    if threads is not None:
        torch.set_num_threads(threads)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    torch.manual_seed(seed)
    ours = MultiHeadAttention(D_MODEL, N_HEADS).to(device).train()
    with torch.no_grad():  # non-zero biases, so that the twin is checked on them too
        for linear in (ours.w_q, ours.w_k, ours.w_v, ours.w_o):
            linear.bias.normal_(std=0.02)
    theirs = torch_multihead_attention(ours)  # same weights, same device and dtype, train mode
    x = torch.randn(BATCH, LENGTH, D_MODEL, device=device, requires_grad=True)
    upstream = torch.randn(BATCH, LENGTH, D_MODEL, device=device)

    # the three compute the same thing (a benchmark of different functions would be meaningless)
    with torch.no_grad():
        reference = theirs(x, x, x, need_weights=False)[0]
        for need_weights in (False, True):
            torch.testing.assert_close(ours(x, x, x, need_weights=need_weights)[0], reference, rtol=1e-4, atol=1e-5)

    contenders = {
        "ours, fused (need_weights=False)": _step_function(ours, x, upstream, need_weights=False),
        "torch nn.MultiheadAttention (need_weights=False)": _step_function(theirs, x, upstream, need_weights=False),
        "ours, explicit (need_weights=True)": _step_function(ours, x, upstream, need_weights=True),
    }
    names = list(contenders)
    # warm-up, then blocks of enough calls to last min_block_s, in rounds whose order rotates
    timing = interleaved(contenders, device, repeats, warmup=warmup, min_block_s=min_block_s)
    inner = timing.calls_per_block
    samples = {name: [t * 1e3 for t in timing.samples[name]] for name in names}  # ms per call
    medians = {name: timing.median(name) * 1e3 for name in names}
    minima = {name: timing.best(name) * 1e3 for name in names}
    baseline = "torch nn.MultiheadAttention (need_weights=False)"
    return {
        "benchmark": "mha_speed: multi-head self-attention, forward + backward",
        "machine": machine_description(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "shape": {"batch": BATCH, "length": LENGTH, "d_model": D_MODEL, "n_heads": N_HEADS, "dtype": "float32"},
        "repeats": repeats,
        "calls_per_measurement": inner,
        "rows": [
            {
                "implementation": name,
                "median_ms": medians[name],
                "min_ms": minima[name],
                "max_ms": max(samples[name]),
                "samples_ms": samples[name],
                "ratio_to_torch": medians[name] / medians[baseline],
                "ratio_to_torch_of_minima": minima[name] / minima[baseline],
            }
            for name in names
        ],
    }


def markdown(result: dict) -> str:
    shape = result["shape"]
    lines = [
        f"Multi-head self-attention, forward + backward, {shape['dtype']}, batch {shape['batch']}, "
        f"length {shape['length']}, d_model {shape['d_model']}, {shape['n_heads']} heads",
        "",
        "| machine | torch | device | threads |",
        "|---|---|---|---|",
        f"| {result['machine']} | {result['torch']} | {result['device']} | {result['threads']} |",
        "",
        f"median of {result['repeats']} interleaved measurements of {result['calls_per_measurement']} call(s) each",
        "",
        "| implementation | median ms | min ms | max ms | ratio to torch (medians) | ratio to torch (minima) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['implementation']} | {row['median_ms']:.2f} | {row['min_ms']:.2f} | {row['max_ms']:.2f} "
            f"| {row['ratio_to_torch']:.3f} | {row['ratio_to_torch_of_minima']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    add_round_arguments(parser, repeats=15, warmup=3, min_block_s=0.2)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the JSON")
    args = parser.parse_args(argv)
    check_round_arguments(parser, args.repeats, args.threads)
    result = run(args.device, args.repeats, args.warmup, args.min_block_s, args.threads)
    table = markdown(result)
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({**result, "markdown": table}, indent=2) + "\n")
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
