"""Tests of transformer_book.training: the loss, the schedules and the resumable fit loop."""

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import schedules
from transformer_book.checkpoints import read_checkpoint
from transformer_book.objectives import label_smoothed_cross_entropy
from transformer_book.schedules import warmup_cosine, warmup_inverse_sqrt
from transformer_book.training import History, TrainConfig, fit

pytestmark = pytest.mark.usefixtures("one_thread")

PAD, V, N = 0, 11, 6


# ----------------------------------------------------------------------------- the loss


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_loss_equals_torch_cross_entropy(smoothing):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, V, generator=g, dtype=torch.float64)
    targets = torch.randint(1, V, (3, 5), generator=g)
    targets[0, 3:] = PAD
    targets[2, 1:] = PAD
    ours = label_smoothed_cross_entropy(logits, targets, pad_id=PAD, smoothing=smoothing)
    ref = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=PAD, label_smoothing=smoothing)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)


def test_loss_by_hand():
    logits = torch.tensor([[[1.0, 2.0, 0.5], [3.0, -1.0, 0.0]]], dtype=torch.float64)
    targets = torch.tensor([[1, 0]])  # the second position is PAD (pad_id=0)
    eps = 0.2
    z = [1.0, 2.0, 0.5]
    log_z = math.log(sum(math.exp(v) for v in z))
    log_p = [v - log_z for v in z]
    # smoothed target q = (1 - eps) onehot(1) + eps / 3
    q = [eps / 3, 1 - eps + eps / 3, eps / 3]
    expected = -sum(qi * lp for qi, lp in zip(q, log_p))  # mean over the one non-PAD position
    got = label_smoothed_cross_entropy(logits, targets, pad_id=0, smoothing=eps)
    assert got.item() == pytest.approx(expected, rel=1e-12)


def test_pad_positions_get_zero_gradient():
    logits = torch.randn(2, 4, V, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([[3, 4, PAD, PAD], [5, PAD, PAD, PAD]])
    label_smoothed_cross_entropy(logits, targets, pad_id=PAD, smoothing=0.1).backward()
    pad = targets == PAD
    assert torch.all(logits.grad[pad] == 0)
    assert torch.all(logits.grad[~pad].abs().sum(-1) > 0)


def test_padding_does_not_change_the_loss():
    logits = torch.randn(1, 3, V, dtype=torch.float64)
    targets = torch.tensor([[3, 4, 5]])
    padded_logits = torch.cat([logits, 100 * torch.randn(1, 4, V, dtype=torch.float64)], dim=1)
    padded_targets = torch.cat([targets, torch.full((1, 4), PAD)], dim=1)
    a = label_smoothed_cross_entropy(logits, targets, pad_id=PAD, smoothing=0.1)
    b = label_smoothed_cross_entropy(padded_logits, padded_targets, pad_id=PAD, smoothing=0.1)
    torch.testing.assert_close(a, b)


def test_loss_errors():
    logits = torch.randn(2, 3, V)
    with pytest.raises(ValueError, match="PAD"):
        label_smoothed_cross_entropy(logits, torch.full((2, 3), PAD), pad_id=PAD)
    with pytest.raises(ValueError, match="shape"):
        label_smoothed_cross_entropy(logits, torch.ones(2, 4, dtype=torch.long), pad_id=PAD)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="smoothing"):
            label_smoothed_cross_entropy(logits, torch.ones(2, 3, dtype=torch.long), pad_id=PAD, smoothing=bad)
    with pytest.raises(ValueError, match="outside"):
        label_smoothed_cross_entropy(logits, torch.full((2, 3), V), pad_id=PAD)


# ----------------------------------------------------------------------------- schedules


def _lrs(make, n, base=0.5):
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=base)
    sched = make(opt)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs  # lrs[s - 1] is the lr used by optimizer step s (1-based)


def test_warmup_inverse_sqrt_values():
    w, base = 10, 0.5
    lrs = _lrs(lambda o: warmup_inverse_sqrt(o, w), 60, base)
    for s in (1, 5, 10, 11, 40, 60):
        expected = base * min(s**-0.5, s * w**-1.5) * w**0.5
        assert lrs[s - 1] == pytest.approx(expected, rel=1e-12)
    assert lrs[w - 1] == pytest.approx(base) and max(lrs) == pytest.approx(base)  # peak at warm-up
    assert lrs[0] == pytest.approx(base / w)  # linear warm-up
    assert lrs[4 * w - 1] == pytest.approx(base / 2)  # inverse sqrt: 4x the steps, half the lr


def test_warmup_inverse_sqrt_paper_formula():
    w, d_model = 4, 64
    lrs = _lrs(lambda o: warmup_inverse_sqrt(o, w, d_model=d_model), 12, base=1.0)
    for s in range(1, 13):
        assert lrs[s - 1] == pytest.approx(d_model**-0.5 * min(s**-0.5, s * w**-1.5), rel=1e-12)


def test_warmup_cosine_endpoints():
    w, total, base, r = 5, 25, 0.5, 0.1
    lrs = _lrs(lambda o: warmup_cosine(o, w, total, min_ratio=r), total + 3, base)
    assert lrs[0] == pytest.approx(base / w)
    assert lrs[w - 1] == pytest.approx(base)
    assert lrs[total - 1] == pytest.approx(base * r)
    assert lrs[total + 2] == pytest.approx(base * r)  # held after the end
    mid = w + (total - w) // 2
    assert lrs[mid - 1] == pytest.approx(base * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * 0.5))))


def test_schedule_argument_errors():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_inverse_sqrt(opt, 0)
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_cosine(opt, 10, 10)
    with pytest.raises(ValueError, match="min_ratio"):
        warmup_cosine(opt, 1, 10, min_ratio=1.5)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match=f"warmup_constant: warmup_steps must be a non-negative int, got {bad!r}"):
            schedules.warmup_constant(opt, bad)
    with pytest.raises(ValueError, match="make_schedule: name must be one of 'inverse_sqrt', 'cosine' or 'constant'"):
        schedules.make_schedule("linear", opt, warmup_steps=1, total_steps=10)


def test_warmup_constant_values():
    lrs = _lrs(lambda o: schedules.warmup_constant(o, 4), 8, base=0.5)
    assert lrs == pytest.approx([0.125, 0.25, 0.375, 0.5, 0.5, 0.5, 0.5, 0.5], rel=1e-12)
    assert _lrs(lambda o: schedules.warmup_constant(o, 0), 3, base=0.5) == [0.5, 0.5, 0.5]


# ----------------------------------------------------------------------------- fit


class TinyLM(nn.Module):
    """Embedding, dropout, linear: learns the fixed map token -> next token."""

    def __init__(self, d=16):
        super().__init__()
        self.embed = nn.Embedding(V, d)
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(d, V)

    def forward(self, x):
        return self.out(self.drop(self.embed(x)))


def successor(x):
    return (3 * x + 1) % (V - 1) + 1  # never PAD


def batches(step, batch_size=8):
    """A pure function of the step, as fit requires."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randint(1, V, (batch_size, N), generator=g)
    y = successor(x)
    y[:, -2:] = PAD  # some padding
    return x, y


def lm_loss(model, batch, smoothing=0.0):
    x, y = batch
    return label_smoothed_cross_entropy(model(x), y, pad_id=PAD, smoothing=smoothing), int((y != PAD).sum())


def val_batches():
    return [batches(10_000 + i) for i in range(2)]


def make_model(seed=0):
    torch.manual_seed(seed)
    return TinyLM()


def test_fit_reduces_the_loss():
    config = TrainConfig(
        steps=60, lr=3e-2, warmup_steps=5, schedule="inverse_sqrt", eval_every=30, log_every=10, smoothing=0.0
    )
    model = make_model()
    history = fit(model, batches, lm_loss, config, val_batches=val_batches, progress=False)
    assert len(history.train_loss) == 60 and [s for s, _ in history.train_loss] == list(range(1, 61))
    first, last = history.train_loss[0][1], history.train_loss[-1][1]
    assert last < 0.5 * first
    assert [s for s, _ in history.val_loss] == [30, 60]
    assert history.val_loss[-1][1] < history.val_loss[0][1] < math.log(V)
    assert len(history.tokens_per_s) == 6 and all(r > 0 for _, r in history.tokens_per_s)
    assert history.lr[4][1] == pytest.approx(3e-2)  # peak at the warm-up step
    assert set(history.to_dict()) == {
        "train_loss",
        "val_loss",
        "lr",
        "tokens_per_s",
        "train_time_s",
        "mfu",
        "compile_s",
    }
    assert history.mfu == []  # no flops_per_token given (and no known peak on the CPU)
    assert history.compile_s == []  # nothing compiled on the CPU by default
    assert History.from_dict(history.to_dict()) == history
    # training time: at every log and validation step, increasing
    assert [s for s, _ in history.train_time_s] == [10, 20, 30, 40, 50, 60]
    times = [t for _, t in history.train_time_s]
    assert all(b > a > 0 for a, b in zip(times, times[1:]))
    assert history.time_at(60) == times[-1] and times[0] < history.time_at(15) < times[1]


def test_time_budget_stops_training_and_resumes_with_a_larger_budget(tmp_path):
    import time as clock

    def slow_loss(model, batch):
        clock.sleep(0.03)
        return lm_loss(model, batch)

    path = str(tmp_path / "budget.pt")
    config = TrainConfig(
        steps=1000,
        lr=1e-2,
        warmup_steps=2,
        eval_every=500,
        log_every=500,
        checkpoint_path=path,
        checkpoint_every=500,
        time_budget_s=0.2,
    )
    history = fit(make_model(), batches, slow_loss, config, val_batches=val_batches, progress=False)
    done = history.train_loss[-1][0]
    assert 4 <= done < 20  # ~0.2 s / 0.03 s per step, far below 1000
    assert history.train_time_s[-1] == (done, pytest.approx(history.train_time_s[-1][1]))
    assert history.train_time_s[-1][1] >= 0.2
    assert [s for s, _ in history.val_loss] == [done]  # validated at the last step
    assert read_checkpoint(path)["step"] == done  # and checkpointed there
    longer = TrainConfig(**{**config.__dict__, "time_budget_s": 0.4})
    resumed = fit(make_model(), batches, slow_loss, longer, val_batches=val_batches, progress=False, resume=True)
    assert resumed.train_loss[:done] == history.train_loss
    assert resumed.train_loss[-1][0] > done and resumed.train_time_s[-1][1] >= 0.4
    spent = fit(make_model(), batches, slow_loss, longer, val_batches=val_batches, progress=False, resume=True)
    assert spent.train_loss == resumed.train_loss  # the budget is spent: not one more step
    with pytest.raises(ValueError, match="time_budget_s must be positive"):
        TrainConfig(time_budget_s=0)


def _as_a_notebook_shows_it(text):
    """Stream text as a notebook stores it: each line keeps what follows its last carriage return."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n") if line.rsplit("\r", 1)[-1].strip()]


def test_fit_leaves_one_summary_line_instead_of_its_progress_bar(capsys):
    config = TrainConfig(steps=30, lr=3e-2, warmup_steps=5, eval_every=15, log_every=10)
    history = fit(make_model(), batches, lm_loss, config, val_batches=val_batches, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = _as_a_notebook_shows_it(captured.err)
    assert len(lines) == 1, lines  # the bar was cleared; one line stays
    (line,) = lines
    assert "it/s" not in line and "%|" not in line
    assert line.startswith("train: 30 steps, the schedule's end; ")
    mean_last_10 = sum(loss for _, loss in history.train_loss[-10:]) / 10
    assert f"training loss {mean_last_10:.4f} (mean of the last 10 steps)" in line
    assert f"validation loss {history.val_loss[-1][1]:.4f}" in line
    assert f"{history.tokens_per_s[-1][1]:,.0f} tokens/s" in line


def test_a_run_stopped_by_its_time_budget_says_so_in_its_summary_line(capsys, tmp_path):
    import time as clock

    def slow_loss(model, batch):
        clock.sleep(0.03)
        return lm_loss(model, batch)

    path = str(tmp_path / "budget.pt")
    config = TrainConfig(
        steps=1000,
        lr=1e-2,
        warmup_steps=2,
        log_every=500,
        checkpoint_path=path,
        checkpoint_every=500,
        time_budget_s=0.2,
    )
    history = fit(make_model(), batches, slow_loss, config, progress=True)
    done = history.train_loss[-1][0]
    (line,) = _as_a_notebook_shows_it(capsys.readouterr().err)
    assert line.startswith(f"train: {done:,} of 1,000 steps, stopped by the 0.2 s time budget; ")
    assert f"(mean of the last {done} steps)" in line and "validation" not in line
    # resumed with the budget spent: nothing runs, and the line says why
    fit(make_model(), batches, slow_loss, config, progress=True, resume=True)
    (line,) = _as_a_notebook_shows_it(capsys.readouterr().err)
    assert line == f"train: nothing left to run: the checkpoint's {done:,} steps already spent the 0.2 s time budget"


def test_no_output_at_all_without_progress(capsys):
    fit(make_model(), batches, lm_loss, TrainConfig(steps=3, warmup_steps=1), progress=False)
    assert capsys.readouterr() == ("", "")


def test_validation_runs_in_eval_mode_and_restores_train_mode():
    modes = []

    def loss_fn(model, batch):
        modes.append(model.training)
        return lm_loss(model, batch)

    model = make_model()
    fit(
        model,
        batches,
        loss_fn,
        TrainConfig(steps=4, eval_every=2, warmup_steps=1),
        val_batches=lambda: [batches(99)],
        progress=False,
    )
    assert modes == [True, True, False, True, True, False]
    assert model.training


def test_nan_loss_raises_naming_the_step():
    def loss_fn(model, batch):
        x, y, step = batch
        loss, n = lm_loss(model, (x, y))
        return (loss * float("nan") if step == 3 else loss), n

    model = make_model()
    with pytest.raises(FloatingPointError, match=r"nan at step 3 "):
        fit(model, lambda step: (*batches(step), step), loss_fn, TrainConfig(steps=10, warmup_steps=1), progress=False)
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the bad step was not applied


def _grad_norm(model):
    return torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None])
    ).item()


def test_clipping_bounds_the_gradient_norm():
    def huge(model, batch):
        loss, n = lm_loss(model, batch)
        return 1e6 * loss, n

    config = TrainConfig(steps=1, warmup_steps=1, clip_norm=0.5)
    clipped = make_model()
    fit(clipped, batches, huge, config, progress=False)
    assert _grad_norm(clipped) == pytest.approx(0.5, rel=1e-4)
    unclipped = make_model()
    fit(unclipped, batches, huge, TrainConfig(steps=1, warmup_steps=1, clip_norm=None), progress=False)
    assert _grad_norm(unclipped) > 1e3


class Interrupted(Exception):
    pass


def test_resume_gives_the_same_losses_as_an_uninterrupted_run(tmp_path):
    common = dict(
        steps=20,
        lr=2e-2,
        warmup_steps=4,
        schedule="cosine",
        eval_every=5,
        log_every=5,
        checkpoint_every=5,
        smoothing=0.1,
    )
    straight_config = TrainConfig(**common, checkpoint_path=str(tmp_path / "a" / "straight.pt"))
    straight_model = make_model()
    straight = fit(straight_model, batches, lm_loss, straight_config, val_batches=val_batches, progress=False)

    path = tmp_path / "b" / "run.pt"
    config = TrainConfig(**common, checkpoint_path=str(path))

    def interrupted_batches(step):
        if step == 10:
            raise Interrupted
        return batches(step)

    with pytest.raises(Interrupted):
        fit(make_model(), interrupted_batches, lm_loss, config, val_batches=val_batches, progress=False, resume=True)
    assert read_checkpoint(path)["step"] == 10
    resumed_model = make_model(seed=123)  # a different initialisation: everything must come from the checkpoint
    resumed = fit(resumed_model, batches, lm_loss, config, val_batches=val_batches, progress=False, resume=True)

    assert resumed.train_loss == straight.train_loss  # exact, dropout included
    assert resumed.val_loss == straight.val_loss
    assert resumed.lr == straight.lr
    for a, b in zip(straight_model.parameters(), resumed_model.parameters()):
        assert torch.equal(a, b)
    # written atomically: no temporary files left (the run's lock file stays, hidden)
    assert sorted(os.listdir(path.parent)) in (["run.pt"], [".run.pt.lock", "run.pt"])
    saved = read_checkpoint(path)
    assert saved["format_version"] == 1 and saved["step"] == 20
    assert {"model", "optimizer", "scheduler", "history", "rng"} <= set(saved)


def test_resume_with_a_mismatched_model_raises(tmp_path):
    path = str(tmp_path / "ckpt.pt")
    fit(make_model(), batches, lm_loss, TrainConfig(steps=2, warmup_steps=1, checkpoint_path=path), progress=False)
    config = TrainConfig(steps=4, warmup_steps=1, checkpoint_path=path)
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"embed\.weight.*\(11, 16\).*\(11, 8\)"):
        fit(TinyLM(d=8), batches, lm_loss, config, progress=False, resume=True)
    other = nn.Sequential(nn.Embedding(V, 16), nn.Linear(16, V))
    with pytest.raises(ValueError, match="missing keys"):
        fit(other, lambda s: batches(s), lambda m, b: (m(b[0]).sum(), 1), config, progress=False, resume=True)


def test_fit_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_path"):
        fit(make_model(), batches, lm_loss, TrainConfig(steps=1, warmup_steps=1), progress=False, resume=True)
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="clip_norm"):
        TrainConfig(clip_norm=0.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(steps=10, warmup_steps=10, schedule="cosine")
    with pytest.raises(ValueError, match="min_lr_ratio"):
        TrainConfig(min_lr_ratio=-0.1)


def test_fit_cosine_schedule_ends_at_min_lr_ratio():
    config = TrainConfig(
        steps=20,
        lr=1e-2,
        warmup_steps=4,
        schedule="cosine",
        min_lr_ratio=0.1,
        eval_every=20,
        log_every=1,
        smoothing=0.0,
    )
    history = fit(make_model(), batches, lm_loss, config, progress=False)
    lrs = [lr for _, lr in history.lr]
    assert lrs[3] == pytest.approx(1e-2) and max(lrs) == pytest.approx(1e-2)
    assert lrs[-1] == pytest.approx(1e-3) and min(lrs) == pytest.approx(1e-3)


# ----------------------------------------------------------------------------- saving a trained model


def _tiny_tokenizer():
    from transformer_book.tokenizers.subword import SubwordTokenizer

    return SubwordTokenizer.train([f"ein hund {w} im park" for w in ("läuft", "spielt", "schläft")] * 5, vocab_size=30)


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_save_and_load_model_round_trip(tmp_path, kind):
    from transformer_book.checkpoints import load_model, save_model
    from transformer_book.models import RNNSeq2Seq, RNNSeq2SeqConfig, Transformer, TransformerConfig

    torch.manual_seed(0)
    if kind == "transformer":
        model = Transformer(
            TransformerConfig(
                30,
                30,
                d_model=16,
                n_heads=2,
                d_ff=32,
                n_encoder_layers=1,
                n_decoder_layers=1,
                max_len=20,
                share_embeddings=True,
            )
        )
    else:
        model = RNNSeq2Seq(RNNSeq2SeqConfig(30, 30, d_embedding=8, d_hidden=12, attention="bahdanau"))
    tokenizer = _tiny_tokenizer()
    path = save_model(tmp_path / "sub" / "model.pt", model, tokenizer=tokenizer, metadata={"bleu": 12.5, "steps": 7})
    loaded, loaded_tokenizer, metadata = load_model(path)
    assert type(loaded) is type(model) and loaded.config == model.config and not loaded.training
    assert metadata == {"bleu": 12.5, "steps": 7}
    assert loaded_tokenizer.to_bytes() == tokenizer.to_bytes()
    src, tgt_in = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, tgt_in), model(src, tgt_in), rtol=0, atol=0)
    if kind == "transformer":  # the shared embedding stays shared
        assert loaded.src_embedding.weight is loaded.tgt_embedding.weight is loaded.output.weight


def test_load_model_rejects_other_files(tmp_path):
    from transformer_book.checkpoints import load_model, save_model
    from transformer_book.models import Transformer, TransformerConfig

    model = Transformer(
        TransformerConfig(30, 30, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1)
    )
    path = save_model(tmp_path / "m.pt", model)
    assert load_model(path)[1] is None
    saved = read_checkpoint(path)
    for name, change, message in [
        ("version.pt", {"format_version": 99}, "format version 99"),
        ("class.pt", {"class": "GPT5"}, "holds a 'GPT5'"),
        ("weights.pt", {"config": {**saved["config"], "d_ff": 64}}, "does not match the model"),
    ]:
        torch.save({**saved, **change}, tmp_path / name)
        with pytest.raises(ValueError, match=message):
            load_model(tmp_path / name)
    (tmp_path / "truncated.pt").write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="truncated.pt is not a readable checkpoint"):
        load_model(tmp_path / "truncated.pt")
    with pytest.raises(ValueError, match="can save"):
        save_model(tmp_path / "x.pt", nn.Linear(2, 2))


def test_save_and_load_bert_with_its_wordpiece_tokenizer(tmp_path):
    from transformer_book.checkpoints import load_model, save_model
    from transformer_book.models import BERT, BERTConfig
    from transformer_book.tokenizers.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.train(["the dog runs in the park", "a cat sleeps in the house"] * 5, vocab_size=60)
    torch.manual_seed(0)
    model = BERT(BERTConfig(len(tokenizer), max_len=16, d_model=16, n_heads=2, n_layers=1)).eval()
    path = save_model(tmp_path / "bert.pt", model, tokenizer=tokenizer, metadata={"mlm_loss": 5.5})
    loaded, loaded_tokenizer, metadata = load_model(path)
    assert type(loaded) is BERT and loaded.config == model.config and metadata == {"mlm_loss": 5.5}
    assert isinstance(loaded_tokenizer, WordPieceTokenizer) and loaded_tokenizer.vocab() == tokenizer.vocab()
    tokens = torch.tensor([tokenizer.encode("the cat runs")])
    with torch.no_grad():
        for got, want in zip(loaded(tokens), model(tokens)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="tokenizer must be"):
        save_model(tmp_path / "x.pt", model, tokenizer="not a tokenizer")


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one_intact(tmp_path, monkeypatch):
    from transformer_book import atomic, checkpoints

    path = tmp_path / "run.pt"
    checkpoints.write_checkpoint({"step": 1}, path)
    before = path.read_bytes()

    def crash(fd: int) -> None:  # the bytes are in the temporary file, not yet on disk nor renamed
        raise KeyboardInterrupt  # the process is stopped mid-write

    monkeypatch.setattr(atomic.os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.write_checkpoint({"step": 2}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["run.pt"]
    assert checkpoints.read_checkpoint(path) == {"step": 1}


def test_every_model_the_book_trains_saves_and_loads(tmp_path):
    """The registry covers GPT and the ELMo BiLM too (chapters 9 and 12), and training imports
    no model: checkpoints name their modules and import them only when a file asks."""
    import ast

    import transformer_book.training
    from transformer_book import checkpoints
    from transformer_book.models import GPT, GPTConfig
    from transformer_book.models.elmo import BiLM, BiLMConfig

    torch.manual_seed(0)
    for model in (
        GPT(GPTConfig(vocab_size=30, context=8, d_model=16, n_heads=2, n_layers=1)),
        BiLM(BiLMConfig(vocab_size=30, d_embed=8, d_hidden=8, n_layers=1, cutoffs=())),
    ):
        model.eval()
        path = checkpoints.save_model(tmp_path / f"{type(model).__name__}.pt", model, metadata={"steps": 3})
        loaded, tokenizer, metadata = checkpoints.load_model(path)
        assert type(loaded) is type(model) and loaded.config == model.config and tokenizer is None
        assert metadata == {"steps": 3}
        for name, value in model.state_dict().items():
            torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0)
    source = ast.parse(Path(transformer_book.training.__file__).read_text())
    imported = {node.module for node in ast.walk(source) if isinstance(node, ast.ImportFrom)}
    assert not {
        m
        for m in imported
        if m
        and (
            m.startswith("transformer_book.models")
            or m in ("transformer_book.tokenizers.subword", "transformer_book.tokenizers.wordpiece")
        )
    }


@dataclass
class TinyConfig:
    """A config of one's own, for the registry test."""

    width: int = 3


class Tiny(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config, self.linear = config, nn.Linear(config.width, 1)


def test_register_model_lets_a_class_of_ones_own_be_saved(tmp_path, monkeypatch):
    from transformer_book import checkpoints

    monkeypatch.setattr(checkpoints, "SAVABLE_MODELS", dict(checkpoints.SAVABLE_MODELS))  # restored afterwards
    with pytest.raises(ValueError, match="can save"):
        checkpoints.save_model(tmp_path / "t.pt", Tiny(TinyConfig()))
    checkpoints.register_model(Tiny, TinyConfig)
    loaded, _, _ = checkpoints.load_model(checkpoints.save_model(tmp_path / "t.pt", Tiny(TinyConfig(width=5))))
    assert type(loaded) is Tiny and loaded.config == TinyConfig(width=5)
    with pytest.raises(ValueError, match="dataclass"):
        checkpoints.register_model(Tiny, dict)
    with pytest.raises(ValueError, match="nn.Module"):
        checkpoints.register_model(TinyConfig, TinyConfig)


def test_resuming_from_a_checkpoint_of_another_format_version_fails_clearly(tmp_path):
    from transformer_book.objectives import language_model_loss
    from transformer_book.training import TrainConfig, fit

    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))
    path = tmp_path / "run.pt"
    torch.save({"format_version": 99, "step": 3}, path)
    config = TrainConfig(steps=2, warmup_steps=1, checkpoint_path=str(path))
    with pytest.raises(ValueError, match=r"checkpoint .*run\.pt has format_version 99, expected 1"):
        fit(
            model,
            lambda s: (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)),
            language_model_loss(),
            config,
            resume=True,
            progress=False,
        )


# ----------------------------------------------------------------------------- compile and MFU


def _gpt_run(**config_overrides):
    from transformer_book.data import RandomWindows
    from transformer_book.models import GPT, GPTConfig
    from transformer_book.objectives import language_model_loss

    torch.manual_seed(0)
    model = GPT(GPTConfig(20, context=16, d_model=32, n_heads=2, n_layers=2, dropout=0.0))
    ids = torch.randint(0, 20, (500,), generator=torch.Generator().manual_seed(1))
    config = TrainConfig(
        **{
            **dict(steps=6, lr=3e-3, warmup_steps=2, schedule="cosine", smoothing=0.0, log_every=3, eval_every=100),
            **config_overrides,
        }
    )
    history = fit(model, RandomWindows(ids, 16, 4, seed=0), language_model_loss(), config, progress=False)
    return model, history


# Dynamo reads .grad of non-leaf tensors while it traces (a warning of torch's own, turned into an
# error by this suite's warnings-as-errors).
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
def test_compiled_training_matches_eager_training():
    """``compile=True`` (torch.compile's inductor, on the CPU here) trains the same model: the
    same losses step by step and the same weights, to float32 rounding."""
    eager_model, eager = _gpt_run(compile=False)
    compiled_model, compiled = _gpt_run(compile=True)
    eager_losses, compiled_losses = [v for _, v in eager.train_loss], [v for _, v in compiled.train_loss]
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-5)
    compared = 0
    for (name, a), b in zip(eager_model.named_parameters(), compiled_model.parameters()):
        if name.endswith("w_k.bias"):
            # Its true gradient is zero (adding q.b_k to a whole row of scores leaves the softmax
            # unchanged), so AdamW turns rounding noise into full-size steps: nothing to compare.
            continue
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
        compared += 1
    assert compared == len(list(eager_model.parameters())) - 2


def test_compile_defaults_to_off_on_the_cpu(monkeypatch):
    """``compile=None`` compiles on CUDA only: on the CPU torch.compile is never called."""

    def refuse(*args, **kwargs):
        raise AssertionError("torch.compile called on the CPU with compile=None")

    monkeypatch.setattr(torch, "compile", refuse)
    _gpt_run(compile=None)


def test_attention_kernel_is_preferred_around_every_training_step():
    """``attention_kernel`` puts that kernel first while the training step's forward runs (its
    backward uses the forward's kernel); the default leaves PyTorch's order alone."""
    from torch.nn.attention import SDPBackend

    seen = []

    def spy_loss(model, batch):
        seen.append(torch._C._get_sdp_priority_order()[0])
        return lm_loss(model, batch)

    model = make_model()
    fit(model, batches, spy_loss, TrainConfig(steps=3, warmup_steps=1, attention_kernel="math"), progress=False)
    assert seen == [int(SDPBackend.MATH)] * 3
    assert torch._C._get_sdp_priority_order()[0] != int(SDPBackend.MATH)  # restored after each step
    seen.clear()
    fit(make_model(), batches, spy_loss, TrainConfig(steps=2, warmup_steps=1), progress=False)
    assert seen == [torch._C._get_sdp_priority_order()[0]] * 2
    assert TrainConfig().attention_kernel is None


def test_mfu_is_logged_from_tokens_per_second_and_the_peak(monkeypatch):
    """With ``flops_per_token`` and a known peak, every logging window records
    tokens/s x FLOPs per token / peak (the peak is patched in: the CPU has none)."""
    import transformer_book.training as training_module

    monkeypatch.setattr(training_module, "peak_flops", lambda device: 1e9)
    _, history = _gpt_run(flops_per_token=2e5)
    assert [s for s, _ in history.mfu] == [s for s, _ in history.tokens_per_s] == [3, 6]
    for (_, rate), (_, utilisation) in zip(history.tokens_per_s, history.mfu):
        assert utilisation == pytest.approx(rate * 2e5 / 1e9)
    _, without = _gpt_run()
    assert without.mfu == []


@pytest.mark.parametrize(
    "field, value, pattern",
    [
        ("compile", "yes", "compile must be None, True or False"),
        ("flops_per_token", 0.0, "flops_per_token must be positive"),
        ("compile_mode", "fastest", "compile_mode must be one of"),
        ("attention_kernel", "cuDNN", r"attention_kernel must be None or one of \('flash'"),
    ],
)
def test_compile_and_flops_settings_are_checked(field, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        TrainConfig(**{field: value})


# --------------------------------------------------------------------------------------
# One run per checkpoint path; a resume continues the same run
# --------------------------------------------------------------------------------------


def test_a_second_run_with_the_same_checkpoint_path_is_refused_while_the_first_runs(tmp_path):
    """Two runs writing one path would overwrite each other's checkpoints, and a resume would
    take over the other run's weights: the second run is refused at once."""
    path = str(tmp_path / "shared.pt")
    config = TrainConfig(steps=2, warmup_steps=1, checkpoint_path=path)
    started, release, finished = threading.Event(), threading.Event(), []

    def held_batches(step):
        started.set()
        assert release.wait(30)
        return batches(step)

    first = threading.Thread(
        target=lambda: finished.append(fit(make_model(), held_batches, lm_loss, config, progress=False))
    )
    first.start()
    try:
        assert started.wait(30)
        second = make_model(seed=5)
        before = [p.detach().clone() for p in second.parameters()]
        with pytest.raises(RuntimeError, match=r"another run is training with checkpoint_path .*shared\.pt"):
            fit(second, batches, lm_loss, config, progress=False)
        assert all(torch.equal(a, b) for a, b in zip(before, second.parameters()))
    finally:
        release.set()
        first.join(30)
    assert len(finished) == 1 and read_checkpoint(path)["step"] == 2
    # the first run is over: the path is free again
    assert len(fit(make_model(), batches, lm_loss, config, progress=False).train_loss) == 2


def test_resume_with_other_settings_is_refused_and_leaves_the_model_untouched(tmp_path):
    path = str(tmp_path / "run.pt")
    base = dict(steps=4, lr=1e-2, warmup_steps=1, checkpoint_path=path)
    fit(make_model(), batches, lm_loss, TrainConfig(**base), progress=False)
    for change, pattern in [
        (dict(lr=2e-2), r"lr 0\.01 -> 0\.02"),
        (dict(weight_decay=0.1), r"weight_decay 0\.01 -> 0\.1"),
        (dict(schedule="constant"), r"schedule 'inverse_sqrt' -> 'constant'"),
        (dict(seed=1), r"seed 0 -> 1"),
        (dict(betas=(0.9, 0.99)), r"betas"),
    ]:
        model = make_model(seed=7)
        before = [p.detach().clone() for p in model.parameters()]
        with pytest.raises(ValueError, match=r"cannot resume from .*run\.pt.*" + pattern):
            fit(model, batches, lm_loss, TrainConfig(**{**base, **change, "steps": 8}), progress=False, resume=True)
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # what does not change the arithmetic may change: more steps (inverse_sqrt), logging, validation
    resumed = fit(
        make_model(),
        batches,
        lm_loss,
        TrainConfig(**{**base, "steps": 6, "log_every": 2, "eval_every": 3}),
        progress=False,
        resume=True,
    )
    assert [s for s, _ in resumed.train_loss] == list(range(1, 7))
    # the cosine schedule reads steps: changing them would change every learning rate after the resume
    cosine = dict(base, schedule="cosine", checkpoint_path=str(tmp_path / "cosine.pt"))
    fit(make_model(), batches, lm_loss, TrainConfig(**cosine), progress=False)
    with pytest.raises(ValueError, match=r"steps 4 -> 8"):
        fit(make_model(), batches, lm_loss, TrainConfig(**{**cosine, "steps": 8}), progress=False, resume=True)


def test_language_model_loss_with_every_target_ignored_is_zero_not_nan():
    """A batch whose targets are all IGNORE_INDEX (say a window of prompt tokens only) scores
    nothing: cross-entropy's own mean over no positions is 0 / 0 = NaN, which fit would stop on."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(V, 8), nn.Linear(8, V))
    x = torch.randint(1, V, (2, 4))
    from transformer_book.objectives import language_model_loss

    loss, count = language_model_loss()(model, (x, torch.full((2, 4), -100)))
    assert count == 0 and loss.item() == 0.0
    loss.backward()  # a graph to back-propagate through, with zero gradients
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    y = torch.randint(1, V, (2, 4))
    y[0] = -100
    loss, count = language_model_loss()(model, (x, y))
    assert count == 4
    torch.testing.assert_close(loss, F.cross_entropy(model(x)[1], y[1]))


# --------------------------------------------------------------------------------------
# Damaged files: every failure names the file and leaves the model as it was
# --------------------------------------------------------------------------------------


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def _unchanged(model, before):
    return all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_damaged_checkpoint_is_refused_naming_the_file_and_the_model_is_untouched(tmp_path):
    path = tmp_path / "run.pt"
    config = TrainConfig(steps=2, warmup_steps=1, checkpoint_path=str(path))
    fit(make_model(), batches, lm_loss, config, progress=False)
    good = path.read_bytes()
    damaged = {f"cut at {share:.1%}": good[: int(len(good) * share)] for share in (0.5, 0.9, 0.999)}
    middle = len(good) // 2
    damaged["one flipped byte"] = good[:middle] + bytes([good[middle] ^ 0x01]) + good[middle + 1 :]
    for what, data in damaged.items():
        path.write_bytes(data)
        model = make_model(seed=9)
        before = _params(model)
        with pytest.raises(ValueError, match=r"run\.pt .*(not a readable checkpoint|corrupt)") as info:
            fit(model, batches, lm_loss, config, progress=False, resume=True)
        assert _unchanged(model, before), what
        assert str(path) in str(info.value)
    # a well-formed file that misses a part, or holds the wrong kind of value
    path.write_bytes(good)
    state = read_checkpoint(path)
    for what, broken in [
        ("no optimizer", {k: v for k, v in state.items() if k != "optimizer"}),
        ("history a list", {**state, "history": []}),
        ("optimizer of another shape", {**state, "optimizer": {"state": {}, "param_groups": []}}),
    ]:
        torch.save(broken, path)
        model = make_model(seed=9)
        before = _params(model)
        with pytest.raises(ValueError, match=r"run\.pt"):
            fit(model, batches, lm_loss, config, progress=False, resume=True)
        assert _unchanged(model, before), what


def test_a_flipped_byte_in_a_saved_model_is_found_by_its_checksum(tmp_path):
    from transformer_book.checkpoints import load_model, save_model
    from transformer_book.models import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(30, 30, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1)
    )
    path = save_model(tmp_path / "m.pt", model)
    good = path.read_bytes()
    found = 0
    for offset in range(len(good) // 3, len(good) - 200, len(good) // 7):  # bytes in the weights' region
        path.write_bytes(good[:offset] + bytes([good[offset] ^ 0x10]) + good[offset + 1 :])
        with pytest.raises(ValueError, match=r"m\.pt"):
            load_model(path)
        found += 1
    assert found >= 3
    # a file written before checksums (the dict alone) still loads
    path.write_bytes(good)
    torch.save(read_checkpoint(path), tmp_path / "old.pt")
    old, _, _ = load_model(tmp_path / "old.pt")
    assert all(torch.equal(a, b) for a, b in zip(old.state_dict().values(), model.state_dict().values()))


def test_saved_files_follow_the_umask(tmp_path):
    """mkstemp creates files 0600: a model saved for others to read was readable by its owner only."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "run.pt"
        fit(
            make_model(),
            batches,
            lm_loss,
            TrainConfig(steps=1, warmup_steps=1, checkpoint_path=str(path)),
            progress=False,
        )
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_temporary_files_of_a_killed_save_are_cleaned_up(tmp_path):
    path = tmp_path / "run.pt"
    old_tmp, young_tmp = tmp_path / ".run.pt.abc123.tmp", tmp_path / ".run.pt.def456.tmp"
    old_tmp.write_bytes(b"half a checkpoint")
    young_tmp.write_bytes(b"another writer's, in progress")
    os.utime(old_tmp, (1, 1))  # written long ago: its writer is gone
    fit(make_model(), batches, lm_loss, TrainConfig(steps=1, warmup_steps=1, checkpoint_path=str(path)), progress=False)
    assert not old_tmp.exists() and young_tmp.exists()


def test_seconds_per_step_times_real_steps_and_steps_in_budget_fills_the_budget():
    from transformer_book.training import seconds_per_step, steps_in_budget

    torch.manual_seed(0)
    model = make_model()
    before = [p.detach().clone() for p in model.parameters()]
    seconds = seconds_per_step(model, batches, lm_loss, device="cpu", steps=3, warmup=1, clip_norm=1.0)
    assert 0 < seconds < 5
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it trained (a throwaway copy)
    assert steps_in_budget(100.0, 1.0) == 97 and steps_in_budget(8.0, 0.25, share=0.5, minimum=1) == 16
    assert steps_in_budget(1.0, 0.5) == 20  # at least 20 steps by default
    assert steps_in_budget(1.0, 0.5, minimum=1) == 1
    with pytest.raises(ValueError, match="step_s must be a finite real > 0"):
        steps_in_budget(10.0, 0.0)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        seconds_per_step(model, batches, lm_loss, device="cpu", steps=0)


def test_training_re_exports_nothing_that_moved():
    """The losses, schedules and model files live in objectives, schedules and checkpoints, and are
    imported from there: training offers only its own loop (issue 42)."""
    import transformer_book.training as training

    moved = [
        "load_model",
        "save_model",
        "label_smoothed_cross_entropy",
        "language_model_loss",
        "seq2seq_loss",
        "warmup_cosine",
        "warmup_inverse_sqrt",
    ]
    assert [name for name in moved if hasattr(training, name)] == []
