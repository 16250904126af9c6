"""The BERT model: shapes, presets, init, sparse MLM head, padding, task heads, Hugging Face parity, learning."""

import pytest
import torch

from bertwb.errors import BertwbError
from bertwb.model.bert import PRESETS, BertConfig, BertForPreTraining, BertModel
from bertwb.model.heads import (
    MODEL_KINDS,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    default_label_names,
    new_model,
)
from bertwb.model.hf_names import (
    bertwb_name,
    config_from_hf_dict,
    from_hf_state_dict,
    hf_config_dict,
    hf_name,
    kind_of,
    label_names_from_hf_dict,
    to_hf_state_dict,
)
from bertwb.tasks import losses as task_losses

VOCAB = 1000


def small_config(**overrides) -> BertConfig:
    # deliberately not a preset (H64 A2 I256) so nothing relies on preset numbers
    sizes = dict(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256)
    return BertConfig(**{**sizes, **overrides})


def make_batch(batch=3, seq=12, seed=0):
    """Random ids with [CLS]=2 first, two segments, and trailing padding in every row but the first."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB, (batch, seq), generator=gen)
    input_ids[:, 0] = 2
    token_type_ids = torch.zeros(batch, seq, dtype=torch.long)
    token_type_ids[:, seq // 2 :] = 1
    lengths = torch.tensor([seq] + [seq - 3 * (row + 1) for row in range(batch - 1)])
    attention_mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()  # (B, T)
    input_ids[attention_mask == 0] = 0
    token_type_ids[attention_mask == 0] = 0
    return input_ids, token_type_ids, attention_mask, lengths


def random_model(config: BertConfig, seed: int = 0, kind: str = "pretraining",
                 label_names: list[str] | None = None) -> torch.nn.Module:
    """A model whose biases and LayerNorms are random too, so a wrongly mapped one shows up."""
    torch.manual_seed(seed)
    model = new_model(config, kind, label_names)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model.eval()


@pytest.mark.parametrize("use_mask", [False, True])
def test_output_shapes_dense_and_sparse(use_mask):
    model = BertForPreTraining(small_config()).eval()
    input_ids, token_type_ids, attention_mask, _ = make_batch(batch=3, seq=12)
    mask = attention_mask if use_mask else None

    dense = model(input_ids, token_type_ids, mask)
    assert dense.mlm_logits.shape == (3, 12, VOCAB)
    assert dense.nsp_logits.shape == (3, 2)
    assert dense.hidden_states.shape == (3, 12, 64)
    assert dense.pooled.shape == (3, 64)

    masked_positions = torch.tensor([1, 4, 13, 30, 31])  # ragged: 2 in row 0, 1 in row 1, 2 in row 2
    sparse = model(input_ids, token_type_ids, mask, masked_positions=masked_positions)
    assert sparse.mlm_logits.shape == (5, VOCAB)
    assert sparse.nsp_logits.shape == (3, 2)


def test_under_bf16_autocast_the_vocabulary_scores_are_bf16_with_the_bias_added():
    """The GPU check (H200) caught an fp32 bias widening the bf16 scores to fp32 under autocast."""
    model = random_model(small_config())
    input_ids, token_type_ids, attention_mask, _ = make_batch()
    masked_positions = torch.tensor([3, 5, 12])
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            scores = model(input_ids, token_type_ids, attention_mask, masked_positions).mlm_logits
        plain = model(input_ids, token_type_ids, attention_mask, masked_positions).mlm_logits
    assert scores.dtype == torch.bfloat16 and plain.dtype == torch.float32
    torch.testing.assert_close(scores.float(), plain, atol=0.05, rtol=0.02)  # the bias is in: bf16 rounding apart


def test_presets_have_the_table_numbers():
    table = {  # name: (layers, hidden, heads), Turc et al. 2019 / Devlin et al. 2019
        "tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
        "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16),
    }
    assert set(PRESETS) == set(table)
    for name, (layers, hidden, heads) in table.items():
        config = BertConfig.from_preset(name, vocab_size=30522)
        assert (config.num_layers, config.hidden_size, config.num_heads) == (layers, hidden, heads)
        assert config.intermediate_size == 4 * hidden
        assert config.max_position_embeddings == 512
        assert config.vocab_size == 30522

    tiny = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=VOCAB))
    assert len(tiny.bert.layers) == 2
    assert tiny.bert.embeddings.tokens.weight.shape == (VOCAB, 128)


def test_preset_overrides_and_errors():
    config = BertConfig.from_preset("mini", vocab_size=VOCAB, num_layers=6, hidden_dropout=0.0)
    assert (config.num_layers, config.hidden_size, config.hidden_dropout) == (6, 256, 0.0)
    with pytest.raises(BertwbError, match="unknown model preset 'huge'"):
        BertConfig.from_preset("huge", vocab_size=VOCAB)
    with pytest.raises(BertwbError, match="not divisible"):
        small_config(num_heads=3)


def test_init_follows_bert():
    model = BertForPreTraining(small_config(intermediate_size=1024))
    up = model.bert.layers[0].ffn.up
    assert abs(up.weight.std().item() - 0.02) < 0.001  # 65k samples
    assert abs(model.bert.embeddings.tokens.weight.std().item() - 0.02) < 0.001
    assert torch.count_nonzero(up.bias) == 0
    assert torch.count_nonzero(model.mlm_head.bias) == 0
    norm = model.bert.layers[0].attn_norm
    assert torch.all(norm.weight == 1) and torch.all(norm.bias == 0)
    # the padding row is an ordinary row
    assert model.bert.embeddings.tokens.weight[0].abs().sum() > 0
    # weight tying: the decoder is the word embedding matrix itself
    assert model.mlm_head.decoder.weight is model.bert.embeddings.tokens.weight


def test_sparse_head_equals_dense_head_gathered():
    model = random_model(small_config())
    input_ids, token_type_ids, attention_mask, _ = make_batch()
    masked_positions = torch.tensor([3, 5, 12, 20, 25, 26])
    with torch.no_grad():
        sparse = model(input_ids, token_type_ids, attention_mask, masked_positions)
        dense = model(input_ids, token_type_ids, attention_mask)
    gathered = dense.mlm_logits.reshape(-1, VOCAB)[masked_positions]  # (B, T, V) -> (B*T, V) -> (n, V)
    torch.testing.assert_close(sparse.mlm_logits, gathered, atol=1e-5, rtol=1e-5)


def test_padded_batch_matches_sequences_run_alone():
    model = random_model(small_config())
    input_ids, token_type_ids, attention_mask, lengths = make_batch(batch=3, seq=12)
    with torch.no_grad():
        batched = model(input_ids, token_type_ids, attention_mask)
        for row, length in enumerate(lengths.tolist()):
            alone = model(input_ids[row : row + 1, :length], token_type_ids[row : row + 1, :length])
            close = dict(atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(batched.hidden_states[row, :length], alone.hidden_states[0], **close)
            torch.testing.assert_close(batched.mlm_logits[row, :length], alone.mlm_logits[0], **close)
            torch.testing.assert_close(batched.nsp_logits[row], alone.nsp_logits[0], **close)
        # and the mask matters: without it the padded rows change
        unmasked = model(input_ids, token_type_ids)
    assert not torch.allclose(unmasked.pooled[1], batched.pooled[1], atol=1e-4)


def test_backbone_without_pooler_and_encode():
    config = small_config()
    backbone = BertModel(config, with_pooler=False)
    hidden_states, pooled = backbone(torch.tensor([[2, 10, 11, 3]]))
    assert hidden_states.shape == (1, 4, 64) and pooled is None
    assert not any("pooler" in name for name, _ in backbone.named_parameters())
    model = random_model(config)
    input_ids, token_type_ids, attention_mask, _ = make_batch()
    with torch.no_grad():
        hidden_states, pooled = model.encode(input_ids, token_type_ids, attention_mask)
        full = model(input_ids, token_type_ids, attention_mask)
    torch.testing.assert_close(hidden_states, full.hidden_states)
    torch.testing.assert_close(pooled, full.pooled)


def test_name_table_round_trips():
    for kind in MODEL_KINDS:
        model = new_model(small_config(), kind, ["a", "b", "c"])
        for name in model.state_dict():
            assert bertwb_name(hf_name(name)) == name
    assert hf_name("span_head.weight") == "qa_outputs.weight"
    with pytest.raises(KeyError):
        hf_name("bert.not_a_module.weight")


def test_config_round_trips_through_hf_dict():
    config = BertConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12, intermediate_size=1536,
                        max_position_embeddings=256, hidden_dropout=0.05, layer_norm_eps=1e-7,
                        classifier_dropout=0.3)
    d = hf_config_dict(config)
    assert d["architectures"] == ["BertForPreTraining"] and d["model_type"] == "bert" and d["hidden_act"] == "gelu"
    assert "id2label" not in d and d["classifier_dropout"] == 0.3
    assert d["num_hidden_layers"] == 6 and d["num_attention_heads"] == 12 and d["hidden_dropout_prob"] == 0.05
    assert config_from_hf_dict(d) == config
    with pytest.raises(BertwbError, match="hidden_act"):
        config_from_hf_dict({**d, "hidden_act": "relu"})
    with pytest.raises(BertwbError, match="num_hidden_layers"):
        config_from_hf_dict({k: v for k, v in d.items() if k != "num_hidden_layers"})


# --- Hugging Face parity ---------------------------------------------------------------------------------


def hf_model_for(config: BertConfig, attn_implementation: str):
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.BertConfig(**hf_config_dict(config))
    hf_config._attn_implementation = attn_implementation
    return transformers.BertForPreTraining(hf_config).eval()


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_bertwb_weights_give_hf_outputs(attn_implementation):
    config = small_config()
    model = random_model(config)
    hf_model = hf_model_for(config, attn_implementation)
    result = hf_model.load_state_dict(to_hf_state_dict(model.state_dict()), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    input_ids, token_type_ids, attention_mask, _ = make_batch(batch=3, seq=12)
    with torch.no_grad():
        ours = model(input_ids, token_type_ids, attention_mask)
        theirs = hf_model(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
    # every position, padding included: HF and bertwb both let pad queries attend to real keys
    assert (ours.mlm_logits - theirs.prediction_logits).abs().max() <= 1e-5
    assert (ours.nsp_logits - theirs.seq_relationship_logits).abs().max() <= 1e-5


def test_hf_weights_give_bertwb_outputs():
    config = small_config()
    hf_model = hf_model_for(config, "eager")
    torch.manual_seed(1)
    with torch.no_grad():
        for param in hf_model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    hf_state = hf_model.state_dict()
    hf_state["bert.embeddings.position_ids"] = torch.arange(512)[None]  # as older checkpoints saved it

    state, missing, unexpected = from_hf_state_dict(hf_state, config)
    assert missing == [] and unexpected == []
    model = BertForPreTraining(config).eval()
    model.load_state_dict(state, strict=True)
    assert model.mlm_head.decoder.weight is model.bert.embeddings.tokens.weight  # still tied after loading

    input_ids, token_type_ids, attention_mask, _ = make_batch(batch=3, seq=12, seed=5)
    with torch.no_grad():
        ours = model(input_ids, token_type_ids, attention_mask)
        theirs = hf_model(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
    assert (ours.mlm_logits - theirs.prediction_logits).abs().max() <= 1e-5
    assert (ours.nsp_logits - theirs.seq_relationship_logits).abs().max() <= 1e-5


def test_from_hf_reports_missing_and_unexpected_keys():
    config = small_config()
    hf_state = to_hf_state_dict(random_model(config).state_dict())
    # a bare BertModel checkpoint with a fine-tuned classifier: no `bert.` prefix, no cls.*
    bare = {name.removeprefix("bert."): t for name, t in hf_state.items() if name.startswith("bert.")}
    bare["classifier.weight"] = torch.zeros(2, 64)
    bare["embeddings.LayerNorm.gamma"] = bare.pop("embeddings.LayerNorm.weight")  # TF-era name
    state, missing, unexpected = from_hf_state_dict(bare, config)
    assert unexpected == ["classifier.weight"]
    assert sorted(missing) == sorted(name for name in hf_state if name.startswith("cls.")
                                     and name not in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"))
    torch.testing.assert_close(state["bert.embeddings.norm.weight"], hf_state["bert.embeddings.LayerNorm.weight"])
    # only the alias name of the decoder bias is enough
    only_alias = {k: v for k, v in hf_state.items() if k != "cls.predictions.bias"}
    state, missing, _ = from_hf_state_dict(only_alias, config)
    assert missing == [] and state["mlm_head.bias"] is hf_state["cls.predictions.decoder.bias"]
    # an untied decoder cannot be represented: it is reported, and the word embeddings are used
    untied = {**hf_state, "cls.predictions.decoder.weight": torch.zeros(VOCAB, 64)}
    state, _, unexpected = from_hf_state_dict(untied, config)
    assert unexpected == ["cls.predictions.decoder.weight"]
    assert state["mlm_head.decoder.weight"] is hf_state["bert.embeddings.word_embeddings.weight"]
    # a config that does not fit the weights is a clear error
    with pytest.raises(BertwbError, match="shape"):
        from_hf_state_dict(hf_state, small_config(vocab_size=VOCAB + 64))


# --- fine-tuning heads -----------------------------------------------------------------------------------

NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def test_task_models_shapes():
    """Each head's scores have their shapes (their losses are bertwb.tasks.losses', tests/test_losses.py)."""
    config = small_config()
    input_ids, token_type_ids, attention_mask, _ = make_batch(batch=3, seq=12)

    sequence = BertForSequenceClassification(config, ["neg", "pos", "neutral"]).eval()
    out = sequence(input_ids, token_type_ids, attention_mask)
    assert out.logits.shape == (3, 3) and out.hidden_states.shape == (3, 12, 64)
    regressor = BertForSequenceClassification(config, ["score"]).eval()
    assert regressor(input_ids, token_type_ids, attention_mask).logits.shape == (3, 1)
    tokens = BertForTokenClassification(config, NER_LABELS).eval()
    assert tokens(input_ids, token_type_ids, attention_mask).logits.shape == (3, 12, 5)
    spans = BertForQuestionAnswering(config).eval()
    out = spans(input_ids, token_type_ids, attention_mask)
    assert out.start_logits.shape == (3, 12) and out.end_logits.shape == (3, 12)

    # token classification and QA never read the pooler, so they have none (as HF's add_pooling_layer=False)
    assert any(name.startswith("bert.pooler.") for name in sequence.state_dict())
    for model in (tokens, spans):
        assert not any("pooler" in name for name in model.state_dict())
    with pytest.raises(BertwbError, match="at least one label"):
        BertForTokenClassification(config, [])


def test_task_head_init_and_dropout():
    config = small_config(intermediate_size=1024, classifier_dropout=0.25)
    model = BertForSequenceClassification(config, default_label_names(2))
    assert torch.count_nonzero(model.classifier.bias) == 0 and abs(model.classifier.weight.std().item() - 0.02) < 0.005
    assert model.dropout.p == 0.25
    assert BertForTokenClassification(small_config(hidden_dropout=0.15), NER_LABELS).dropout.p == 0.15


def hf_task_model(cls_name: str, config: BertConfig, label_names: list[str] | None):
    """A transformers task model with random weights everywhere, built from HF's own config handling."""
    transformers = pytest.importorskip("transformers")
    extra = {"id2label": dict(enumerate(label_names))} if label_names else {}
    hf_config = transformers.BertConfig(**hf_config_dict(config), **extra)
    hf_config._attn_implementation = "eager"
    model = getattr(transformers, cls_name)(hf_config).eval()
    torch.manual_seed(3)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model


def task_logits(output) -> torch.Tensor:
    """The one tensor a task model's output is judged by: logits, or start and end logits side by side."""
    if hasattr(output, "start_logits"):
        return torch.stack([output.start_logits, output.end_logits], dim=-1)  # 2 x (B, T) -> (B, T, 2)
    return output.logits


TASK_CLASSES = [("BertForSequenceClassification", ["neg", "pos", "neutral"]),
                ("BertForTokenClassification", NER_LABELS),
                ("BertForQuestionAnswering", None)]


@pytest.mark.parametrize("cls_name, label_names", TASK_CLASSES)
def test_task_models_match_hf_both_ways(cls_name, label_names):
    config = small_config()
    kind = next(k for k, cls in MODEL_KINDS.items() if cls.hf_architecture == cls_name)
    input_ids, token_type_ids, attention_mask, _ = make_batch(batch=3, seq=12)

    # bertwb weights into transformers
    ours = random_model(config, kind=kind, label_names=label_names)
    theirs = hf_task_model(cls_name, config, label_names)
    result = theirs.load_state_dict(to_hf_state_dict(ours.state_dict()), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    with torch.no_grad():
        diff = task_logits(ours(input_ids, token_type_ids, attention_mask)) - task_logits(
            theirs(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask))
    assert diff.abs().max() <= 1e-5

    # transformers weights into bertwb
    theirs = hf_task_model(cls_name, config, label_names)
    state, missing, unexpected = from_hf_state_dict(theirs.state_dict(), config, kind, label_names)
    assert missing == [] and unexpected == []
    ours = new_model(config, kind, label_names).eval()
    ours.load_state_dict(state, strict=True)
    with torch.no_grad():
        diff = task_logits(ours(input_ids, token_type_ids, attention_mask)) - task_logits(
            theirs(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask))
    assert diff.abs().max() <= 1e-5


def test_task_config_and_labels_round_trip_through_hf():
    transformers = pytest.importorskip("transformers")
    config = small_config(classifier_dropout=0.2)
    d = hf_config_dict(config, "token_classification", NER_LABELS)
    assert d["architectures"] == ["BertForTokenClassification"]
    assert d["id2label"] == {str(i): name for i, name in enumerate(NER_LABELS)}
    hf_config = transformers.BertConfig(**d)
    assert hf_config.num_labels == 5 and hf_config.id2label[1] == "B-PER" and hf_config.label2id["I-LOC"] == 4
    assert hf_config.classifier_dropout == 0.2
    written = hf_config.to_dict()  # what save_pretrained writes: id2label keys become strings in JSON
    assert config_from_hf_dict(written) == config
    assert label_names_from_hf_dict({**written, "id2label": {str(k): v for k, v in written["id2label"].items()}}) \
        == NER_LABELS
    assert "id2label" not in hf_config_dict(config, "question_answering")
    assert transformers.BertConfig(**hf_config_dict(config, "question_answering")).num_labels == 2


def test_label_names_from_hf_dict():
    assert label_names_from_hf_dict({}) == ["LABEL_0", "LABEL_1"]  # HF's default when nothing is written
    assert label_names_from_hf_dict({"num_labels": 3}) == ["LABEL_0", "LABEL_1", "LABEL_2"]
    assert label_names_from_hf_dict({"id2label": {"1": "pos", "0": "neg"}}) == ["neg", "pos"]
    with pytest.raises(BertwbError, match="num_labels 3 but id2label names 2"):
        label_names_from_hf_dict({"num_labels": 3, "id2label": {"0": "neg", "1": "pos"}})
    with pytest.raises(BertwbError, match="without gaps"):
        label_names_from_hf_dict({"id2label": {"0": "neg", "2": "pos"}})
    with pytest.raises(BertwbError, match="positive whole number"):
        label_names_from_hf_dict({"num_labels": 0})


def test_kind_of_reads_architectures_then_weight_names():
    config = small_config()
    for kind, cls in MODEL_KINDS.items():
        ours = list(new_model(config, kind, ["a", "b"]).state_dict())
        theirs = list(to_hf_state_dict(new_model(config, kind, ["a", "b"]).state_dict()))
        assert kind_of(ours) == kind_of(theirs) == kind_of(theirs, [cls.hf_architecture]) == kind
    token_names = list(to_hf_state_dict(new_model(config, "token_classification", ["a"]).state_dict()))
    # an old token classifier saved with a pooler: its config names the class
    assert kind_of(token_names + ["bert.pooler.dense.weight"], ["BertForTokenClassification"]) == \
        "token_classification"
    # classes bertwb has no head for load as pre-training models (their head is reported as left out)
    assert kind_of(token_names + ["bert.pooler.dense.weight"], ["BertForMultipleChoice"]) == "pretraining"
    assert kind_of(["embeddings.word_embeddings.weight"], ["BertModel"]) == "pretraining"


def test_from_hf_checks_label_count_and_drops_other_heads():
    config = small_config()
    hf_state = to_hf_state_dict(random_model(config, kind="sequence_classification",
                                             label_names=["a", "b", "c"]).state_dict())
    with pytest.raises(BertwbError, match="classifier.weight scores 3 labels but config.json's id2label"):
        from_hf_state_dict(hf_state, config, "sequence_classification", ["a", "b"])
    # a pre-training model from a classifier: the encoder and pooler fit, the heads are missing
    state, missing, unexpected = from_hf_state_dict(hf_state, config)
    assert unexpected == ["classifier.weight", "classifier.bias"]
    assert sorted({name.split(".")[1] for name in missing}) == ["predictions", "seq_relationship"]
    assert "bert.pooler.weight" in state


def test_loss_goes_down_on_a_fixed_batch():
    torch.manual_seed(0)
    model = BertForPreTraining(small_config(hidden_dropout=0.0, attention_dropout=0.0)).train()
    input_ids, token_type_ids, attention_mask, _ = make_batch(batch=4, seq=16)
    masked_positions = torch.tensor([1, 5, 9, 17, 20, 33, 36, 50])
    mlm_labels = input_ids.view(-1)[masked_positions].clone()  # (B, T) viewed flat
    masked_ids = input_ids.clone()
    masked_ids.view(-1)[masked_positions] = 4  # [MASK]
    nsp_labels = torch.tensor([0, 1, 1, 0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        out = model(masked_ids, token_type_ids, attention_mask, masked_positions)
        loss = task_losses.pretraining(task_losses.masked_lm(out.mlm_logits, mlm_labels),
                                       task_losses.next_sentence(out.nsp_logits, nsp_labels), len(mlm_labels), 4)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 6.0  # ~ln(1000) + ln(2) at init
    assert losses[-1] < 0.15 * losses[0]  # memorising 8 tokens and 4 NSP labels
