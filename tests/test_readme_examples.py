"""Every Python example in the README runs, as a reader would paste them: in order, in one session.

The examples that train are run with their budgets shrunk (the table ``SHRINK``: the same calls,
fewer steps or less text) and in the quick profile, so that a checkpoint that is missing from the
cache is trained in seconds; what is checked is that the code a newcomer copies works, not the
numbers its comments quote. An example that cannot run here says why in ``NOT_RUN``, and a new
example must be added to one table or the other.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)

# first line of an example -> why it is not run by the tests
NOT_RUN = {
    "from transformers import BertForPreTraining, GPT2LMHeadModel": "downloads bert-base-uncased and gpt2 from the Hugging Face hub (the tests check the same mapping offline)",
    "from transformer_book import flops, objectives, training": "a fragment: the reader's own train_batches, and CUDA graphs (compile_mode='reduce-overhead') need a GPU",
    "# train.py": "a script for torchrun with elided lines (tests/test_distributed.py runs fit data-parallel)",
    "from transformer_book.recipes import translator": "load_or_train('tatoeba') trains chapter 7's translator for twenty minutes when the cache has none",
}
# (text in an example, what the test runs instead): the same calls with small budgets
SHRINK = [
    ("filling(120.0,", "filling(2.0,"),
    ('data.load_wikitext2("train")  #', 'data.load_wikitext2("train")[:5_000]  #'),
    ("recipe.replace(steps=2_000)", "recipe.replace(steps=10)"),
    ("small_bert.Recipe()  #", "small_bert.Recipe(n_documents=40)  #"),
    (
        'TrainConfig(steps=800, lr=1e-3, schedule="cosine", warmup_steps=80)',
        'TrainConfig(steps=5, lr=1e-3, schedule="cosine", warmup_steps=1)',
    ),
    (
        'TrainConfig(steps=2_000, lr=1e-3, schedule="cosine", warmup_steps=100,',
        'TrainConfig(steps=5, lr=1e-3, schedule="cosine", warmup_steps=1,',
    ),
    # the quick profile's BERT has 2,000 pieces, where 'bad' is two; the full one's 4,000 hold both words
    ('["bad", "good"]', '["the", "and"]'),
]


def _first_line(block: str) -> str:
    return block.splitlines()[0].strip()


def test_every_example_is_run_or_says_why_not() -> None:
    firsts = [_first_line(b) for b in BLOCKS]
    assert len(BLOCKS) >= 10
    assert set(NOT_RUN) <= set(firsts), f"NOT_RUN names examples the README no longer has: {set(NOT_RUN) - set(firsts)}"
    runnable = "\n".join(b for b in BLOCKS if _first_line(b) not in NOT_RUN)
    unused = [old for old, _ in SHRINK if old not in runnable]
    assert not unused, f"SHRINK no longer matches the README: {unused}"


def test_the_examples_run_in_order_in_one_session(tmp_path: Path) -> None:
    source = "\n\n".join(b for b in BLOCKS if _first_line(b) not in NOT_RUN)
    for old, new in SHRINK:
        source = source.replace(old, new)
    script = tmp_path / "readme_examples.py"
    script.write_text("import torch\ntorch.set_num_threads(1)\n\n" + source, encoding="utf-8")
    # the reader's own cache: the real checkpoints that .ci/run fetches, and quick-profile models trained here
    env = {**os.environ, "TB_PROFILE": "quick", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, "a README example failed:\n" + textwrap.indent(done.stderr[-4000:], "  ")
