"""The GPU paths of training, held on the CPU: the mixed precision a GPU gets from its compute
capability (faked here), which runs compile, determinism scoped to fit's steps, the compiling
step left out of the time budget, and the steps that compile into one graph (no host wait
inside the compiled step; BERT's breaks only where it selects the masked positions)."""

from __future__ import annotations

import pytest
import torch

from transformer_book import checks
from transformer_book.contracts import IGNORE_INDEX, PretrainingBatch
from transformer_book.data import RandomWindows
from transformer_book.models import BERT, GPT, BERTConfig, GPTConfig, ModernGPT, ModernGPTConfig
from transformer_book.models.bert import bert_loss
from transformer_book.objectives import language_model_loss
from transformer_book.training import (
    COMPILE_MIN_STEPS,
    TrainConfig,
    _LossModule,
    compiles,
    fit,
    mixed_precision,
    seconds_per_step,
)

pytestmark = pytest.mark.usefixtures("one_thread")

# Dynamo reads .grad of non-leaf tensors while it traces (a warning of torch's own, turned into an
# error by this suite's warnings-as-errors).
DYNAMO_GRAD_WARNING = "ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"


@pytest.mark.parametrize(
    "capability, expected",
    [((7, 5), torch.float16), ((7, 0), torch.float16), ((8, 0), torch.bfloat16), ((9, 0), torch.bfloat16)],
)
def test_mixed_precision_follows_the_compute_capability_not_emulation(monkeypatch, capability, expected):
    # a T4 (7.5) emulates bfloat16 and is_bf16_supported() says yes there: it must not be asked
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: pytest.fail("asked is_bf16_supported"))
    assert mixed_precision(torch.device("cuda")) is expected
    assert mixed_precision("cuda:0") is expected
    assert mixed_precision("cuda", enabled=False) is None


def test_mixed_precision_is_off_the_gpu():
    assert mixed_precision("cpu") is None
    assert mixed_precision(torch.device("cpu"), enabled=True) is None


def test_short_runs_do_not_compile_by_default():
    short, long = TrainConfig(steps=COMPILE_MIN_STEPS - 1), TrainConfig(steps=COMPILE_MIN_STEPS)
    assert compiles(long, "cuda") and not compiles(short, "cuda")
    assert not compiles(long, "cpu")  # compile=None never compiles on the CPU
    assert compiles(TrainConfig(steps=10, compile=True), "cpu")
    assert not compiles(TrainConfig(steps=50_000, compile=False), "cuda")


def _tiny_gpt(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(20, context=16, d_model=32, n_heads=2, n_layers=1, dropout=0.0))


IDS = torch.randint(0, 20, (400,), generator=torch.Generator().manual_seed(1))


def test_fit_runs_its_steps_with_deterministic_algorithms_off_unless_asked(restore_determinism):
    seen = []

    def recording_loss(model, batch):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return language_model_loss()(model, batch)

    torch.use_deterministic_algorithms(True, warn_only=True)  # as seed_everything leaves a chapter
    config = dict(steps=2, warmup_steps=1, log_every=1, eval_every=100, compile=False)
    fit(_tiny_gpt(), RandomWindows(IDS, 16, 4, seed=0), recording_loss, TrainConfig(**config), progress=False)
    assert seen == [False, False]
    assert torch.are_deterministic_algorithms_enabled()  # the caller's setting is back
    assert torch.is_deterministic_algorithms_warn_only_enabled()

    seen.clear()
    torch.use_deterministic_algorithms(False)
    fit(
        _tiny_gpt(),
        RandomWindows(IDS, 16, 4, seed=0),
        recording_loss,
        TrainConfig(**config, deterministic=True),
        progress=False,
    )
    assert seen == [True, True] and not torch.are_deterministic_algorithms_enabled()


@pytest.fixture
def restore_determinism():
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.mark.filterwarnings(DYNAMO_GRAD_WARNING)
def test_the_compiling_step_is_left_out_of_the_training_time():
    config = TrainConfig(steps=3, warmup_steps=1, log_every=1, eval_every=100, compile=True)
    history = fit(_tiny_gpt(), RandomWindows(IDS, 16, 4, seed=0), language_model_loss(), config, progress=False)
    assert [step for step, _ in history.compile_s] == [1] and history.compile_s[0][1] > 0
    # the first logged time is that of no training step at all; the next two add their own
    assert history.train_time_s[0] == (1, 0.0)
    assert 0.0 < history.train_time_s[1][1] < history.train_time_s[2][1]
    assert history.train_time_s[2][1] < history.compile_s[0][1]  # compiling costs more than two steps here

    eager = fit(
        _tiny_gpt(),
        RandomWindows(IDS, 16, 4, seed=0),
        language_model_loss(),
        TrainConfig(steps=3, warmup_steps=1, log_every=1, eval_every=100, compile=False),
        progress=False,
    )
    assert eager.compile_s == [] and eager.train_time_s[0][1] > 0.0


def _graphs(module: torch.nn.Module, batch) -> tuple[int, int]:
    torch._dynamo.reset()
    explained = torch._dynamo.explain(module)(batch)
    return explained.graph_count, explained.graph_break_count


@pytest.mark.filterwarnings(DYNAMO_GRAD_WARNING)
@pytest.mark.parametrize("kind", ["GPT", "ModernGPT"])
def test_a_language_model_step_compiles_into_one_graph(kind):
    # no value of a tensor is read back inside the step: the token check, the loss's count
    torch.manual_seed(0)
    model = (
        _tiny_gpt()
        if kind == "GPT"
        else ModernGPT(ModernGPTConfig(20, context=16, d_model=32, n_heads=2, n_layers=1, n_kv_heads=1))
    )
    batch = RandomWindows(IDS, 16, 4, seed=0)(0)
    assert _graphs(_LossModule(model, language_model_loss()), batch) == (1, 0)


@pytest.mark.filterwarnings(DYNAMO_GRAD_WARNING)
def test_a_bert_pretraining_step_breaks_only_where_the_masked_positions_are_selected():
    # the counts stay tensors and the no-selection check is left out while compiling; what remains
    # are the two selections hidden[selected] and targets[selected], whose size is known only at run
    # time: the price of sending about 15% of the positions through the MLM head instead of all
    torch.manual_seed(0)
    model = BERT(BERTConfig(vocab_size=30, max_len=16, d_model=16, n_heads=2, n_layers=2, dropout=0.0))
    tokens = torch.randint(5, 30, (3, 9), generator=torch.Generator().manual_seed(0))
    targets = torch.full((3, 9), IGNORE_INDEX)
    targets[:, 1::3] = tokens[:, 1::3]
    segments = (torch.arange(9) >= 4).long().expand(3, 9).clone()
    batch = PretrainingBatch(tokens, segments, targets, torch.tensor([1, 0, 1]))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(_LossModule(model, bert_loss()))(batch)
    assert (explained.graph_count, explained.graph_break_count) == (3, 2)
    assert all("aten.nonzero" in reason.reason for reason in explained.break_reasons)
    loss, count = torch.compile(_LossModule(model, bert_loss()))(batch)
    eager_loss, eager_count = bert_loss()(model, batch)
    torch.testing.assert_close(loss, eager_loss)
    assert int(count) == int(eager_count) == 9


def test_checks_that_read_values_are_skipped_only_while_compiling():
    assert not checks.compiling()
    with pytest.raises(ValueError, match=r"GPT: tokens hold ids in \[0, 25\], outside the vocabulary \[0, 20\)"):
        _tiny_gpt()(torch.tensor([[0, 25]]))
    with pytest.raises(ValueError, match="language_model_loss: 1 target id"):
        language_model_loss()(_tiny_gpt(), (torch.tensor([[0, 1]]), torch.tensor([[1, 20]])))


@pytest.mark.filterwarnings(DYNAMO_GRAD_WARNING)
def test_the_compiled_loss_is_the_eager_loss_and_counts_the_same_positions():
    model = _tiny_gpt()
    x, y = RandomWindows(IDS, 16, 4, seed=0)(0)
    y = y.clone()
    y[0, :5] = -100  # IGNORE_INDEX: not scored
    eager_loss, eager_count = language_model_loss(smoothing=0.1)(model, (x, y))
    compiled = torch.compile(_LossModule(model, language_model_loss(smoothing=0.1)))
    loss, count = compiled((x, y))
    assert int(count) == eager_count == y.numel() - 5
    torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings(DYNAMO_GRAD_WARNING)
def test_seconds_per_step_times_the_compiled_step_after_its_warm_up():
    batches = RandomWindows(IDS, 16, 4, seed=0)
    seconds = seconds_per_step(_tiny_gpt(), batches, language_model_loss(), device="cpu", steps=2, compile=True)
    assert seconds > 0
    with pytest.raises(ValueError, match="warmup >= 1"):
        seconds_per_step(_tiny_gpt(), batches, language_model_loss(), device="cpu", warmup=0, compile=True)
