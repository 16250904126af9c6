"""One loss per task (bertwb.tasks.losses): what each computes, and that nothing else computes one.

* each loss against its textbook formula (what the heads' own losses once asserted);
* per task, the trainer's loss on a batch, evaluation's and a direct call's are the same numbers;
* a padded QA batch: padding never counts (each row has the loss it has alone), where counting it would not;
* no module of bertwb but the losses' calls a loss function, and no head's forward takes targets or gives a loss.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertwb.config import Config
from bertwb.data.batching import Batches
from bertwb.model.bert import BertConfig, BertForPreTraining, BertOutput
from bertwb.model.heads import MODEL_KINDS, ClassifierOutput, SpanOutput, new_model
from bertwb.tasks import losses
from bertwb.tasks.finetune.batches import TaskExamples, collate
from bertwb.tasks.finetune.evaluation import collect
from bertwb.tasks.finetune.features import IGNORE, Features
from bertwb.tasks.finetune.objectives import objective_for
from bertwb.tasks.finetune.tasktypes import TASK_TYPES, task_type
from bertwb.tasks.pretraining.evaluation import evaluate_pairs
from bertwb.tasks.pretraining.objective import PretrainingObjective
from bertwb.train.device import Precision
from bertwb.train.distributed import Dist
from bertwb.train.trainer import Trainer
from conftest import REPO, stand_in_pairs

VOCAB = 100
CONFIG = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                    hidden_dropout=0.0, attention_dropout=0.0)  # no dropout: training's forward is evaluation's


# --- each loss is its formula ------------------------------------------------------------------------------

def test_each_loss_is_its_formula():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 3, generator=gen)
    labels = torch.tensor([0, 2, 1, 1])
    summed = losses.classification(scores, labels)
    torch.testing.assert_close(losses.mean(summed.loss, 4), F.cross_entropy(scores, labels))
    assert summed.correct == (scores.argmax(-1) == labels).sum()

    targets = torch.tensor([0.5, 1.0, 4.0, -2.0])
    torch.testing.assert_close(losses.regression(scores[:, :1], targets).loss, ((scores[:, 0] - targets) ** 2).sum())

    tokens = torch.randn(2, 6, 5, generator=gen)  # (B, T, labels)
    tags = torch.full((2, 6), IGNORE)
    tags[:, 1:4] = torch.tensor([1, 2, 0])  # three labelled tokens per row, the rest no target
    summed = losses.token_classification(tokens, tags)
    torch.testing.assert_close(summed.loss, F.cross_entropy(tokens[:, 1:4].reshape(-1, 5), tags[:, 1:4].reshape(-1),
                                                            reduction="sum"))
    assert int(losses.counted(tags).sum()) == 6

    start, end = torch.randn(3, 6, generator=gen), torch.randn(3, 6, generator=gen)
    summed = losses.span(start, end, torch.tensor([1, 2, 3]), torch.tensor([2, 2, IGNORE]), None)
    torch.testing.assert_close(summed.loss, (F.cross_entropy(start, torch.tensor([1, 2, 3]), reduction="sum")
                                             + F.cross_entropy(end[:2], torch.tensor([2, 2]), reduction="sum")) / 2)

    mlm_scores, mlm_labels = torch.randn(5, VOCAB, generator=gen), torch.tensor([7, 8, 9, 10, 11])
    nsp_scores, nsp_labels = torch.randn(3, 2, generator=gen), torch.tensor([0, 1, 0])
    loss = losses.pretraining(losses.masked_lm(mlm_scores, mlm_labels), losses.next_sentence(nsp_scores, nsp_labels),
                              5, 3)
    torch.testing.assert_close(loss, F.cross_entropy(mlm_scores, mlm_labels) + F.cross_entropy(nsp_scores, nsp_labels))
    unweighted = losses.pretraining(losses.masked_lm(mlm_scores, mlm_labels),
                                    losses.next_sentence(nsp_scores, nsp_labels), 5, 3, nsp_weight=0.0)
    torch.testing.assert_close(unweighted, F.cross_entropy(mlm_scores, mlm_labels))


# --- the trainer, evaluation and a direct call agree, per task --------------------------------------------

def _features(kind: str, lengths: list[int], seed: int = 0) -> Features:
    """Random features of ``lengths`` tokens with the targets of model ``kind``."""
    rng = np.random.default_rng(seed)
    ids = [[2, *rng.integers(5, VOCAB, n - 2).tolist(), 3] for n in lengths]
    types = [[0] * (n // 2) + [1] * (n - n // 2) for n in lengths]
    targets = {}
    token_labels = None
    if kind == "classify":
        targets["labels"] = rng.integers(0, 3, len(lengths))
    elif kind == "regression":
        targets["labels"] = rng.normal(size=len(lengths)).astype(np.float32)
    elif kind == "tag":
        token_labels = [[IGNORE, *rng.choice([IGNORE, 0, 1, 2], n - 2).tolist(), IGNORE] for n in lengths]
    else:
        targets["start"] = np.array([rng.integers(0, n) for n in lengths])
        targets["end"] = np.array([min(s + 1, n - 1) for s, n in zip(targets["start"], lengths, strict=True)])
    return Features.from_encodings(ids, types, list(range(len(lengths))), token_labels=token_labels, **targets)


TASKS = {  # our name: (task type, its settings, label names)
    "classify": ("classify", {}, ["a", "b", "c"]),
    "regression": ("classify", {"regression": True}, ["score"]),
    "tag": ("tag", {}, ["O", "B-X", "I-X"]),
    "qa": ("qa", {}, None),
}


def _direct(kind: str, model: torch.nn.Module, batch) -> tuple[float, int]:  # noqa: ANN001
    """The task's loss summed over ``batch``, called as a test (or any user) calls it, and its count of targets."""
    with torch.no_grad():
        if kind == "qa":
            out = model(batch.input_ids, batch.token_type_ids, batch.attention_mask)
            return float(losses.span(out.start_logits, out.end_logits, batch.start_positions, batch.end_positions,
                                     batch.attention_mask).loss), batch.n_targets
        logits = model(batch.input_ids, batch.token_type_ids, batch.attention_mask).logits
        loss = {"classify": losses.classification, "regression": losses.regression,
                "tag": losses.token_classification}[kind]
        summed = loss(logits, batch.token_labels if kind == "tag" else batch.labels)
        return float(summed.loss), batch.n_targets


@pytest.mark.parametrize("kind", list(TASKS))
def test_training_evaluation_and_a_direct_call_give_one_loss(kind):
    type_name, options, label_names = TASKS[kind]
    settings = TASK_TYPES[type_name].settings_class(type=type_name, device="cpu", **options)
    task = task_type(settings, f"finetune.tasks.{kind}")
    torch.manual_seed(0)
    model = new_model(CONFIG, task.model_kind, label_names)
    features = _features(kind, [12, 7, 9, 5, 12, 8])  # padded rows in every batch
    batches = Batches(TaskExamples(features), len(features), 0, drop_last=False)
    (batch,) = batches.micro_batches(0, 0)
    assert batch.attention_mask is not None  # the batch is padded
    direct, n_targets = _direct(kind, model.eval(), batch)

    objective = objective_for(task, label_names)
    _, totals = collect(objective, model, batches, Precision("fp32", False, "set"), Dist(device="cpu"))
    assert totals["loss_sum"] == pytest.approx(direct, rel=1e-6) and totals[objective.counts[0]] == n_targets

    trainer = Trainer(settings, objective, model.train(), batches, total_steps=1)
    trainer.train_step(0)  # the window holds the loss of the weights before the step
    assert trainer.window_totals()["loss_sum"] == pytest.approx(direct, rel=1e-6)


def test_pretraining_training_evaluation_and_a_direct_call_give_one_loss():
    pairs = stand_in_pairs(24)
    torch.manual_seed(0)
    model = BertForPreTraining(CONFIG).eval()
    batches = Batches(pairs, len(pairs), 0, drop_last=False)
    (batch,) = batches.micro_batches(0, 0)
    with torch.no_grad():
        out = model(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.masked_positions)
        mlm, nsp = losses.masked_lm(out.mlm_logits, batch.mlm_labels), losses.next_sentence(out.nsp_logits,
                                                                                           batch.nsp_labels)
    n_masked, n_pairs = len(batch.mlm_labels), len(batch.nsp_labels)

    evaluated = evaluate_pairs(model, pairs, np.zeros(n_masked, np.int64), len(pairs), torch.device("cpu"))
    assert evaluated["mlm_loss"] == pytest.approx(float(mlm.loss) / n_masked, abs=2e-6)
    assert evaluated["nsp_loss"] == pytest.approx(float(nsp.loss) / n_pairs, abs=2e-6)
    assert evaluated["mlm_acc"] == pytest.approx(int(mlm.correct) / n_masked, abs=1e-6)
    without_nsp = evaluate_pairs(model, pairs, np.zeros(n_masked, np.int64), len(pairs), torch.device("cpu"), nsp=False)
    assert without_nsp["mlm_loss"] == evaluated["mlm_loss"] and "nsp_loss" not in without_nsp  # pretrain.nsp false

    settings = Config().pretrain
    settings.device = "cpu"
    trainer = Trainer(settings, PretrainingObjective(), model.train(), batches, valid=batches, total_steps=1)
    validated = trainer.validation_totals()
    trainer.train_step(0)
    for totals in (validated, trainer.window_totals()):
        assert totals["mlm_loss_sum"] == pytest.approx(float(mlm.loss), rel=1e-6)
        assert totals["nsp_loss_sum"] == pytest.approx(float(nsp.loss), rel=1e-6)
        assert (totals["n_masked"], totals["n_pairs"]) == (n_masked, n_pairs)


def test_padding_never_counts_in_the_qa_loss():
    """A padded QA batch's loss is the sum of its rows' losses alone; with the padding counted it is not."""
    torch.manual_seed(0)
    model = new_model(CONFIG, "question_answering").eval()
    features = _features("qa", [12, 5, 8, 3])
    padded = collate(features, np.arange(4))
    assert padded.attention_mask is not None and int(padded.attention_mask.sum()) < padded.input_ids.numel()
    together, _ = _direct("qa", model, padded)
    alone = [_direct("qa", model, collate(features, np.array([row])))[0] for row in range(4)]
    assert together == pytest.approx(sum(alone), rel=1e-5)

    with torch.no_grad():  # what the loss would be if padding were a candidate: the test can tell
        out = model(padded.input_ids, padded.token_type_ids, padded.attention_mask)
        counted = (F.cross_entropy(out.start_logits, padded.start_positions, reduction="sum")
                   + F.cross_entropy(out.end_logits, padded.end_positions, reduction="sum")) / 2
    assert float(counted) > together + 0.1


# --- no second loss ----------------------------------------------------------------------------------------

LOSS_FUNCTIONS = {"cross_entropy", "mse_loss", "nll_loss", "log_softmax", "binary_cross_entropy",
                  "binary_cross_entropy_with_logits", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
                  "CrossEntropyLoss", "MSELoss", "NLLLoss", "BCEWithLogitsLoss", "BCELoss"}


def loss_calls(source: str) -> list[int]:
    """The lines of ``source`` that call a loss function of torch (by its name, however it is imported)."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in LOSS_FUNCTIONS]


def test_no_module_but_the_losses_computes_a_loss():
    assert loss_calls("import torch.nn.functional as F\nF.cross_entropy(x, y)\n") == [2]  # the check sees one
    assert loss_calls("from torch.nn.functional import mse_loss\n\nmse_loss(x, y)\n") == [3]
    found = {path.relative_to(REPO).as_posix(): lines for path in sorted((REPO / "bertwb").rglob("*.py"))
             if path != REPO / "bertwb" / "tasks" / "losses.py"
             and (lines := loss_calls(path.read_text(encoding="utf-8")))}
    assert not found, f"losses computed outside bertwb/tasks/losses.py (file: lines): {found}; call the task's one"


def test_no_head_takes_targets_or_gives_a_loss():
    inputs = {"self", "input_ids", "token_type_ids", "attention_mask", "masked_positions"}
    for kind, cls in MODEL_KINDS.items():
        assert set(inspect.signature(cls.forward).parameters) <= inputs, kind
    for output in (BertOutput, ClassifierOutput, SpanOutput):
        assert not [f.name for f in dataclasses.fields(output) if "loss" in f.name], output.__name__
