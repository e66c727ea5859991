"""Tests of transformer_book.pretrained: Hugging Face BERT and GPT-2 weights in the book's models (chapter 15)."""

import pytest
import torch
import transformers  # the optional extra "pretrained"; requirements.txt installs it for the tests

from transformer_book.models.bert import BERTConfig
from transformer_book.pretrained import (
    bert_config_from_hf,
    bert_parameter_names,
    gpt_config_from_hf,
    load_hf_bert,
    load_hf_gpt2,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def seeded(model_class, config):
    """A seeded model in eval mode with non-trivial LayerNorms and biases, so that the checks cover them."""
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p), alpha=0.1)
    return model


def hf_bert(**changes):
    config = transformers.BertConfig(
        **{
            **dict(
                vocab_size=60,
                hidden_size=24,
                num_hidden_layers=2,
                num_attention_heads=3,
                intermediate_size=40,
                max_position_embeddings=32,
            ),
            **changes,
        }
    )
    return seeded(transformers.BertForPreTraining, config)


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
    assert ours.config.position == "learned"  # BERT's table, under the book's name for it
    assert torch.equal(ours.positional.embedding.weight, theirs.bert.embeddings.position_embeddings.weight)
    tokens, segments = batch()
    with torch.no_grad():
        expected = theirs(
            input_ids=tokens, token_type_ids=segments, attention_mask=(tokens != 0).long(), output_hidden_states=True
        )
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
    assert set(ours.missing_from_checkpoint) == {
        "mlm_transform.weight",
        "mlm_transform.bias",
        "mlm_norm.gamma",
        "mlm_norm.beta",
        "mlm_bias",
        "nsp.weight",
        "nsp.bias",
    }
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


def hf_gpt2(**changes):
    config = transformers.GPT2Config(
        **{
            **dict(vocab_size=50, n_positions=16, n_embd=12, n_layer=2, n_head=3, bos_token_id=0, eos_token_id=0),
            **changes,
        }
    )
    return seeded(transformers.GPT2LMHeadModel, config)


def test_random_gpt2_matches_transformers_to_1e5():
    theirs = hf_gpt2()
    ours = load_hf_gpt2(theirs, gpt_config_from_hf(theirs.config)).eval()
    tokens = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = theirs(input_ids=tokens).logits
        torch.testing.assert_close(ours(tokens), expected, rtol=1e-5, atol=1e-5)
    assert ours.output.weight is ours.embedding.weight


def test_gpt2_loads_from_a_bare_model_state_dict_and_checks_its_config():
    theirs = hf_gpt2()
    config = gpt_config_from_hf(theirs.config)
    ours = load_hf_gpt2(theirs.transformer.state_dict(), config).eval()
    tokens = torch.randint(0, 50, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), theirs(input_ids=tokens).logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="gelu_tanh"):
        load_hf_gpt2(theirs, gpt_config_from_hf(theirs.config, activation="gelu"))
    with pytest.raises(ValueError, match="would get shape"):
        load_hf_gpt2(theirs, gpt_config_from_hf(theirs.config, d_ff=20))
    with pytest.raises(ValueError, match="lacks"):
        load_hf_gpt2(theirs, gpt_config_from_hf(theirs.config, n_layers=3))
    with pytest.raises(ValueError, match="does not exist"):
        load_hf_gpt2(theirs, gpt_config_from_hf(theirs.config, n_layers=1))
    with pytest.raises(ValueError, match="activation_function"):
        gpt_config_from_hf(transformers.GPT2Config(activation_function="relu"))
