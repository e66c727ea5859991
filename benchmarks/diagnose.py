"""Where the time goes in the rows of the table that miss their aim: three measurements that
separate the candidate causes, on whatever device is given.

* ``kv``: a GPT decoding step (one new token, with the cache) and a full forward pass
  (recomputation) at prefix lengths 8 and 256, batch 1, the KV-cache benchmark's model. If the
  four times are about equal, a step costs its kernel launches and Python, not its arithmetic,
  and the cache has nothing to save.
* ``twin``: the chapter 9 GPT training step against its ``nn.TransformerEncoderLayer`` twin
  (``gpt_training_speed.py``'s models), eager, then with the book's LayerNorm replaced by
  ``F.layer_norm`` (same function, one fused kernel), then both compiled with ``torch.compile``
  as ``training.fit`` does on CUDA.
* ``layernorm``: the BERT and translation training-step benchmarks (``bert_pretraining_speed.py``,
  ``translation_training_speed.py``) run twice, as they are and with the book's LayerNorm replaced
  by ``F.layer_norm``: the change in their book / twin time ratio is what the LayerNorm costs.
* ``word2vec``: the time to make one epoch's examples on the CPU (``skipgram_pairs`` /
  ``cbow_windows`` and the shuffle) against ``train_word2vec``'s time per epoch.

Usage::

    python benchmarks/diagnose.py --device cuda [--only kv twin word2vec] [--output PATH]

Prints one line per measurement and writes JSON (default ``benchmarks/results/diagnose_<device>.json``).
Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from timing import time_block

from transformer_book import data, layers
from transformer_book.models import GPT, GPTConfig
from transformer_book.runtime import machine_description

RESULTS = Path(__file__).resolve().parent / "results"


def _median_time(fn, device: torch.device, calls: int, rounds: int = 5) -> float:
    fn()
    return statistics.median(time_block(fn, calls, device) for _ in range(rounds))


def kv(device: torch.device) -> dict:
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(65, context=264, d_model=384, n_heads=6, n_layers=6, dropout=0.0)).to(device).eval()
    out = {}
    with torch.no_grad():
        for n in (8, 256):
            prefix = torch.randint(0, 65, (1, n), device=device)
            _, caches = gpt.decode_step(prefix)
            new = prefix[:, -1:]

            def step(caches=caches, new=new):
                gpt.decode_step(new, caches)
                for cache in caches:  # drop the token just added, so every call sees the same prefix
                    cache.k, cache.v = cache.k[:, :, :-1], cache.v[:, :, :-1]

            out[f"cached_step_ms_prefix_{n}"] = 1e3 * _median_time(step, device, 20)
            out[f"full_forward_ms_prefix_{n}"] = 1e3 * _median_time(lambda prefix=prefix: gpt(prefix), device, 20)
    return out


@contextmanager
def fused_layer_norm() -> Iterator[None]:
    """Within ``with``: the book's LayerNorm computes through ``F.layer_norm`` (the same function,
    one kernel); restored after."""
    original = layers.LayerNorm.forward
    layers.LayerNorm.forward = lambda ln, x: F.layer_norm(x, (ln.d_model,), ln.gamma, ln.beta, ln.eps)
    try:
        yield
    finally:
        layers.LayerNorm.forward = original


def twin(device: torch.device) -> dict:
    from gpt_training_speed import CONFIGS, TorchGPT

    c = CONFIGS["cpu"]
    torch.manual_seed(0)
    ours = GPT(
        GPTConfig(
            65, context=c["context"], d_model=c["d_model"], n_heads=c["n_heads"], n_layers=c["n_layers"], dropout=0.0
        )
    ).to(device)
    theirs = TorchGPT(ours).to(device)
    batch = torch.randint(0, 65, (c["batch"], c["context"] + 1), device=device)

    def step_of(model):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            loss = F.cross_entropy(model(batch[:, :-1]).reshape(-1, 65), batch[:, 1:].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    out = {
        "ours_eager_ms": 1e3 * _median_time(step_of(ours), device, 10),
        "twin_eager_ms": 1e3 * _median_time(step_of(theirs), device, 10),
    }
    with fused_layer_norm():
        out["ours_fused_layernorm_eager_ms"] = 1e3 * _median_time(step_of(ours), device, 10)
    out["ours_compiled_ms"] = 1e3 * _median_time(step_of(torch.compile(ours)), device, 10)
    out["twin_compiled_ms"] = 1e3 * _median_time(step_of(torch.compile(theirs)), device, 10)
    return out


def layernorm(device: torch.device, smoke: bool = False) -> dict:
    import runpy
    import sys
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        for script, arguments, ratio in (
            (
                "bert_pretraining_speed.py",
                ["--config", "chapter", "--steps", "1" if smoke else "5", "--repeats", "1" if smoke else "3"],
                lambda d: d["rows"]["ours"]["median_ms"] / d["rows"]["torch"]["median_ms"],
            ),
            (
                "translation_training_speed.py",
                ["--smoke"] if smoke else ["--repeats", "3"],
                lambda d: 1 / d["ratio_ours_to_torch_throughput"],
            ),
        ):
            for label, context in (("as_is", nullcontext), ("fused_layernorm", fused_layer_norm)):
                path = Path(scratch) / f"{script}.{label}.json"
                argv = sys.argv
                sys.argv = [script, "--device", device.type, *arguments, "--output", str(path)]
                try:
                    with context():
                        runpy.run_path(str(Path(__file__).parent / script), run_name="__main__")
                except SystemExit:
                    pass
                finally:
                    sys.argv = argv
                out[f"{script[:-3]}_ratio_{label}"] = ratio(json.loads(path.read_text()))
    return out


def word2vec(device: torch.device) -> dict:
    from transformer_book.embeddings import Word2VecConfig, cbow_windows, encode_corpus, skipgram_pairs, train_word2vec
    from transformer_book.embeddings.contexts import keep_probabilities
    from transformer_book.tokenizers.text import Vocab

    sentences = data.load_wikitext2("train")
    vocab = Vocab.build((w for s in sentences for w in s), min_count=5)
    corpus = encode_corpus(sentences, vocab)
    counts = np.asarray(vocab.counts)
    keep = keep_probabilities(counts, 1e-3)
    out = {}
    for name, make in (("skipgram", skipgram_pairs), ("cbow", cbow_windows)):
        rng = np.random.default_rng(0)
        start = time.perf_counter()
        centres, contexts = make(corpus, 5, rng, keep=keep, reduced=True)
        order = torch.as_tensor(rng.permutation(len(centres)))
        torch.as_tensor(centres)[order], torch.as_tensor(contexts)[order]
        out[f"{name}_examples_s_per_epoch"] = time.perf_counter() - start
        result = train_word2vec(
            corpus, counts, Word2VecConfig(architecture=name, epochs=5), device=device, progress=False
        )
        out[f"{name}_train_s_per_epoch"] = result.seconds / 5
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("kv", "twin", "layernorm", "word2vec"),
        default=["kv", "twin", "layernorm", "word2vec"],
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="the layernorm section at tiny sizes (checks the script)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    result = {
        "benchmark": "diagnose",
        "device": device.type,
        "machine": machine_description(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for name in args.only:
        try:
            result[name] = {
                "kv": kv,
                "twin": twin,
                "layernorm": lambda d: layernorm(d, args.smoke),
                "word2vec": word2vec,
            }[name](device)
        except Exception as err:  # one failed measurement must not lose the others
            result[name] = {"error": f"{type(err).__name__}: {err}"}
            print(name, "failed:", result[name]["error"], flush=True)
            continue
        print(name, {k: round(v, 3) for k, v in result[name].items()}, flush=True)
    output = args.output or RESULTS / f"diagnose_{device.type}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
