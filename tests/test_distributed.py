"""Data-parallel training: ``fit`` under ``torchrun`` with 2 CPU processes (gloo) gives the same
model and losses as one process on the same global batches, and only rank 0 writes checkpoints."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from transformer_book import objectives, training
from transformer_book.models import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS, GLOBAL_BATCH = 6, 8

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from transformer_book import objectives, training
    from transformer_book.models import GPT, GPTConfig

    torch.set_num_threads(1)
    device = training.init_distributed()
    out = sys.argv[1]

    def batches(step):
        g = torch.Generator().manual_seed(1000 + step)
        tokens = torch.randint(0, 32, ({batch}, 9), generator=g)
        return tokens[:, :-1], tokens[:, 1:]

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=32, context=8, d_model=16, n_heads=2, n_layers=1, dropout=0.0))
    config = training.TrainConfig(steps={steps}, lr=1e-2, warmup_steps=2, schedule="cosine", clip_norm=1.0,
                                  log_every=1, eval_every=100, checkpoint_path=out + "/ckpt.pt", checkpoint_every=3)
    rows = []
    lm_loss = objectives.language_model_loss()

    def loss_fn(m, batch):
        if m.training:
            rows.append(int(batch[0].shape[0]))          # the rows this rank computed at each step
        return lm_loss(m, batch)

    history = training.fit(model, batches, loss_fn, config, device=device, progress=False)
    rank = torch.distributed.get_rank()
    json.dump(rows, open(f"{{out}}/rows-{{rank}}.json", "w"))
    torch.save(model.state_dict(), f"{{out}}/model-{{rank}}.pt")
    json.dump([v for _, v in history.train_loss], open(f"{{out}}/losses-{{rank}}.json", "w"))
""").format(batch=GLOBAL_BATCH, steps=STEPS)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _batches(step):
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, 32, (GLOBAL_BATCH, 9), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def test_two_gloo_processes_match_one_process(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(_free_port()),
            str(script),
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=32, context=8, d_model=16, n_heads=2, n_layers=1, dropout=0.0))
    config = training.TrainConfig(
        steps=STEPS, lr=1e-2, warmup_steps=2, schedule="cosine", clip_norm=1.0, log_every=1, eval_every=100
    )
    history = training.fit(model, _batches, objectives.language_model_loss(), config, progress=False)
    single = [v for _, v in history.train_loss]

    for rank in (0, 1):
        # each process computed half of every global batch, not all of it
        assert json.loads((tmp_path / f"rows-{rank}.json").read_text()) == [GLOBAL_BATCH // 2] * STEPS
        losses = json.loads((tmp_path / f"losses-{rank}.json").read_text())
        assert losses == pytest.approx(single, rel=1e-5, abs=1e-6)  # the global batch's loss, every step
        state = torch.load(tmp_path / f"model-{rank}.pt", weights_only=True)
        for name, value in model.state_dict().items():
            if name.endswith("w_k.bias"):
                # The key bias adds the same q.b to every score of a query, which the softmax ignores:
                # its true gradient is 0, what autograd returns is rounding noise, and AdamW turns
                # noise of either sign into steps of the learning rate's size. Nothing to compare.
                continue
            torch.testing.assert_close(state[name], value, rtol=1e-4, atol=1e-5, msg=name)
    # one checkpoint file (rank 0 writes it, the other rank waits), holding the last step
    assert [p.name for p in tmp_path.glob("ckpt*")] == ["ckpt.pt"]
    assert training.read_checkpoint(tmp_path / "ckpt.pt")["step"] == STEPS


def test_shard_batch_splits_every_tensor_along_the_batch():
    batch = (torch.arange(10).view(5, 2), {"y": torch.arange(5)}, "label")
    parts = [training.shard_batch(batch, r, 2) for r in range(2)]
    assert torch.equal(torch.cat([p[0] for p in parts]), batch[0])
    assert [p[1]["y"].tolist() for p in parts] == [[0, 1, 2], [3, 4]]
    assert parts[0][2] == "label"
    with pytest.raises(ValueError, match="at least one row per rank"):
        training.shard_batch(torch.zeros(1, 3), 0, 2)


def test_init_distributed_without_torchrun_is_a_single_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert training.init_distributed().type in ("cpu", "cuda")
    assert not torch.distributed.is_initialized()
