"""Files the package writes and reads back, under faults and concurrency (issue 41): a save that
fails part-way (a full disk) leaves the previous file whole and names the file; a reader never
sees a half-written tokenizer; two writers of one path do not silently replace each other's file;
a damaged file is named in the error; a model adapted with LoRA is not saved in a form that cannot
be loaded again."""

from __future__ import annotations

import errno
import re
import threading

import pytest
import torch

from transformer_book import atomic, checkpoints
from transformer_book.lora import apply_lora, merge_lora
from transformer_book.models import BERT, GPT, BERTConfig, GPTConfig
from transformer_book.models.finetuning import SequenceClassifier
from transformer_book.tokenizers.bytebpe import ByteLevelBPE
from transformer_book.tokenizers.subword import SubwordTokenizer
from transformer_book.tokenizers.wordpiece import WordPieceTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = [f"sentence number {i} with some words and more words {i % 7}" for i in range(300)]


def _tokenizers() -> dict[str, tuple[object, object, type]]:
    """Two different tokenizers of each kind, and the class that loads them."""
    return {
        "ByteLevelBPE": (ByteLevelBPE.train(TEXTS, 300), ByteLevelBPE.train(TEXTS, 320), ByteLevelBPE),
        "WordPieceTokenizer": (
            WordPieceTokenizer.train(TEXTS, vocab_size=80, min_frequency=1),
            WordPieceTokenizer.train(TEXTS, vocab_size=90, min_frequency=1),
            WordPieceTokenizer,
        ),
        "SubwordTokenizer": (
            SubwordTokenizer.train(TEXTS, vocab_size=60),
            SubwordTokenizer.train(TEXTS, vocab_size=70),
            SubwordTokenizer,
        ),
    }


@pytest.fixture(scope="module")
def tokenizers():
    return _tokenizers()


def _disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write through the atomic writer fails as a full disk does, after the bytes were handed over."""

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)


def _gpt(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=20, context=8, d_model=8, n_heads=2, n_layers=1, dropout=0.0)).eval()


@pytest.mark.parametrize("kind", ["ByteLevelBPE", "WordPieceTokenizer", "SubwordTokenizer"])
def test_a_failed_tokenizer_save_keeps_the_previous_file(tokenizers, kind, tmp_path, monkeypatch):
    first, second, cls = tokenizers[kind]
    path = tmp_path / "tokenizer.file"
    first.save(path)
    before = path.read_bytes()
    _disk_full(monkeypatch)
    with pytest.raises(OSError, match=f"could not write {re.escape(str(path))}.*previous file.*unchanged") as info:
        second.save(path)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert path.read_bytes() == before and len(cls.load(path)) == len(first)
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.file"]  # no temporary file left


def test_a_failed_model_save_keeps_the_previous_file_and_names_it(tmp_path, monkeypatch):
    path = tmp_path / "model.pt"
    checkpoints.save_model(path, _gpt(0))
    _disk_full(monkeypatch)
    with pytest.raises(OSError, match=f"could not write {re.escape(str(path))}"):
        checkpoints.save_model(path, _gpt(1))
    monkeypatch.undo()
    model, _, _ = checkpoints.load_model(path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), _gpt(0).state_dict().values()))


@pytest.mark.parametrize("kind", ["ByteLevelBPE", "WordPieceTokenizer"])
def test_a_reader_never_sees_a_half_written_tokenizer(tokenizers, kind, tmp_path):
    first, second, cls = tokenizers[kind]
    path = tmp_path / "tokenizer.json"
    first.save(path)
    sizes, stop, errors = {len(first), len(second)}, threading.Event(), []

    def write() -> None:
        for i in range(60):
            (second if i % 2 else first).save(path)
        stop.set()

    writer = threading.Thread(target=write)
    writer.start()
    loads = 0
    while not stop.is_set() or loads < 20:
        try:
            assert len(cls.load(path)) in sizes
        except Exception as err:  # any failure of a read is the defect
            errors.append(err)
        loads += 1
    writer.join()
    assert not errors, errors[:3]


def test_save_model_refuses_a_path_that_a_training_run_holds(tmp_path):
    path = tmp_path / "run.pt"
    checkpoints.save_model(path, _gpt(0))
    before = path.read_bytes()
    with checkpoints.writer_lock(path, busy="fit: another run is training"):  # as fit holds it for its run
        with pytest.raises(
            RuntimeError, match=f"save_model: {re.escape(str(path))} is being written by another writer"
        ):
            checkpoints.save_model(path, _gpt(1))
    assert path.read_bytes() == before
    checkpoints.save_model(path, _gpt(1))  # free again once the run ends


def test_fit_refuses_a_checkpoint_path_that_a_save_holds(tmp_path):
    from transformer_book import objectives, training

    path = tmp_path / "run.pt"
    config = training.TrainConfig(steps=1, lr=1e-3, checkpoint_path=str(path))
    with checkpoints.writer_lock(path, busy="save_model: busy"):
        with pytest.raises(
            RuntimeError, match="fit: another run is training with checkpoint_path .*or a save_model is writing it"
        ):
            training.fit(
                _gpt(),
                lambda s: (torch.zeros(1, 8, dtype=torch.long),) * 2,
                objectives.language_model_loss(),
                config,
                progress=False,
            )


def test_damaged_wordpiece_and_sentencepiece_files_are_named(tokenizers, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(ValueError, match=f"WordPieceTokenizer.load: {re.escape(str(path))} is not UTF-8 text"):
        WordPieceTokenizer.load(path)
    path.write_text(tokenizers["WordPieceTokenizer"][0].to_str()[:-50])
    with pytest.raises(ValueError, match=f"WordPieceTokenizer.load: {re.escape(str(path))}: .*not a tokenizer's JSON"):
        WordPieceTokenizer.load(path)
    model = tmp_path / "spm.model"
    model.write_bytes(tokenizers["SubwordTokenizer"][0].to_bytes()[:100])
    with pytest.raises(
        ValueError, match=f"SubwordTokenizer.load: {re.escape(str(model))}: .*not a valid SentencePiece model"
    ):
        SubwordTokenizer.load(model)


def _classifier() -> SequenceClassifier:
    torch.manual_seed(0)
    return SequenceClassifier(
        BERT(BERTConfig(30, max_len=8, d_model=8, n_heads=2, n_layers=1, dropout=0.0)), 2, dropout=0.0
    )


def test_a_model_with_lora_layers_is_refused_and_its_merge_saves_and_loads(tmp_path):
    bert = apply_lora(_classifier().bert, r=2)
    for layer in bert.modules():  # a trained-looking update, so that merging matters
        if hasattr(layer, "lora_b"):
            torch.nn.init.normal_(layer.lora_b, std=0.5)
    path = tmp_path / "bert.pt"
    with pytest.raises(ValueError, match=r"LoRA layers: save merge_lora\(model\)"):
        checkpoints.save_model(path, bert)
    assert not path.exists()
    ids = torch.randint(1, 30, (2, 6), generator=torch.Generator().manual_seed(0))
    expected = bert.eval()(ids)
    checkpoints.save_model(path, merge_lora(bert))
    loaded, _, _ = checkpoints.load_model(path)
    torch.testing.assert_close(loaded(ids), expected, rtol=1e-5, atol=1e-5)
