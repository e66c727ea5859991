"""Tests of transformer_book.pretrained: Hugging Face BERT weights in the book's BERT (chapter 15)."""

import pytest
import torch

import transformers  # the optional extra "pretrained"; requirements.txt installs it for the tests

from transformer_book.models.bert import BERTConfig
from transformer_book.pretrained import bert_config_from_hf, bert_parameter_names, load_hf_bert

pytestmark = pytest.mark.usefixtures("one_thread")


def hf_bert(**changes):
    config = transformers.BertConfig(**{**dict(vocab_size=60, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                               intermediate_size=40, max_position_embeddings=32), **changes})
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases, so that the check covers them
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p), alpha=0.1)
    return model


def batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 60, (3, 11), generator=g)
    tokens[:, 0] = 2
    tokens[1, 7:] = 0  # padding
    segments = (torch.arange(11) >= 5).long().expand(3, 11).clone()
    segments[1, 7:] = 0
    return tokens, segments


def test_random_bert_matches_transformers_to_1e5():
    theirs = hf_bert()
    ours = load_hf_bert(theirs, bert_config_from_hf(theirs.config)).eval()
    assert ours.missing_from_checkpoint == []
    tokens, segments = batch()
    with torch.no_grad():
        expected = theirs(input_ids=tokens, token_type_ids=segments, attention_mask=(tokens != 0).long(),
                          output_hidden_states=True)
        out = ours(tokens, segments)
    torch.testing.assert_close(out.hidden, expected.hidden_states[-1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.mlm_logits, expected.prediction_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.nsp_logits, expected.seq_relationship_logits, rtol=1e-5, atol=1e-5)


def test_every_parameter_is_mapped_once():
    theirs = hf_bert()
    names = bert_parameter_names(2)
    hf_names = set(theirs.state_dict()) - {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert set(names) == hf_names
    ours = load_hf_bert(theirs, bert_config_from_hf(theirs.config))
    assert sorted(names.values()) == sorted(ours.state_dict())


def test_a_bare_bert_model_loads_without_its_heads():
    theirs = hf_bert()
    base = transformers.BertModel(theirs.config).eval()
    base.load_state_dict(theirs.bert.state_dict())
    ours = load_hf_bert(base.state_dict(), bert_config_from_hf(theirs.config)).eval()
    assert set(ours.missing_from_checkpoint) == {"mlm_transform.weight", "mlm_transform.bias", "mlm_norm.gamma",
                                                 "mlm_norm.beta", "mlm_bias", "nsp.weight", "nsp.bias"}
    tokens, segments = batch()
    with torch.no_grad():
        expected = base(input_ids=tokens, token_type_ids=segments, attention_mask=(tokens != 0).long())
        torch.testing.assert_close(ours.encode(tokens, segments), expected.last_hidden_state, rtol=1e-5, atol=1e-5)


def test_mismatches_are_named():
    theirs = hf_bert()
    with pytest.raises(ValueError, match="has shape"):
        load_hf_bert(theirs, bert_config_from_hf(theirs.config, d_ff=48))
    with pytest.raises(ValueError, match="does not know"):
        load_hf_bert(theirs, bert_config_from_hf(theirs.config, n_layers=1))
    with pytest.raises(ValueError, match="lacks encoder weights"):
        load_hf_bert(theirs, bert_config_from_hf(theirs.config, n_layers=3))
    with pytest.raises(ValueError, match="exact GELU"):
        bert_config_from_hf(transformers.BertConfig(hidden_act="relu"))
    with pytest.raises(ValueError, match="BERTConfig"):
        load_hf_bert(theirs, dict(vocab_size=60))
    assert isinstance(bert_config_from_hf(theirs.config), BERTConfig)
