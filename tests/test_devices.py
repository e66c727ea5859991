"""The models and the training step on the device the tests are pointed at (``TB_TEST_DEVICE``,
default ``cpu``): CI runs them on the CPU, ``benchmarks/gpu_check.py`` with ``TB_TEST_DEVICE=cuda``
on a GPU. Every model of the shared suite gives on that device what it gives on the CPU (float32),
its cached steps equal one full pass there, the fused attention equals the explicit one under the
device's mixed precision, and a compiled mixed-precision ``fit`` trains."""

from __future__ import annotations

import os

import pytest
import torch
from test_model_suite import SPECS

from transformer_book.attention import MultiHeadAttention
from transformer_book.data import RandomWindows
from transformer_book.models import GPT, GPTConfig
from transformer_book.objectives import language_model_loss
from transformer_book.training import TrainConfig, fit, mixed_precision

DEVICE = torch.device(os.environ.get("TB_TEST_DEVICE", "cpu"))
if DEVICE.type == "cuda" and not torch.cuda.is_available():  # a setting that cannot hold is an error, not a skip
    raise RuntimeError("TB_TEST_DEVICE=cuda, but no CUDA device is available here")

pytestmark = pytest.mark.usefixtures("one_thread")
# Dynamo reads .grad of non-leaf tensors while it traces (a warning of torch's own, turned into an
# error by this suite's warnings-as-errors).
DYNAMO_GRAD_WARNING = "ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_model_computes_on_the_device_what_it_computes_on_the_cpu(name: str) -> None:
    spec = SPECS[name]
    model, inputs = spec.build().eval(), spec.inputs()
    with torch.no_grad():
        expected = spec.run(model, *inputs)
        got = spec.run(model.to(DEVICE), *(x.to(DEVICE) for x in inputs))
    assert got.device.type == DEVICE.type
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(n for n, spec in SPECS.items() if spec.cached is not None))
def test_cached_steps_equal_one_full_pass_on_the_device(name: str) -> None:
    spec = SPECS[name]
    model = spec.build().eval().to(DEVICE)
    inputs = tuple(x.to(DEVICE) for x in spec.inputs())
    with torch.no_grad():
        torch.testing.assert_close(spec.cached(model, *inputs), spec.run(model, *inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_the_fused_attention_equals_the_explicit_one_in_the_devices_precision(causal: bool) -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(64, 4).to(DEVICE).eval()
    x = torch.randn(2, 48, 64, device=DEVICE)
    dtype = mixed_precision(DEVICE)
    context = torch.autocast("cuda", dtype=dtype) if dtype is not None else torch.autocast("cpu", enabled=False)
    with torch.no_grad(), context:
        explicit, _ = attention(x, x, x, causal=causal, need_weights=True)
        fused, _ = attention(x, x, x, causal=causal, need_weights=False)
    tolerance = 2e-2 if dtype is not None else 1e-5  # half-precision inputs on a GPU
    torch.testing.assert_close(fused.float(), explicit.float(), rtol=tolerance, atol=tolerance)


@pytest.mark.filterwarnings(DYNAMO_GRAD_WARNING)
def test_a_compiled_mixed_precision_fit_trains_on_the_device() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(16, context=32, d_model=64, n_heads=4, n_layers=2, dropout=0.0))
    ids = torch.arange(2_000) % 16  # a cycle: learnable at once
    config = TrainConfig(
        steps=30, lr=3e-3, warmup_steps=3, schedule="cosine", smoothing=0.0, log_every=10, eval_every=100, compile=True
    )
    history = fit(
        model, RandomWindows(ids, 32, 8, seed=0), language_model_loss(), config, device=DEVICE, progress=False
    )
    losses = [loss for _, loss in history.train_loss]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < 0.5 * losses[0]
    assert [step for step, _ in history.compile_s] == [1]
    assert next(model.parameters()).device.type == DEVICE.type
