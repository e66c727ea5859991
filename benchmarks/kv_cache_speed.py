"""Generation speed with and without the key/value cache (chapter 9).

Generates ``--new-tokens`` tokens greedily after a prompt of ``--prompt`` tokens with
``transformer_book.decoding.generate``, once recomputing the whole prefix at every step
(``use_cache=False``) and once with the cache (``use_cache=True``), for

* ``gpt``: the decoder-only ``GPT`` of chapter 9 (default: 6 layers, 6 heads, width 384, the
  10.7M-parameter Tiny Shakespeare configuration, with a context of prompt + new tokens), and
* ``translator``: the encoder-decoder ``Transformer`` of chapter 7 (3 + 3 layers, width 256),
  decoding from a source sentence of ``--prompt`` tokens.

The two paths are first checked to produce the same tokens. Then ``--repeats`` interleaved
rounds time each path (order rotating); the table reports the median seconds, generated tokens
per second and the speed-up (cached over recomputed). Untrained weights: the speed of a forward
pass does not depend on what the weights learned, and EOS is disabled so every run generates
exactly ``--new-tokens`` tokens.

Usage::

    python benchmarks/kv_cache_speed.py [--device cpu|cuda] [--new-tokens 256] [--repeats 5] [--threads T]

Prints a Markdown table and writes JSON (default ``benchmarks/results/kv_cache_speed.json``).
Not run by CI.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from timing import interleaved

from transformer_book.decoding import generate
from transformer_book.models import GPT, GPTConfig, Transformer, TransformerConfig
from transformer_book.runtime import machine_description

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "kv_cache_speed.json"


def run(device_name: str, new_tokens: int, prompt: int, repeats: int, threads: int | None) -> dict:
    device = torch.device(device_name)
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    vocab = 65
    gpt = (
        GPT(GPTConfig(vocab, context=prompt + new_tokens, d_model=384, n_heads=6, n_layers=6, dropout=0.2))
        .to(device)
        .eval()
    )
    translator = (
        Transformer(
            TransformerConfig(
                8000,
                8000,
                d_model=256,
                n_heads=4,
                d_ff=1024,
                n_encoder_layers=3,
                n_decoder_layers=3,
                max_len=new_tokens + 1,
                share_embeddings=True,
            )
        )
        .to(device)
        .eval()
    )
    g = torch.Generator().manual_seed(1)
    cases = {
        "gpt": (gpt, dict(prompt=torch.randint(0, vocab, (1, prompt), generator=g).to(device))),
        "translator": (translator, dict(src=torch.randint(4, 8000, (1, prompt), generator=g).to(device))),
    }
    rows = []
    for name, (model, inputs) in cases.items():
        params = sum(p.numel() for p in model.parameters())

        def make(use_cache: bool, model=model, inputs=inputs):
            return lambda: generate(model, **inputs, max_new_tokens=new_tokens, eos_id=None, use_cache=use_cache)

        paths = {"recompute": make(False), "cache": make(True)}
        outputs = {k: f() for k, f in paths.items()}  # also the warm-up
        assert torch.equal(outputs["recompute"], outputs["cache"]), f"{name}: the two paths generated different tokens"
        timing = interleaved(paths, device, repeats, warmup=0)  # the check above was the warm-up
        samples = timing.samples
        median = {k: timing.median(k) for k in paths}
        rows.append(
            {
                "model": name,
                "parameters": params,
                "recompute_s": median["recompute"],
                "cache_s": median["cache"],
                "recompute_tokens_per_s": new_tokens / median["recompute"],
                "cache_tokens_per_s": new_tokens / median["cache"],
                "speedup": median["recompute"] / median["cache"],
                "samples_s": samples,
            }
        )
    return {
        "benchmark": "kv_cache_speed",
        "machine": machine_description(device),
        "device": device.type,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "new_tokens": new_tokens,
        "prompt_tokens": prompt,
        "repeats": repeats,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    result = run(args.device, args.new_tokens, args.prompt, args.repeats, args.threads)
    print(
        f"\n{result['machine']}, torch {result['torch']}, {result['device']}, {result['threads']} threads; "
        f"{result['new_tokens']} new tokens after {result['prompt_tokens']}, median of {result['repeats']}\n"
    )
    print("| model | parameters | recompute s | cache s | recompute tokens/s | cache tokens/s | speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(
            f"| {r['model']} | {r['parameters']:,} | {r['recompute_s']:.2f} | {r['cache_s']:.2f} | "
            f"{r['recompute_tokens_per_s']:.0f} | {r['cache_tokens_per_s']:.0f} | {r['speedup']:.1f}x |"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
