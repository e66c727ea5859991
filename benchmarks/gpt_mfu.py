"""Model FLOPs utilisation (MFU) of the package's GPT training on a GPU, through ``training.fit``.

The configuration is GPT-2 small's size (12 layers, 12 heads, width 768, context 1024, the
vocabulary of 50,257 padded to 50,304 so that the output layer's product tiles evenly; 124M
parameters), trained in bf16 autocast with the fused causal attention, fused AdamW and
``torch.compile`` (``--compile off`` for the eager comparison), on random tokens: the speed of a
step does not depend on the data. MFU is ``fit``'s own report, tokens per second times
:func:`transformer_book.flops.gpt_flops_per_token` over the datasheet's dense bf16 peak
(:data:`transformer_book.flops.PEAK_BF16_FLOPS`); the median over the logging windows after the
first (which holds the compilation). The aim (issue 11): at least 50% on an H100-class GPU.

For context the script also measures what this GPU's bf16 matrix product reaches on a large
square product (8192^3), the practical ceiling, and checks that the model's attention can run on
PyTorch's flash-attention kernel (a forward pass with only that kernel allowed).

Usage::

    python benchmarks/gpt_mfu.py [--batch 16] [--steps 60] [--compile on off] [--config gpt2|shakespeare]

Writes JSON (default ``benchmarks/results/gpt_mfu_<device>.json``). Needs CUDA; not run by CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from timing import event_median  # noqa: E402 - the sibling module benchmarks/timing.py
from transformer_book import data, flops, training
from transformer_book.models import GPT, GPTConfig
from transformer_book.runtime import machine_description

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = {
    "gpt2": dict(vocab_size=50_304, context=1024, d_model=768, n_heads=12, n_layers=12),
    "shakespeare": dict(vocab_size=65, context=256, d_model=384, n_heads=6, n_layers=6),
    "smoke": dict(vocab_size=128, context=64, d_model=64, n_heads=2, n_layers=2),
}


def matmul_tflops(device: torch.device, size: int = 8192, repeats: int = 20) -> float:
    """bf16 throughput of one large square product, timed with CUDA events after warm-up."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=g)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=g)
    return 2 * size**3 / event_median(lambda: a @ b, device, repeats) / 1e12


def product_ceiling(config: GPTConfig, batch: int, device: torch.device) -> dict:
    """What the model's own products reach on this GPU, each timed alone in bf16 with CUDA events:
    every weight product at the step's token count (forward shape; the backward's two products per
    weight have the same size) and the causal flash attention forward + backward. The ideal step
    time is the sum of each product's FLOPs over its own rate; the MFU that step would give is the
    ceiling for a trainer that did nothing but these products, back to back."""
    import torch.nn.functional as F

    tokens, d = batch * config.context, config.d_model
    shapes = {"w_q, w_k, w_v, w_o (each)": (d, d, 4), "linear1": (d, config.ff_width, 1),
              "linear2": (config.ff_width, d, 1), "output": (d, config.vocab_size, 1 / config.n_layers)}
    g = torch.Generator(device=device).manual_seed(0)
    x_cache: dict[int, torch.Tensor] = {}
    report, ideal_s, total_flops = {}, 0.0, 0.0
    for name, (k, n, per_layer) in shapes.items():
        x = x_cache.setdefault(k, torch.randn(tokens, k, device=device, dtype=torch.bfloat16, generator=g))
        w = torch.randn(k, n, device=device, dtype=torch.bfloat16, generator=g)
        seconds = event_median(lambda x=x, w=w: x @ w, device)
        flops_one = 2 * tokens * k * n
        report[name] = flops_one / seconds / 1e12
        calls = 3 * per_layer * config.n_layers  # forward and two backward products, every layer
        ideal_s += calls * seconds
        total_flops += calls * flops_one
    h, d_k = config.n_heads, d // config.n_heads
    q, k_, v = (torch.randn(batch, h, config.context, d_k, device=device, dtype=torch.bfloat16, generator=g,
                            requires_grad=True) for _ in range(3))

    def attention() -> None:
        F.scaled_dot_product_attention(q, k_, v, is_causal=True).sum().backward()

    seconds = event_median(attention, device)
    flops_attention = 12 * batch * config.context**2 * d        # the convention of flops.gpt_flops_per_token
    report["attention fwd+bwd (counted as full n x n)"] = flops_attention / seconds / 1e12
    ideal_s += config.n_layers * seconds
    total_flops += config.n_layers * flops_attention
    return {"tflops_by_product": report, "ideal_step_ms": 1e3 * ideal_s,
            "ceiling_tflops": total_flops / ideal_s / 1e12}


def flash_attention_ok(model: GPT, tokens: torch.Tensor) -> bool:
    """Whether a forward pass runs with PyTorch's flash-attention kernel as the only one allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            model(tokens)
        return True
    except RuntimeError:
        return False


def one_run(args: argparse.Namespace, compile_mode: str, device: torch.device) -> dict:
    torch.manual_seed(0)
    config = GPTConfig(dropout=0.0, **CONFIGS[args.config])
    model = GPT(config).to(device)
    ids = torch.randint(0, config.vocab_size, (2_000_000,), generator=torch.Generator().manual_seed(0))
    windows = data.RandomWindows(ids, config.context, args.batch, seed=0)
    flash = flash_attention_ok(model, windows(0)[0][:2].to(device)) if device.type == "cuda" else False
    train_config = training.TrainConfig(
        steps=args.steps, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, warmup_steps=10, schedule="cosine",
        smoothing=0.0, clip_norm=1.0, eval_every=10 * args.steps, log_every=args.log_every,
        compile={"on": True, "off": False}[compile_mode],
        compile_mode=args.compile_mode, flops_per_token=flops.gpt_flops_per_token(config))
    start = time.perf_counter()
    history = training.fit(model, windows, training.language_model_loss(), train_config, device=device,
                           progress=not args.quiet)
    wall = time.perf_counter() - start
    rates = [r for _, r in history.tokens_per_s[1:]]
    utilisation = [u for _, u in history.mfu[1:]]
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    return {"config": args.config, "compile": compile_mode, "compile_mode": args.compile_mode, "batch": args.batch, "steps": args.steps,
            "parameters": sum(p.numel() for p in model.parameters()),
            "flops_per_token": flops.gpt_flops_per_token(config), "flash_attention": flash,
            "tokens_per_s": statistics.median(rates), "ms_per_step": 1e3 * args.batch * config.context
            / statistics.median(rates), "mfu": statistics.median(utilisation) if utilisation else None,
            "mfu_windows": utilisation, "wall_s": wall, "max_memory_gib": memory,
            "final_train_loss": history.train_loss[-1][1]}


def markdown(result: dict) -> str:
    """The runs (and, when measured, the product ceiling) of ``result`` as Markdown tables."""
    peak, measured = result["datasheet_peak_tflops"], result["matmul_tflops_measured"]
    lines = [f"Measured on {result['machine']}, torch {result['torch']}; {result['finished']}. Datasheet dense bf16 "
             f"peak {peak} TFLOP/s; an 8192^3 bf16 product measured {measured:.0f} TFLOP/s." if measured else
             f"Measured on {result['machine']}, torch {result['torch']}; {result['finished']}.", "",
             "| config | compile | batch (x 1024 tokens) | flash attention | ms/step | tokens/s | MFU (datasheet peak) "
             "| of the 8192^3 product's rate |", "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in result["runs"]:
        mode = "off" if r["compile"] == "off" else r.get("compile_mode", "default")
        achieved = r["tokens_per_s"] * r["flops_per_token"] / 1e12
        of_product = f"{achieved / measured:.1%}" if measured else "-"
        datasheet = f"{r['mfu']:.1%}" if r["mfu"] is not None else "-"  # no datasheet peak for a CPU
        lines.append(f"| {r['config']} | {mode} | {r['batch']} | {'yes' if r['flash_attention'] else 'no'} | "
                     f"{r['ms_per_step']:.1f} | {r['tokens_per_s']:,.0f} | {datasheet} | {of_product} |")
    ceiling = result.get("product_ceiling")
    if ceiling and peak:
        lines += ["", "The ceiling: the model's own products timed one by one (bf16, CUDA events), their ideal "
                  "step the sum of each product's FLOPs over its rate.", "",
                  "| batch | Q, K, V, O (each 768 x 768) | FFN in | FFN out | output (768 x 50,304) | causal attention "
                  "| ideal ms/step | ceiling MFU |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, c in ceiling.items():
            if not name.startswith("batch"):
                continue
            t = list(c["tflops_by_product"].values())
            lines.append(f"| {name[6:]} | " + " | ".join(f"{x:.0f}" for x in t) +
                         f" | {c['ideal_step_ms']:.1f} | {c['ceiling_tflops'] / peak:.1%} |")
        lines += ["", "Rates in TFLOP/s; attention counted with its full n x n scores, as the MFU formula counts it."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--compile", nargs="+", choices=("on", "off"), default=["on"])
    parser.add_argument("--compile-mode", default="default", choices=training.COMPILE_MODES)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--ceiling", action="store_true",
                        help="instead of training: time the model's products one by one (the MFU ceiling)")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="only rewrite the Markdown tables beside a stored result")
    args = parser.parse_args(argv)
    if args.render is not None:
        args.render.with_suffix(".md").write_text(markdown(json.loads(args.render.read_text())))
        return 0
    device = torch.device(args.device)
    peak = flops.peak_flops(device)
    measured = matmul_tflops(device) if device.type == "cuda" else None
    if args.ceiling:
        ceiling = product_ceiling(GPTConfig(dropout=0.0, **CONFIGS[args.config]), args.batch, device)
        print(json.dumps(ceiling, indent=1))
        result = {"benchmark": "gpt_mfu_ceiling", "machine": machine_description(device), "torch": torch.__version__,
                  "config": args.config, "batch": args.batch, "datasheet_peak_tflops": peak / 1e12 if peak else None,
                  "matmul_tflops_measured": measured, **ceiling}
        output = args.output or RESULTS / f"gpt_mfu_ceiling_{device.type}.json"
        output.write_text(json.dumps(result, indent=2) + "\n")
        return 0
    runs = [one_run(args, mode, device) for mode in args.compile]
    result = {"benchmark": "gpt_mfu", "device": device.type, "machine": machine_description(device),
              "torch": torch.__version__, "datasheet_peak_tflops": peak / 1e12 if peak else None,
              "matmul_tflops_measured": measured, "runs": runs,
              "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print("\n" + markdown(result))
    output = args.output or RESULTS / f"gpt_mfu_{device.type}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    output.with_suffix(".md").write_text(markdown(result))
    print(f"\nwritten to {output} and {output.with_suffix('.md').name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
