"""Tests of the runtime helpers: profiles, device choice, seeding, summaries,
and the promise that importing the package changes no global state."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import transformer_book
import transformer_book.attention
from transformer_book.runtime import (
    by_profile,
    environment_summary,
    profile,
    seed_everything,
    select_device,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def clean_env(monkeypatch):
    """No TB_* variable leaks in from the caller's environment."""
    for name in ("TB_PROFILE", "TB_DEVICE", "TB_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def restore_global_state():
    """seed_everything changes process-wide state on purpose; put it all back afterwards."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    torch_rng = torch.get_rng_state()
    np_rng = np.random.get_state()
    py_rng = random.getstate()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    if cublas is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas
    torch.set_rng_state(torch_rng)
    np.random.set_state(np_rng)
    random.setstate(py_rng)


# --------------------------------------------------------------------------------------
# profile
# --------------------------------------------------------------------------------------


def test_profile_defaults_to_full(clean_env):
    assert profile() == "full"
    assert by_profile(full=100, quick=5) == 100


def test_profile_quick_from_environment(clean_env):
    clean_env.setenv("TB_PROFILE", "quick")
    assert profile() == "quick"
    assert by_profile(full=100, quick=5) == 5
    clean_env.setenv("TB_PROFILE", "  QUICK ")  # case and surrounding blanks are forgiven
    assert profile() == "quick"
    clean_env.setenv("TB_PROFILE", "full")
    assert profile() == "full"


def test_profile_invalid_value_raises_naming_it(clean_env):
    clean_env.setenv("TB_PROFILE", "turbo")
    with pytest.raises(ValueError, match="TB_PROFILE.*'turbo'"):
        profile()
    with pytest.raises(ValueError, match="'turbo'"):
        by_profile(full=1, quick=2)


# --------------------------------------------------------------------------------------
# select_device
# --------------------------------------------------------------------------------------


def test_select_device_default(clean_env):
    device = select_device()
    assert isinstance(device, torch.device)
    if torch.cuda.is_available():
        assert device.type == "cuda"
    elif not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        assert device == torch.device("cpu")


def test_select_device_cpu_by_name_and_by_environment(clean_env):
    assert select_device("cpu") == torch.device("cpu")
    clean_env.setenv("TB_DEVICE", "cpu")
    assert select_device() == torch.device("cpu")


def test_select_device_preference_beats_environment(clean_env):
    clean_env.setenv("TB_DEVICE", "no-such-device")
    assert select_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="no-such-device"):
        select_device()


def test_select_device_cuda(clean_env):
    if torch.cuda.is_available():
        assert select_device("cuda").type == "cuda"
    else:
        with pytest.raises(ValueError, match="'cuda'.*not available"):
            select_device("cuda")
        clean_env.setenv("TB_DEVICE", "cuda:0")
        with pytest.raises(ValueError, match="'cuda:0'"):
            select_device()


@pytest.mark.parametrize("name", ["banana", "cpu:x", "cuda::1"])
def test_select_device_nonsense_raises(clean_env, name):
    with pytest.raises(ValueError, match="unknown device " + re.escape(repr(name))):
        select_device(name)


# --------------------------------------------------------------------------------------
# seed_everything
# --------------------------------------------------------------------------------------


def _draws():
    return (
        torch.rand(5).tolist(),
        np.random.rand(5).tolist(),
        [random.random() for _ in range(5)],
    )


def test_seed_everything_repeats_all_three_generators(restore_global_state):
    seed_everything(123)
    first = _draws()
    seed_everything(123)
    second = _draws()
    assert first == second
    seed_everything(124)
    assert _draws() != first


def test_seed_everything_accepts_seeds_beyond_32_bits(restore_global_state):
    seed_everything(2**40 + 7)
    first = _draws()
    seed_everything(2**40 + 7)
    assert _draws() == first


def test_seed_everything_deterministic_flag(restore_global_state):
    torch.use_deterministic_algorithms(False)
    seed_everything(0, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()
    seed_everything(0)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG")


def test_seed_everything_sets_threads(restore_global_state):
    seed_everything(0, threads=1)
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3", None])
def test_seed_everything_rejects_bad_seed(restore_global_state, seed):
    with pytest.raises(ValueError, match="seed.*" + re.escape(repr(seed))):
        seed_everything(seed)


@pytest.mark.parametrize("threads", [0, -2, 1.0, True])
def test_seed_everything_rejects_bad_threads(restore_global_state, threads):
    before = torch.get_num_threads()
    with pytest.raises(ValueError, match="threads.*" + re.escape(repr(threads))):
        seed_everything(0, threads=threads)
    assert torch.get_num_threads() == before


# --------------------------------------------------------------------------------------
# environment_summary
# --------------------------------------------------------------------------------------


def _summary_rows(text):
    rows = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" : ")
        assert sep, line
        rows[key.strip()] = value
    return rows


def test_environment_summary_contents(clean_env):
    clean_env.setenv("TB_PROFILE", "quick")
    rows = _summary_rows(environment_summary(torch.device("cpu")))
    assert rows["transformer_book"] == transformer_book.__version__ == "0.1.0"
    assert rows["torch"] == torch.__version__
    assert rows["numpy"] == np.__version__
    assert rows["device"] == "cpu"
    assert rows["profile"] == "quick"
    assert rows["torch threads"] == str(torch.get_num_threads())


def test_environment_summary_default_device_and_data_dir(clean_env, tmp_path):
    clean_env.setenv("TB_DEVICE", "cpu")
    clean_env.setenv("TB_DATA_DIR", str(tmp_path))
    rows = _summary_rows(environment_summary())
    assert rows["device"] == "cpu"
    assert rows["profile"] == "full"
    assert rows["data"] == "a local copy, from $TB_DATA_DIR"
    assert str(tmp_path) not in environment_summary()  # the machine's path is not printed
    clean_env.delenv("TB_DATA_DIR")
    assert _summary_rows(environment_summary())["data"] == "downloaded from the pinned addresses into the cache"


# --------------------------------------------------------------------------------------
# Importing the package has no side effects
# --------------------------------------------------------------------------------------

_IMPORT_PROBE = r"""
import sys, warnings, random
# third-party dependencies first: scipy.sparse.linalg and scipy.stats add their own warning filters on import
import numpy as np, torch, scipy.sparse, scipy.sparse.linalg, scipy.stats
filters = list(warnings.filters)
torch_rng = torch.get_rng_state().clone()
np_rng = np.random.get_state()[1].copy()
py_rng = random.getstate()
threads = torch.get_num_threads()

import transformer_book
import transformer_book.attention, transformer_book.masks, transformer_book.runtime
import transformer_book.plotting, transformer_book.tokenizers.text, transformer_book.embeddings, transformer_book.data

assert list(warnings.filters) == filters, [f for f in warnings.filters if f not in filters]
assert torch.equal(torch.get_rng_state(), torch_rng), "torch RNG state changed"
assert (np.random.get_state()[1] == np_rng).all(), "numpy RNG state changed"
assert random.getstate() == py_rng, "random state changed"
assert torch.get_num_threads() == threads, "thread count changed"
assert not torch.are_deterministic_algorithms_enabled(), "deterministic algorithms switched on"
assert "matplotlib.pyplot" not in sys.modules, "matplotlib.pyplot imported"
print("OK")
"""


def test_importing_the_package_changes_no_global_state():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TB_")}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"


def test_machine_description_names_the_cpu_model_and_platform():
    import platform

    from transformer_book.runtime import machine_description

    text = machine_description(torch.device("cpu"))
    assert text.endswith(f"({platform.system()} {platform.machine()})")
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        models = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
        ]
        if models:
            assert text.startswith(models[0])
