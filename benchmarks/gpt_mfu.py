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
square product (8192^3), the practical ceiling, and checks which fused attention kernel the
model's attention runs on (a forward pass with only that kernel allowed). ``--ceiling`` also
times the model's own products one by one: the MFU a trainer doing nothing else would reach.

Every combination of the listed batches, attention-kernel preferences (``default`` = PyTorch's
choice, FlashAttention; ``cudnn`` = NVIDIA's cuDNN attention first), Q/K/V stacking
(:attr:`transformer_book.attention.MultiHeadAttention.pack_projections`) and compile settings is
one run, each compiled afresh.

Usage::

    python benchmarks/gpt_mfu.py [--batch 16 32] [--steps 60] [--compile on off]
        [--compile-mode reduce-overhead] [--attention-kernel default cudnn] [--stack-qkv on off]
        [--ceiling | --ceiling-only] [--config gpt2|shakespeare]

Writes JSON (default ``benchmarks/results/gpt_mfu_<device>.json``). Needs CUDA; not run by CI.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch
from timing import event_median

from transformer_book import data, flops, objectives, training
from transformer_book.attention import ATTENTION_KERNELS, MultiHeadAttention, prefer_attention_kernel
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
    weight have the same size) and the causal attention forward + backward on each fused kernel
    that runs here. The ideal step time is the sum of each product's FLOPs over its own rate; the
    MFU that step would give is the ceiling for a trainer that did nothing but these products, back
    to back. Two ceilings: the products as the model ran them before (Q, K, V, O four separate
    768 x 768 products, FlashAttention) and as it can run them now (Q, K, V stacked into one
    768 x 2304 product, the fastest attention kernel here)."""
    import torch.nn.functional as F

    tokens, d, layers = batch * config.context, config.d_model, config.n_layers
    shapes = {
        "w_q, w_k, w_v, w_o (each)": (d, d),
        "Q, K, V stacked": (d, 3 * d),
        "linear1": (d, config.ff_width),
        "linear2": (config.ff_width, d),
        "output": (d, config.vocab_size),
    }
    g = torch.Generator(device=device).manual_seed(0)
    x_cache: dict[int, torch.Tensor] = {}
    rates, seconds = {}, {}
    for name, (k, n) in shapes.items():
        x = x_cache.setdefault(k, torch.randn(tokens, k, device=device, dtype=torch.bfloat16, generator=g))
        w = torch.randn(k, n, device=device, dtype=torch.bfloat16, generator=g)
        seconds[name] = event_median(lambda x=x, w=w: x @ w, device)
        rates[name] = 2 * tokens * k * n / seconds[name] / 1e12
    h, d_k = config.n_heads, d // config.n_heads
    q, k_, v = (
        torch.randn(batch, h, config.context, d_k, device=device, dtype=torch.bfloat16, generator=g, requires_grad=True)
        for _ in range(3)
    )
    flops_attention = 12 * batch * config.context**2 * d  # the convention of flops.gpt_flops_per_token
    for kernel in ("flash", "cudnn"):

        def attention(kernel=kernel) -> None:
            with prefer_attention_kernel(kernel, only=True):
                F.scaled_dot_product_attention(q, k_, v, is_causal=True).sum().backward()

        try:
            name = f"attention fwd+bwd, {kernel} (counted as full n x n)"
            seconds[name] = event_median(attention, device)
            rates[name] = flops_attention / seconds[name] / 1e12
        except RuntimeError as err:  # this kernel does not run here
            print(f"{kernel} attention: {str(err).splitlines()[0]}")
    attention_names = [n for n in seconds if n.startswith("attention")]

    def ceiling(qkv: str, attention_name: str) -> dict:
        """The ideal step of forward + two backward products per weight, attention fwd+bwd per layer."""
        calls = {"linear1": layers, "linear2": layers, "output": 1}
        calls.update(
            {"w_q, w_k, w_v, w_o (each)": 4 * layers}
            if qkv == "separate"
            else {"w_q, w_k, w_v, w_o (each)": layers, "Q, K, V stacked": layers}
        )
        ideal_s = sum(3 * count * seconds[name] for name, count in calls.items()) + layers * seconds[attention_name]
        total = sum(3 * count * 2 * tokens * shapes[name][0] * shapes[name][1] for name, count in calls.items())
        total += layers * flops_attention
        return {"ideal_step_ms": 1e3 * ideal_s, "ceiling_tflops": total / ideal_s / 1e12}

    fastest = min(attention_names, key=seconds.get)
    return {
        "tflops_by_product": rates,
        **ceiling("separate", attention_names[0]),  # FlashAttention, as measured before
        "stacked_qkv_fastest_attention": {"attention": fastest, **ceiling("stacked", fastest)},
    }


def kernel_runs(model: GPT, tokens: torch.Tensor, kernel: str) -> bool:
    """Whether a forward pass runs with this fused attention kernel as the only one allowed."""
    try:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16), prefer_attention_kernel(kernel, only=True):
            model(tokens)
        return True
    except RuntimeError:
        return False


def one_run(
    args: argparse.Namespace, batch: int, kernel: str, pack: str, compile_mode: str, device: torch.device
) -> dict:
    """One training run through ``fit``: this batch, attention-kernel preference ("default" =
    PyTorch's choice), Q/K/V stacking ("default" = the package's: on for CUDA) and compilation."""
    torch.manual_seed(0)
    torch._dynamo.reset()  # each run compiles afresh, whatever the earlier runs traced
    # "default" leaves the choice to fit (it packs on CUDA: attention.device_kernels)
    MultiHeadAttention.pack_projections = {"default": None, "on": True, "off": False}[pack]
    config = GPTConfig(dropout=0.0, **CONFIGS[args.config])
    model = GPT(config).to(device)
    ids = torch.randint(0, config.vocab_size, (2_000_000,), generator=torch.Generator().manual_seed(0))
    windows = data.RandomWindows(ids, config.context, batch, seed=0)
    probe = windows(0)[0][:2].to(device)
    flash = kernel_runs(model, probe, "flash") if device.type == "cuda" else False
    preferred = None if kernel == "default" else kernel
    preferred_runs = preferred is not None and device.type == "cuda" and kernel_runs(model, probe, preferred)
    if preferred is not None and not preferred_runs:
        print(f"the {preferred} attention kernel does not run this model here; the next kernel in line runs")
    attention = preferred if preferred_runs else ("flash" if flash else "-")
    train_config = training.TrainConfig(
        steps=args.steps,
        lr=6e-4,
        betas=(0.9, 0.95),
        weight_decay=0.1,
        warmup_steps=10,
        schedule="cosine",
        smoothing=0.0,
        clip_norm=1.0,
        eval_every=10 * args.steps,
        log_every=args.log_every,
        compile={"on": True, "off": False}[compile_mode],
        compile_mode=args.compile_mode,
        flops_per_token=flops.gpt_flops_per_token(config),
        attention_kernel=preferred,
    )
    start = time.perf_counter()
    try:
        history = training.fit(
            model, windows, objectives.language_model_loss(), train_config, device=device, progress=not args.quiet
        )
    finally:
        MultiHeadAttention.pack_projections = None
    wall = time.perf_counter() - start
    rates = [r for _, r in history.tokens_per_s[1:]]
    utilisation = [u for _, u in history.mfu[1:]]
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    packed = device.type == "cuda" if pack == "default" else pack == "on"
    return {
        "config": args.config,
        "compile": compile_mode,
        "compile_mode": args.compile_mode,
        "batch": batch,
        "steps": args.steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "flops_per_token": flops.gpt_flops_per_token(config),
        "flash_attention": flash,
        "attention_kernel": preferred,
        "attention": attention,
        "stacked_qkv": packed,
        "tokens_per_s": statistics.median(rates),
        "ms_per_step": 1e3 * batch * config.context / statistics.median(rates),
        "mfu": statistics.median(utilisation) if utilisation else None,
        "mfu_windows": utilisation,
        "wall_s": wall,
        "max_memory_gib": memory,
        "final_train_loss": history.train_loss[-1][1],
    }


CEILING_COLUMNS = (
    ("w_q, w_k, w_v, w_o (each)", "Q, K, V, O (each 768 x 768)"),
    ("Q, K, V stacked", "Q, K, V stacked (768 x 2304)"),
    ("linear1", "FFN in"),
    ("linear2", "FFN out"),
    ("output", "output (768 x 50,304)"),
    ("attention fwd+bwd, flash (counted as full n x n)", "flash attention"),
    ("attention fwd+bwd, cudnn (counted as full n x n)", "cuDNN attention"),
)
_OLD_NAMES = {"attention fwd+bwd (counted as full n x n)": "attention fwd+bwd, flash (counted as full n x n)"}


def _attention(run: dict) -> str:
    """The fused attention kernel a run used (results stored before the choice existed: flash)."""
    if "attention" in run:
        return run["attention"]
    return "flash" if run.get("flash_attention") else "-"


def markdown(result: dict) -> str:
    """The runs (and, when measured, the product ceiling) of ``result`` as Markdown tables."""
    peak, measured = result["datasheet_peak_tflops"], result["matmul_tflops_measured"]
    lines = [
        f"Measured on {result['machine']}, torch {result['torch']}; {result['finished']}. Datasheet dense bf16 "
        f"peak {peak} TFLOP/s; an 8192^3 bf16 product measured {measured:.0f} TFLOP/s."
        if measured
        else f"Measured on {result['machine']}, torch {result['torch']}; {result['finished']}.",
        "",
        "| config | compile | batch (x 1024 tokens) | attention kernel | Q, K, V | ms/step | tokens/s "
        "| MFU (datasheet peak) | of the 8192^3 product's rate |",
        "|---|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in result["runs"]:
        mode = "off" if r["compile"] == "off" else r.get("compile_mode", "default")
        achieved = r["tokens_per_s"] * r["flops_per_token"] / 1e12
        of_product = f"{achieved / measured:.1%}" if measured else "-"
        datasheet = f"{r['mfu']:.1%}" if r["mfu"] is not None else "-"  # no datasheet peak for a CPU
        qkv = "stacked" if r.get("stacked_qkv") else "separate"
        lines.append(
            f"| {r['config']} | {mode} | {r['batch']} | {_attention(r)} | {qkv} | "
            f"{r['ms_per_step']:.1f} | {r['tokens_per_s']:,.0f} | {datasheet} | {of_product} |"
        )
    ceilings = {name: c for name, c in (result.get("product_ceiling") or {}).items() if name.startswith("batch")}
    if ceilings and peak:
        lines += [
            "",
            "The ceiling: the model's own products timed one by one (bf16, CUDA events), their ideal "
            "step the sum of each product's FLOPs over its rate; as the model ran before (Q, K, V, O "
            "separate, flash attention) and with Q, K, V stacked and the fastest attention kernel.",
            "",
            "| batch | "
            + " | ".join(label for _, label in CEILING_COLUMNS)
            + " | ideal ms/step | ceiling MFU | stacked, fastest: ideal ms/step | ceiling MFU |",
            "|---:|" + "---:|" * (len(CEILING_COLUMNS) + 4),
        ]
        for name, c in ceilings.items():
            rates = {_OLD_NAMES.get(k, k): v for k, v in c["tflops_by_product"].items()}
            cells = [f"{rates[key]:.0f}" if key in rates else "-" for key, _ in CEILING_COLUMNS]
            cells += [f"{c['ideal_step_ms']:.1f}", f"{c['ceiling_tflops'] / peak:.1%}"]
            stacked = c.get("stacked_qkv_fastest_attention")
            cells += (
                [f"{stacked['ideal_step_ms']:.1f}", f"{stacked['ceiling_tflops'] / peak:.1%}"]
                if stacked
                else ["-", "-"]
            )
            lines.append(f"| {name[6:]} | " + " | ".join(cells) + " |")
        lines += ["", "Rates in TFLOP/s; attention counted with its full n x n scores, as the MFU formula counts it."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--batch", type=int, nargs="+", default=[16])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--compile", nargs="+", choices=("on", "off"), default=["on"])
    parser.add_argument("--compile-mode", default="default", choices=training.COMPILE_MODES)
    parser.add_argument(
        "--attention-kernel",
        nargs="+",
        choices=("default",) + ATTENTION_KERNELS,
        default=["default"],
        help="the fused attention kernel fit prefers (default: PyTorch's choice)",
    )
    parser.add_argument(
        "--stack-qkv",
        nargs="+",
        choices=("default", "on", "off"),
        default=["default"],
        help="Q, K, V as one stacked product (default: the package's choice, on for CUDA)",
    )
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also time the model's products one by one at each batch (the MFU ceiling)",
    )
    parser.add_argument("--ceiling-only", action="store_true", help="only the ceiling; no training runs")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        metavar="JSON",
        help="only rewrite the Markdown tables beside a stored result",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        args.render.with_suffix(".md").write_text(markdown(json.loads(args.render.read_text())))
        return 0
    device = torch.device(args.device)
    peak = flops.peak_flops(device)
    measured = matmul_tflops(device) if device.type == "cuda" else None
    result = {
        "benchmark": "gpt_mfu",
        "device": device.type,
        "machine": machine_description(device),
        "torch": torch.__version__,
        "datasheet_peak_tflops": peak / 1e12 if peak else None,
        "matmul_tflops_measured": measured,
        "runs": [],
    }
    if args.ceiling or args.ceiling_only:
        config = GPTConfig(dropout=0.0, **CONFIGS[args.config])
        result["product_ceiling"] = {f"batch {b}": product_ceiling(config, b, device) for b in args.batch}
        print(json.dumps(result["product_ceiling"], indent=1))
    if not args.ceiling_only:
        for batch, kernel, stack, mode in itertools.product(
            args.batch, args.attention_kernel, args.stack_qkv, args.compile
        ):
            result["runs"].append(one_run(args, batch, kernel, stack, mode, device))
            print(
                f"batch {batch}, attention {kernel}, stacked Q/K/V {stack}, compile {mode}: "
                f"{result['runs'][-1]['ms_per_step']:.1f} ms/step, MFU {result['runs'][-1]['mfu']}",
                flush=True,
            )
    result["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print("\n" + markdown(result))
    output = args.output or RESULTS / f"gpt_mfu_{device.type}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    output.with_suffix(".md").write_text(markdown(result))
    print(f"\nwritten to {output} and {output.with_suffix('.md').name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
