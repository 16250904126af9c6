"""TensorBoard event files: with the extra, every metrics.jsonl number of every run is a scalar at its step;
without it, training writes none and does not notice.

`trainer` (conftest) gives a copy of a workspace whose pairs are built once per session.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import Project, assert_one_line_error, run_metrics

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402


def _scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """Every scalar of the run's event files: {tag: {step: value}}, as TensorBoard reads them."""
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def _run_dir(project: Project, runs: str = "pretrain-runs") -> Path:
    return next((project.workspace / runs).rglob("metrics.jsonl")).parent


def _written_at(path: Path) -> int:
    return path.stat().st_mtime_ns


def _expected(lines: list[dict]) -> dict[str, dict[int, float]]:
    """The scalars the metrics.jsonl lines should have become: valid_x → valid/x, every other name → train/x."""
    expected: dict[str, dict[int, float]] = {}
    for line in lines:
        for name, value in line.items():
            if name != "step":
                tag = f"valid/{name[6:]}" if name.startswith("valid_") else f"train/{name}"
                expected.setdefault(tag, {})[line["step"]] = value
    return expected


def test_pretrain_event_files_hold_every_metric_of_every_logged_step(trainer: Project):
    trainer.run("pretrain", "--set", "pretrain.steps=4", "--set", "pretrain.eval_every=2")
    lines = run_metrics(trainer)
    scalars = _scalars(_run_dir(trainer))
    expected = _expected(lines)
    assert {"train/loss", "train/mlm_acc", "train/nsp_acc", "train/lr", "train/tokens_per_s",
            "valid/loss", "valid/mlm_acc", "valid/nsp_acc"} <= set(scalars)
    assert set(scalars) == set(expected)
    for tag, values in expected.items():
        assert scalars[tag] == pytest.approx(values, rel=1e-6), tag  # event files hold float32
    assert sorted(scalars["valid/loss"]) == [2, 4] and sorted(scalars["train/loss"]) == [1, 2, 3, 4]


def test_a_resumed_run_shows_each_step_once_with_the_values_of_the_resumed_attempt(trainer: Project):
    """A crash after step 6 with the last checkpoint at 4: the resumed run (now asked for 8 steps, so its
    learning rate decays over 8) logs 5 and 6 again, and TensorBoard shows those, not the lost attempt's."""
    keep = ("--set", "pretrain.checkpoint_every=4", "--set", "pretrain.keep_checkpoints=5")
    trainer.run("pretrain", "--set", "pretrain.steps=6", *keep)
    run_dir = _run_dir(trainer)
    first = {line["step"]: line["lr"] for line in run_metrics(trainer)}
    shutil.rmtree(run_dir / "checkpoints" / "step-00000006")  # as if it died before checkpointing step 6
    (trainer.workspace / "manifests" / "pretrain.json").unlink()
    trainer.run("pretrain", "--set", "pretrain.steps=8", *keep)
    first_file, second_file = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"), key=_written_at)
    # The resumed file opens with TensorBoard's restart marker at the first step it logs again.
    restarts = [e.step for e in EventFileLoader(str(second_file)).Load() if e.HasField("session_log")]
    assert restarts == [5] and not any(e.HasField("session_log") for e in EventFileLoader(str(first_file)).Load())
    lines = run_metrics(trainer)
    assert [line["step"] for line in lines] == list(range(1, 9))
    assert lines[4]["lr"] != first[5]  # the resumed attempt really logged other values at the same step
    scalars = _scalars(run_dir)
    for tag in ("train/lr", "train/loss"):
        assert scalars[tag] == pytest.approx({line["step"]: line[tag[6:]] for line in lines}, rel=1e-6), tag


def test_finetuning_writes_event_files_in_its_own_run(trainer: Project, tmp_path: Path):
    trainer.run("pretrain", "--set", "pretrain.steps=2")
    rows = ["text,label"] + [f"{'ship sail harbour' if i % 2 else 'bread oven flour'} {i},{'sea' if i % 2 else 'food'}"
                             for i in range(32)]
    (trainer.root / "train.csv").write_text("\n".join(rows) + "\n")
    with open(trainer.config, "a", encoding="utf-8") as config:
        config.write("finetune:\n  steps: 4\n  batch_size: 8\n  log_every: 2\n  eval_every: 2\n  max_seq_length: 16\n"
                     "  tasks:\n    topic:\n      type: classify\n      train: train.csv\n      dev: train.csv\n")
    trainer.run("finetune")
    run_dir = _run_dir(trainer, "finetune-runs")
    assert run_dir.parent.name == "topic"
    scalars = _scalars(run_dir)
    expected = _expected(run_metrics(trainer, "finetune-runs"))
    assert {"train/loss", "train/acc", "valid/accuracy"} <= set(scalars)
    for tag, values in expected.items():
        assert scalars[tag] == pytest.approx(values, rel=1e-6), tag


def test_without_tensorboard_training_writes_no_event_files_and_succeeds(trainer: Project,
                                                                        monkeypatch: pytest.MonkeyPatch):
    for name in [name for name in sys.modules if name == "tensorboard" or name.startswith(("tensorboard.",
                                                                                          "torch.utils.tensorboard"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` now fails as if not installed
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    trainer.run("pretrain", "--set", "pretrain.steps=3")
    run_dir = _run_dir(trainer)
    assert [line["step"] for line in run_metrics(trainer)] == [1, 2, 3]
    assert not (run_dir / "tensorboard").exists()
    assert json.loads((trainer.workspace / "manifests" / "pretrain.json").read_text())["summary"]["steps_done"] == 3


def test_a_link_planted_at_a_runs_event_folder_is_refused_and_its_target_kept(trainer: Project, tmp_path: Path):
    """Issue #25 item 3, for event files: SummaryWriter reopened the file by name at every flush, through any
    link planted there. A link at the run's tensorboard/ folder now stops the run with one line, the folder
    it points at untouched; the event file itself is created new, under a name no one can plant in advance."""
    trainer.run("pretrain", "--set", "pretrain.steps=2", "--set", "pretrain.checkpoint_every=2")
    run_dir = _run_dir(trainer)
    shutil.rmtree(run_dir / "tensorboard")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "events.out.tfevents.precious").write_bytes(b"the user's own file")
    (run_dir / "tensorboard").symlink_to(elsewhere)
    result = trainer.run("pretrain", "--set", "pretrain.steps=4", "--set", "pretrain.checkpoint_every=2", expect=None)
    assert_one_line_error(result, str(run_dir / "tensorboard"), "is a symbolic link", "remove it")
    assert [p.name for p in elsewhere.iterdir()] == ["events.out.tfevents.precious"]
    assert (elsewhere / "events.out.tfevents.precious").read_bytes() == b"the user's own file"
    (run_dir / "tensorboard").unlink()
    trainer.run("pretrain", "--set", "pretrain.steps=4", "--set", "pretrain.checkpoint_every=2")
    names = sorted(p.name for p in (run_dir / "tensorboard").iterdir())
    assert len(names) == 1 and len(names[0].rsplit(".", 1)[1]) == 16  # a random part, 64 bits
    assert sorted(_scalars(run_dir)["train/loss"]) == [3, 4]
