"""Generation speed of a real small language model: SmolLM2-135M-Instruct in the book's ``ModernGPT``
against ``transformers``' ``LlamaForCausalLM`` on the same weights (chapter 18).

Both load the same GGUF file (the catalogue's, fetched offline first): the book's
``pretrained.load_language_model`` dequantizes it into float32 with the package's own Q4_1 reader,
``transformers`` with its GGUF loader. Both then generate ``--new-tokens`` tokens greedily after a
chat prompt, with a key/value cache, in float32: the book's ``decoding.generate`` and
``transformers``' ``generate``. The two are first checked to produce the same tokens; then
``--repeats`` interleaved rounds time each (order rotating), and the JSON reports the medians,
the tokens per second, and the memory-bandwidth bound of this machine: the bytes a step reads
(every weight once, and the cache) over the bandwidth of reading a 1 GiB tensor.

Usage::

    python benchmarks/smollm2_generation.py [--device cpu|cuda] [--new-tokens 256] [--repeats 3] [--threads T]

Needs ``transformers``, ``accelerate`` and ``gguf`` (``requirements.txt``). Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from timing import interleaved

from transformer_book.decoding import generate
from transformer_book.grouped_attention import kv_cache_bytes
from transformer_book.pretrained import load_language_model
from transformer_book.runtime import machine_description

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "smollm2_generation.json"
QUESTION = "Write a short poem about the sea."


def read_bandwidth(device: torch.device, gib: int = 1, repeats: int = 5) -> float:
    """Bytes per second of reading a ``gib`` GiB float32 tensor once (``sum``), the best of ``repeats``."""
    big = torch.ones(gib << 28, device=device)
    big.sum()
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        big.sum()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return big.numel() * big.element_size() / best


def run(device_name: str, new_tokens: int, repeats: int, threads: int | None) -> dict:
    import transformers

    device = torch.device(device_name)
    if threads is not None:
        torch.set_num_threads(threads)
    smol = load_language_model(device=device)
    file = smol.fetched.paths[smol.fetched.entry.weights.name]
    reference = (
        transformers.LlamaForCausalLM.from_pretrained(file.parent, gguf_file=file.name, torch_dtype=torch.float32)
        .to(device)
        .eval()
    )
    prompt = torch.tensor(
        [smol.tokenizer.encode(smol.chat_prompt([{"role": "user", "content": QUESTION}]))], device=device
    )

    def ours() -> torch.Tensor:
        return generate(smol.model, prompt=prompt, max_new_tokens=new_tokens, eos_id=None)

    def theirs() -> torch.Tensor:
        with torch.no_grad():
            return reference.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)

    same = ours()[0].tolist() == theirs()[0, prompt.shape[1] :].tolist()  # also the warm-up
    timing = interleaved({"book": ours, "transformers": theirs}, device, repeats, warmup=0)
    medians = {k: timing.median(k) for k in ("book", "transformers")}
    c = smol.model.config
    weight_bytes = sum(p.numel() * p.element_size() for p in smol.model.parameters())
    cache_bytes = kv_cache_bytes(c.n_layers, c.kv_heads, c.d_k, prompt.shape[1] + new_tokens // 2)
    bandwidth = read_bandwidth(device)
    bound = bandwidth / (weight_bytes + cache_bytes)
    return {
        "benchmark": "smollm2_generation",
        "machine": machine_description(device),
        "device": device.type,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "new_tokens": new_tokens,
        "prompt_tokens": prompt.shape[1],
        "repeats": repeats,
        "same_tokens": same,
        "book_s": medians["book"],
        "transformers_s": medians["transformers"],
        "book_tokens_per_s": new_tokens / medians["book"],
        "transformers_tokens_per_s": new_tokens / medians["transformers"],
        "read_bandwidth_bytes_per_s": bandwidth,
        "bytes_per_token": weight_bytes + cache_bytes,
        "bound_tokens_per_s": bound,
        "book_share_of_bound": new_tokens / medians["book"] / bound,
        "samples_s": timing.samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    r = run(args.device, args.new_tokens, args.repeats, args.threads)
    print(
        f"\n{r['machine']}, torch {r['torch']}, transformers {r['transformers']}, {r['device']}, {r['threads']} threads; "
        f"{r['new_tokens']} new tokens after {r['prompt_tokens']}, median of {r['repeats']}; same tokens: {r['same_tokens']}"
    )
    print(
        f"book {r['book_tokens_per_s']:.1f} tokens/s, transformers {r['transformers_tokens_per_s']:.1f} tokens/s "
        f"(book / transformers {r['book_tokens_per_s'] / r['transformers_tokens_per_s']:.2f}); bandwidth bound "
        f"{r['bound_tokens_per_s']:.1f} tokens/s ({r['read_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, "
        f"{r['bytes_per_token'] / 1e6:.0f} MB per token): the book at {r['book_share_of_bound']:.0%} of it"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(r, indent=2) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
