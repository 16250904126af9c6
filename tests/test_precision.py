"""Precision: the one rule that decides ``auto``, every command that runs a model following it, and what
stays fp32 under bf16 autocast. Mixed precision and compilation run on CPU, so CI takes the paths a GPU
run takes.

* `precision_rule` takes the CPU flags and the matmul check as inputs, so both kinds of machine are tried
  here whatever runs the suite (conftest makes every test see a CPU without bf16 matrix instructions;
  `bf16_cpu` one with them);
* ``-v`` names the choice and why; the stage key does not move with it; an explicit fp32 is obeyed;
* bf16 under ``auto`` is bit-reproducible, keeps the loss, LayerNorm, optimizer state and weights fp32,
  and its loss tracks fp32's;
* ``compile: true`` wraps the model in ``torch.compile``; a compiled CPU step gives the eager step's
  parameters (skipped, with the reason, where this machine cannot compile).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
import yaml

from bertwb import current, fast
from bertwb.configfile import load_config
from bertwb.data.batching import Batches
from bertwb.errors import BertwbError
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.model.heads import new_model
from bertwb.tasks.finetune.batches import TaskExamples
from bertwb.tasks.finetune.objectives import objective_for
from bertwb.tasks.finetune.tasktypes import TASK_TYPES, task_type
from bertwb.tasks.pretraining.objective import PretrainingObjective
from bertwb.train import device
from bertwb.train.device import MatmulCheck, choose_precision, precision_rule
from bertwb.train.trainer import Trainer
from bertwb.workspace import Workspace
from conftest import Project, bf16_cpu, run_metrics, stand_in_pairs, tiny_model_dir
from test_losses import CONFIG as LOSS_CONFIG
from test_losses import TASKS as FINETUNE_TASKS
from test_losses import _features as finetune_features

STEPS = 6
CPU = torch.device("cpu")


def _never_measured() -> MatmulCheck:
    raise AssertionError("the matmul check ran where the rule needs no measurement")


# --- the rule ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("setting", "device_type", "flags", "speedup", "bf16", "line"), [
    ("auto", "cpu", {"amx_bf16", "avx512_bf16", "avx2"}, 2.4, True,
     "precision auto → bf16: CPU has amx_bf16, avx512_bf16; bf16 matmul 2.4× fp32 at H384/I1536"),
    ("auto", "cpu", {"avx512_bf16"}, 0.9, False,
     "precision auto → fp32: CPU has avx512_bf16; bf16 matmul 0.9× fp32 at H384/I1536 (under 1.2×)"),
    ("auto", "cpu", {"avx512f", "avx2"}, None, False,
     "precision auto → fp32: no bf16 matrix instructions in CPU flags"),
    ("auto", "cuda", set(), None, True, "precision auto → bf16: CUDA GPU"),
    ("fp32", "cpu", {"amx_bf16"}, None, False, "precision fp32: set"),
    ("bf16", "cpu", {"amx_bf16"}, None, True, "precision bf16: set"),
    ("bf16", "cpu", set(), None, True, "precision bf16: set; this CPU has no bf16 matrix instructions, so bf16 is "
     "emulated (slower than fp32)"),
], ids=["amx-faster", "avx512-slower", "no-flags", "cuda", "fp32-on-amx", "bf16-on-amx", "bf16-emulated"])
def test_the_rule_measures_only_where_the_flags_allow_bf16_and_obeys_an_explicit_setting(
        setting: str, device_type: str, flags: set[str], speedup: float | None, bf16: bool, line: str):
    check = (lambda: MatmulCheck(speedup, 384, 1536)) if speedup is not None else _never_measured
    choice = precision_rule(setting, device_type, flags, check)
    assert (choice.bf16, choice.name, choice.line()) == (bf16, "bf16" if bf16 else "fp32", line)
    with choice.autocast() if device_type == "cpu" else torch.autocast("cpu", enabled=False):
        product = torch.ones(2, 2) @ torch.ones(2, 2)
    assert product.dtype == (torch.bfloat16 if bf16 and device_type == "cpu" else torch.float32)


def test_the_rule_refuses_a_precision_it_does_not_know():
    with pytest.raises(BertwbError, match="precision 'fp16' is not a precision; use auto, fp32 or bf16"):
        precision_rule("fp16", "cpu", {"amx_bf16"}, _never_measured)


def test_the_matmul_check_is_quick_names_the_shapes_and_leaves_the_random_state_alone():
    before = torch.random.get_rng_state()
    started = time.perf_counter()
    check = device.bf16_matmul_check.__wrapped__(64, 256, torch.get_num_threads())  # uncached: it really runs
    seconds = time.perf_counter() - started
    assert check.speedup > 0 and (check.hidden, check.intermediate) == (64, 256)
    assert str(check) == f"bf16 matmul {check.speedup:.1f}× fp32 at H64/I256"
    assert torch.equal(torch.random.get_rng_state(), before)  # a model's init after it is the same
    assert seconds < 5, seconds  # well under a second on a quiet machine; a loose bound for a busy one


def test_cpu_flags_come_from_the_environment_where_named(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(device.CPU_FLAGS_ENV, "avx2 amx_bf16")
    assert device.cpu_flags() == {"avx2", "amx_bf16"}
    bf16_cpu(monkeypatch, speedup=0.5)
    assert choose_precision("auto", CPU, 128, 512, announce=False).line() == \
        "precision auto → fp32: CPU has avx512_bf16; bf16 matmul 0.5× fp32 at H128/I512 (under 1.2×)"


# --- every command that runs a model -----------------------------------------------------------------------

def _verbose_lines(result) -> list[str]:
    return [line.strip() for line in result.output.splitlines() if line.strip().startswith("precision ")]


def test_v_names_the_choice_of_pretrain_evaluate_fill_mask_and_nsp(trainer: Project,
                                                                    monkeypatch: pytest.MonkeyPatch):
    bf16_cpu(monkeypatch, speedup=2.4)
    pretrain = trainer.run("pretrain", "-v", "--set", "pretrain.steps=4")
    said = "precision auto → bf16: CPU has avx512_bf16; bf16 matmul 2.4× fp32 at H128/I512"
    assert _verbose_lines(pretrain) == [said], pretrain.output
    assert "bf16 autocast" in pretrain.output  # the trainer's setup line agrees
    assert json.loads((trainer.workspace / "pretrain" / "training.json").read_text())["precision"] == "bf16"
    evaluate = trainer.run("evaluate", "-v", "--json")
    assert _verbose_lines(evaluate) == [said] and '"precision": "bf16"' in evaluate.output
    assert _verbose_lines(trainer.run("fill-mask", "-v", "the [MASK] sat")) == [said]
    assert _verbose_lines(trainer.run("nsp", "-v", "the ship sailed.", "the crew slept.")) == [said]
    monkeypatch.undo()  # the suite's plain CPU again
    plain = trainer.run("evaluate", "-v", "--json", "--force")
    assert _verbose_lines(plain) == ["precision auto → fp32: no bf16 matrix instructions in CPU flags"]
    assert '"precision": "fp32"' in plain.output


def test_embed_follows_the_rule_and_keys_its_vectors_on_the_outcome(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch):
    model = tiny_model_dir(tmp_path / "model")
    (tmp_path / "texts.txt").write_text("the ship\nthe sails\n")
    Project(tmp_path).write_config("{}\n")
    project = Project(tmp_path)

    def embed(name: str, *args: str) -> tuple[list[str], dict]:
        result = project.run("embed", str(tmp_path / "texts.txt"), "--model", str(model), "-o",
                             str(tmp_path / name), "-v", *args)
        import pyarrow.parquet as pq  # noqa: PLC0415

        settings = json.loads(pq.read_table(tmp_path / name).schema.metadata[b"bertwb.embed"])["settings"]
        return _verbose_lines(result), settings

    lines, settings = embed("plain.parquet")
    assert lines == ["precision auto → fp32: no bf16 matrix instructions in CPU flags"]
    assert settings["precision"] == "fp32"
    bf16_cpu(monkeypatch, flags="amx_bf16", speedup=3.0)
    lines, settings = embed("amx.parquet")
    assert lines == ["precision auto → bf16: CPU has amx_bf16; bf16 matmul 3.0× fp32 at H32/I64"]
    assert settings["precision"] == "bf16"
    lines, settings = embed("asked.parquet", "--precision", "fp32")
    assert (lines, settings["precision"]) == (["precision fp32: set"], "fp32")


def test_v_names_the_choice_of_finetune_and_predict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    tiny_model_dir(tmp_path / "model")
    rows = "".join(f"the ship sail {i},{'ab'[i % 2]}\n" for i in range(8))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    project = Project(tmp_path)
    project.write_config(yaml.safe_dump({"finetune": {
        "steps": 2, "batch_size": 4, "max_seq_length": 32, "init_from": "model",
        "tasks": {"topic": {"type": "classify", "train": "train.csv", "dev": "train.csv"}}}}))
    bf16_cpu(monkeypatch, flags="amx_bf16 avx512_bf16", speedup=1.9)
    said = "precision auto → bf16: CPU has amx_bf16, avx512_bf16; bf16 matmul 1.9× fp32 at H32/I64"
    assert _verbose_lines(project.run("finetune", "-v")) == [said]  # training, dev scoring: one choice
    summary = json.loads((project.workspace / "finetune" / "topic" / "training.json").read_text())
    assert summary["precision"] == "bf16"
    predicted = project.run("predict", "topic", "-v", str(tmp_path / "train.csv"))
    assert _verbose_lines(predicted) == [said]
    monkeypatch.setenv(device.CPU_FLAGS_ENV, "")
    plain = project.run("predict", "topic", "-v", "--set", "finetune.tasks.topic.precision=bf16",
                        str(tmp_path / "train.csv"))
    assert _verbose_lines(plain)[0].startswith("precision bf16: set; this CPU has no bf16 matrix instructions")


def test_an_explicit_fp32_is_obeyed_on_a_bf16_machine_without_measuring(trainer: Project,
                                                                          monkeypatch: pytest.MonkeyPatch):
    bf16_cpu(monkeypatch)
    monkeypatch.setattr(device, "bf16_matmul_check", lambda *shapes: _never_measured())
    result = trainer.run("pretrain", "-v", "--set", "pretrain.steps=3", "--set", "pretrain.precision=fp32")
    assert _verbose_lines(result) == ["precision fp32: set"]
    assert json.loads((trainer.workspace / "pretrain" / "training.json").read_text())["precision"] == "fp32"


# --- keys and reproducibility --------------------------------------------------------------------------------

def test_the_stage_key_is_the_same_whatever_auto_decides(trainer: Project, monkeypatch: pytest.MonkeyPatch):
    """precision is a how-to-compute setting (``in_key=False``): no stage key holds it, so a run on an AMX
    machine and one on a plain machine share their keys, and a model trained in bf16 is fresh on a plain one."""
    ws = Workspace(trainer.workspace)

    def key(*settings: str) -> str:
        return current.current_key("pretrain", load_config(trainer.config, list(settings)), ws)

    plain = key()
    assert "precision" not in load_config(trainer.config, []).key_params("pretrain")
    assert key("pretrain.precision=fp32") == key("pretrain.precision=bf16") == plain
    bf16_cpu(monkeypatch)
    trainer.run("pretrain", "--set", "pretrain.steps=3")
    assert json.loads((trainer.workspace / "pretrain" / "training.json").read_text())["precision"] == "bf16"
    trained_key = json.loads((trainer.workspace / "manifests" / "pretrain.json").read_text())["key"]
    monkeypatch.undo()
    assert key("pretrain.steps=3") == trained_key  # the plain machine computes the same key
    again = trainer.run("pretrain", "--set", "pretrain.steps=3")
    assert "fresh" in again.output and "skipped" in again.output, again.output


def test_two_runs_under_auto_on_a_bf16_machine_give_bit_identical_weights(trainer: Project, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    bf16_cpu(monkeypatch)
    second = Project(tmp_path / "second")
    shutil.copytree(trainer.root, second.root)
    for project in (trainer, second):
        project.run("pretrain", "--set", "pretrain.steps=6", "--set", "model.hidden_dropout=0.1",
                    "--set", "model.attention_dropout=0.1")  # dropout on: the fast attention path too
    summaries = [json.loads((p.workspace / "pretrain" / "training.json").read_text()) for p in (trainer, second)]
    assert [s["precision"] for s in summaries] == ["bf16", "bf16"]
    weights = [(p.workspace / "pretrain" / "model.safetensors").read_bytes() for p in (trainer, second)]
    assert weights[0] == weights[1]
    assert [m["loss"] for m in run_metrics(trainer)] == [m["loss"] for m in run_metrics(second)]
    fp32 = Project(tmp_path / "fp32")
    shutil.copytree(trainer.root, fp32.root)
    fp32.run("pretrain", "--force", "--set", "pretrain.steps=6", "--set", "model.hidden_dropout=0.1",
             "--set", "model.attention_dropout=0.1", "--set", "pretrain.precision=fp32")
    assert (fp32.workspace / "pretrain" / "model.safetensors").read_bytes() != weights[0]  # bf16 really ran


# --- what stays fp32 -----------------------------------------------------------------------------------------

def _model(dropout: float = 0.0) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2,
                                         intermediate_size=64, hidden_dropout=dropout, attention_dropout=dropout))


def _train(*settings: str, steps: int = STEPS) -> tuple[list[float], list[torch.Tensor]]:
    """Per-step losses and the final parameters of a small model trained ``steps`` steps on stand-in pairs."""
    model = _model()
    cfg = load_config(None, ["pretrain.device=cpu", "pretrain.batch_size=8", "pretrain.lr=2e-3",
                             "pretrain.warmup_steps=0", *settings])
    objective = PretrainingObjective(fast=fast.choose(model, CPU, cfg.pretrain.cpu_fast_paths))  # as pre-training does
    trainer = Trainer(cfg.pretrain, objective, model, Batches(stand_in_pairs(64), 8, seed=0), total_steps=steps)
    losses = []
    for step in range(steps):
        trainer.train_step(step)
        losses.append(trainer.objective.rates(trainer.window_totals())["loss"])
        trainer.window.zero_()
    return losses, [t.detach().clone() for t in model.parameters()]


def test_bf16_autocast_loss_tracks_the_fp32_loss_over_the_first_steps():
    fp32, _ = _train("pretrain.precision=fp32")
    bf16, _ = _train("pretrain.precision=bf16")
    assert fp32[-1] < fp32[0]  # it learns, so tracking is not two flat lines
    gaps = [abs(a - b) / a for a, b in zip(fp32, bf16, strict=True)]
    assert max(gaps) < 0.005, (fp32, bf16)  # measured: under 0.01% over these steps
    assert fp32 != bf16  # bf16 really ran: its rounding shows in the losses


class _StepDtypes:
    """The dtypes one training step of ``model`` meets: each encoder LayerNorm's and Linear's (input, output),
    and every gradient's; `check` asserts what "Where fp32 stays" says of them and of the optimizer's state."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.seen, self.gradients = model, {}, set()
        self.encoder_norms = [m for name, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)
                              and name.startswith("bert.")]
        self.handles = [m.register_forward_hook(self._record("encoder LayerNorm")) for m in self.encoder_norms]
        self.handles += [m.register_forward_hook(self._record("Linear")) for m in model.modules()
                         if isinstance(m, torch.nn.Linear)]
        for parameter in model.parameters():
            parameter.register_hook(lambda grad: self.gradients.add(grad.dtype))

    def _record(self, kind: str):
        def hook(module, inputs, output):
            self.seen.setdefault(kind, set()).add((inputs[0].dtype, output.dtype))
        return hook

    def check(self, trainer: Trainer) -> None:
        for handle in self.handles:
            handle.remove()
        assert len(self.encoder_norms) == 5  # the embeddings' and two per block
        assert self.seen["encoder LayerNorm"] == {(torch.float32, torch.float32)}
        assert {out for _, out in self.seen["Linear"]} == {torch.bfloat16}  # autocast ran the matmuls in bf16
        assert self.gradients == {torch.float32} and all(p.dtype == torch.float32 for p in self.model.parameters())
        moments = [t for state in trainer.optimizer.state.values() for t in state.values() if t.dim() > 0]
        assert moments and all(t.dtype == torch.float32 for t in moments)


@pytest.mark.parametrize("fast_paths", [True, False], ids=["fast", "plain"])
def test_under_bf16_the_matmuls_are_bf16_and_the_residual_layernorm_loss_and_optimizer_stay_fp32(fast_paths: bool):
    """docs/commands.md, "Where fp32 stays": autocast runs Linear/matmul in bf16; the residual stream (embeddings plus
    each block's bf16 branch) is fp32, so every encoder LayerNorm reads and writes fp32; the losses are summed
    in fp32 (the metric window in fp64); weights, gradients and AdamW's moments are fp32."""
    model = _model(dropout=0.1)  # dropout on: the fast attention path with its softmax
    cfg = load_config(None, ["pretrain.device=cpu", "pretrain.batch_size=8", "pretrain.warmup_steps=0",
                             "pretrain.precision=bf16", f"pretrain.cpu_fast_paths={str(fast_paths).lower()}"])
    objective = PretrainingObjective(fast=fast.choose(model, CPU, cfg.pretrain.cpu_fast_paths))
    trainer = Trainer(cfg.pretrain, objective, model, Batches(stand_in_pairs(64), 8, seed=0), total_steps=2)
    dtypes = _StepDtypes(model)
    losses = []
    original_loss = objective.loss

    def loss(out, batch, totals):
        value, sums = original_loss(out, batch, totals)
        losses.append((value.dtype, sums.dtype))
        return value, sums

    objective.loss = loss
    trainer.train_step(0)
    dtypes.check(trainer)
    assert losses == [(torch.float32, torch.float64)]


@pytest.mark.parametrize("kind", ["classify", "tag", "qa"])
def test_a_fine_tuning_step_under_bf16_keeps_the_residual_loss_and_optimizer_fp32(kind: str,
                                                                                  monkeypatch: pytest.MonkeyPatch):
    """The fine-tuning side of "Where fp32 stays", per head: under bf16 autocast the Linear layers run in bf16, every
    encoder LayerNorm reads and writes fp32, the head's bf16 logits are cast to fp32 in `bertwb.tasks.losses` before
    its cross-entropy reads them, and the loss is fp32; gradients, weights and AdamW's moments stay fp32."""
    type_name, options, label_names = FINETUNE_TASKS[kind]
    settings = TASK_TYPES[type_name].settings_class(type=type_name, device="cpu", precision="bf16", **options)
    task = task_type(settings, f"finetune.tasks.{kind}")
    torch.manual_seed(0)
    model = new_model(LOSS_CONFIG, task.model_kind, label_names)
    features = finetune_features(kind, [12, 7, 9, 5, 12, 8])  # padded rows: the masked paths run too
    batches = Batches(TaskExamples(features), len(features), 0, drop_last=False)
    objective = objective_for(task, label_names)
    trainer = Trainer(settings, objective, model.train(), batches, total_steps=2)
    assert trainer.precision.bf16
    dtypes = _StepDtypes(model)
    reached: list[tuple[set[torch.dtype], torch.dtype]] = []
    original_loss = objective.loss

    def loss(out, batch, totals):
        logits = [out.start_logits, out.end_logits] if kind == "qa" else [out]
        value, sums = original_loss(out, batch, totals)
        reached.append(({t.dtype for t in logits}, value.dtype))
        return value, sums

    objective.loss = loss
    scored: set[torch.dtype] = set()
    cross_entropy = torch.nn.functional.cross_entropy

    def recording_cross_entropy(scores, *args, **kwargs):
        scored.add(scores.dtype)
        return cross_entropy(scores, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", recording_cross_entropy)
    trainer.train_step(0)
    dtypes.check(trainer)
    assert reached == [({torch.bfloat16}, torch.float32)]  # the head's Linear ran in bf16; the loss is fp32
    assert scored == {torch.float32}  # cross-entropy read fp32 scores


def test_a_compiled_cpu_step_matches_an_eager_one():
    eager_losses, eager = _train("pretrain.compile=false", steps=2)
    try:
        compiled_losses, compiled = _train("pretrain.compile=true", steps=2)
    except Exception as exc:  # noqa: BLE001 - inductor reports a missing compiler in several ways
        pytest.skip(f"torch.compile cannot compile on this machine: {str(exc).splitlines()[0][:200]}")
    assert compiled_losses == pytest.approx(eager_losses, abs=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(eager, compiled, strict=True))


def test_pretrain_runs_in_bf16_on_cpu_from_the_command_line(trainer: Project):
    trainer.run("pretrain", "--set", "pretrain.precision=bf16", "--set", "pretrain.steps=6")
    metrics = run_metrics(trainer)
    assert [m["step"] for m in metrics] == list(range(1, 7))
    assert all(0 < m["loss"] < 20 for m in metrics)
