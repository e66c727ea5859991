"""Beam search: the package's batched search against chapter 8's per-hypothesis loop.

* ``batched``: ``transformer_book.decoding.beam_search`` on a batch of ``--sentences`` source
  sentences at once, all hypotheses of all sentences in one forward pass per step, reading the
  earlier keys and values from the cache;
* ``loop``: chapter 8's teaching version, ``plain_beam_search``, one sentence at a time and one
  hypothesis at a time, recomputing every prefix. Its source is read from
  ``book/08_decoding.ipynb`` and executed here, so the benchmark times exactly the code the
  chapter shows and checks, not a copy.

Model: chapter 7's translator shape (3 + 3 layers, width 256, vocabulary 8,000) with untrained
weights: a forward pass costs the same whatever the weights learned, and EOS comes at random
places, which both searches must handle alike. Both are first checked to return the same best
hypothesis with the same score for every sentence (no length normalisation, as the loop has
none). Then ``--repeats`` interleaved rounds time both; the JSON holds the medians.

The timing loop shared with the other benchmarks is `benchmarks/timing.py`.

Usage::

    python benchmarks/beam_search_speed.py [--device cpu|cuda] [--sentences 16] [--beam 5] [--max-new 20]

Not run by CI (``run_all.py --smoke`` runs it with tiny sizes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from timing import interleaved

from transformer_book import decoding
from transformer_book.models import Transformer, TransformerConfig
from transformer_book.runtime import machine_description
from transformer_book.tokenizers.subword import EOS_ID, PAD_ID, SOS_ID

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "beam_search_speed.json"


def chapter8_plain_beam_search(model: torch.nn.Module, device: torch.device):
    """``plain_beam_search`` as chapter 8 defines it, bound to ``model`` and ``device``."""
    notebook = json.loads((ROOT / "book" / "08_decoding.ipynb").read_text(encoding="utf-8"))
    source = next(
        "".join(c["source"])
        for c in notebook["cells"]
        if c["cell_type"] == "code" and "".join(c["source"]).startswith("def plain_beam_search")
    )
    definition = source.split("\n\n\n")[0]  # the function, not the cell's demonstration
    namespace = {
        "torch": torch,
        "model": model,
        "device": device,
        "SOS_ID": SOS_ID,
        "EOS_ID": EOS_ID,
        "tokenizer": None,
    }
    exec(compile(definition, "book/08_decoding.ipynb", "exec"), namespace)  # the book's own code
    return namespace["plain_beam_search"]


def run(device_name: str, sentences: int, beam: int, max_new: int, repeats: int, small: bool) -> dict:
    device = torch.device(device_name)
    torch.manual_seed(0)
    sizes = (
        dict(d_model=32, n_heads=2, d_ff=64, n_encoder_layers=1, n_decoder_layers=1)
        if small
        else dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3)
    )
    vocab = 500 if small else 8000
    model = (
        Transformer(TransformerConfig(vocab, vocab, max_len=max(max_new + 2, 16), share_embeddings=True, **sizes))
        .to(device)
        .eval()
    )
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(5, 15, (sentences,), generator=g).tolist()
    sources = [torch.randint(4, vocab, (n,), generator=g).tolist() + [EOS_ID] for n in lengths]
    src = torch.full((sentences, max(len(s) for s in sources)), PAD_ID, dtype=torch.long)
    for i, s in enumerate(sources):
        src[i, : len(s)] = torch.tensor(s)
    src = src.to(device)
    plain = chapter8_plain_beam_search(model, device)

    def batched():
        return decoding.beam_search(model, src=src, beam_size=beam, max_new_tokens=max_new)

    def loop():
        return [plain(s, k=beam, max_new=max_new) for s in sources]

    ours, theirs = batched(), loop()  # also the warm-up
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a[0][0] == b[0][0], f"sentence {i}: the two searches found different best hypotheses"
        assert abs(a[0][1] - b[0][1]) < 1e-3, f"sentence {i}: scores {a[0][1]} and {b[0][1]}"
    paths = {"batched": batched, "loop": loop}
    timing = interleaved(paths, device, repeats, warmup=0)  # the check above was the warm-up
    samples = timing.samples
    median = {k: timing.median(k) for k in paths}
    return {
        "benchmark": "beam_search_speed",
        "machine": machine_description(device),
        "device": device.type,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "sentences": sentences,
        "beam": beam,
        "max_new_tokens": max_new,
        "parameters": sum(p.numel() for p in model.parameters()),
        "repeats": repeats,
        "batched_s": median["batched"],
        "loop_s": median["loop"],
        "speedup": median["loop"] / median["batched"],
        "samples_s": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-new", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="a tiny model (for smoke runs)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    result = run(args.device, args.sentences, args.beam, args.max_new, args.repeats, args.small)
    print(
        f"{args.sentences} sentences, beam {args.beam}, up to {args.max_new} new tokens, {result['parameters']:,} "
        f"parameters: batched {result['batched_s']:.2f} s, chapter 8's loop {result['loop_s']:.2f} s "
        f"({result['speedup']:.1f}x)"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
