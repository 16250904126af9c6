"""The task type contract: a type is one module and one line in TASK_TYPES, and its module imports no torch.

docs/finetuning.md's example type is run here as written (trained, predicted, its options validated), so the
section on adding a task type stays true.
"""

from __future__ import annotations

import csv
import importlib
import inspect
import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

import bertwb.tasks.finetune
from bertwb.cli import cli
from bertwb.tasks.finetune.tasktypes import TASK_TYPES, TaskType
from conftest import REPO, Project, assert_one_line_error, tiny_model_dir

PAGE = (REPO / "docs" / "finetuning.md").read_text(encoding="utf-8")  # "Adding a task type"


def _block(after: str) -> str:
    """The page's Python block that follows the line ending in ``after``."""
    return re.search(re.escape(after) + r"\n\n```python\n(.*?)```", PAGE, re.S).group(1)


@pytest.fixture
def fasttext(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """The page's example module in the fine-tuning package's search path, and its line in TASK_TYPES."""
    folder = tmp_path / "extra_types"
    folder.mkdir()
    (folder / "fasttext.py").write_text(_block("(`__label__positive The soup was great .`):"), encoding="utf-8")
    monkeypatch.setattr(bertwb.tasks.finetune, "__path__", [*bertwb.tasks.finetune.__path__, str(folder)])
    module = importlib.import_module("bertwb.tasks.finetune.fasttext")
    name, cls = re.fullmatch(r'\s*"(\w+)": (\w+),\s*', _block("it is a type once `TASK_TYPES` names it:")).groups()
    monkeypatch.setitem(TASK_TYPES, name, getattr(module, cls))
    yield folder / "fasttext.py"
    sys.modules.pop("bertwb.tasks.finetune.fasttext", None)


def _lines(rows: list[dict[str, str]]) -> str:
    return "".join(f"__label__{row['label']} {row['text']}\n" for row in rows)


def _predict(project: Project, task: str, stdin: str) -> list[dict]:
    """``bertwb predict TASK`` with lines on stdin: its rows."""
    result = CliRunner().invoke(cli, ["predict", task, "--config", str(project.config)], input=stdin)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_the_readme_example_type_trains_predicts_and_checks_its_options(tmp_path, fasttext):
    rows = list(csv.DictReader((REPO / "sample_corpus" / "finetune" / "sentiment_train.csv").open(encoding="utf-8")))
    (tmp_path / "train.txt").write_text(_lines(rows[:24]), encoding="utf-8")
    (tmp_path / "dev.txt").write_text(_lines(rows[24:32]), encoding="utf-8")
    tiny_model_dir(tmp_path / "model", max_positions=128)
    project = Project(tmp_path)
    project.write_config("finetune:\n  init_from: model\n  steps: 2\n  batch_size: 4\n  tasks:\n"
                         "    reviews:\n      type: fasttext\n      train: train.txt\n      dev: dev.txt\n")

    project.run("finetune", "reviews")
    metrics = json.loads((project.workspace / "finetune" / "reviews" / "metrics.json").read_text())
    assert metrics["type"] == "fasttext" and metrics["labels"] == ["negative", "positive"]
    assert metrics["main_metric"] == "accuracy" and metrics["dev"]["examples"] == 8
    task = json.loads((project.workspace / "finetune" / "reviews" / "task.json").read_text())
    assert task["type"] == "fasttext" and task["label_prefix"] == "__label__"

    first, second = _predict(project, "reviews", "__label__negative The soup was cold .\nThe soup was great .\n")
    assert first["text"] == "The soup was cold ." and first["gold"] == "negative"
    assert second["text"] == "The soup was great ." and second["gold"] is None
    assert {first["label"], second["label"]} <= {"negative", "positive"} and 0.5 <= second["score"] <= 1

    assert "finetune/reviews: fresh" in project.run("finetune", "reviews").output
    assert_one_line_error(project.run("status", "--set", "finetune.tasks.reviews.label_prefx=x", expect=None),
                          "unknown key 'finetune.tasks.reviews.label_prefx'; did you mean 'label_prefix'?")
    assert_one_line_error(project.run("status", "--set", "finetune.tasks.reviews.text_column=x", expect=None),
                          "it is an option of classify tasks, and this task is fasttext")
    (tmp_path / "dev.txt").write_text("__label__negative The soup was cold .\nno label here\n", encoding="utf-8")
    assert_one_line_error(project.run("finetune", "reviews", expect=None),
                          f"{tmp_path / 'dev.txt'}:2: the line does not start with a label")


def test_the_readme_example_imports_no_torch(fasttext):
    """The config loader imports every type module: one that imported torch would slow `bertwb status`."""
    script = ("import importlib.util, sys\n"
              f"spec = importlib.util.spec_from_file_location('fasttext', {str(fasttext)!r})\n"
              "sys.modules['fasttext'] = module = importlib.util.module_from_spec(spec)  # dataclasses look it up\n"
              "spec.loader.exec_module(module)\n"
              "import bertwb.tasks.finetune.tasktypes\n"
              "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_every_task_type_provides_the_whole_protocol():
    wanted = {name for name, _ in inspect.getmembers(TaskType, inspect.isfunction) if not name.startswith("_")}
    wanted |= set(TaskType.__annotations__)
    assert wanted >= {"settings_class", "model_kind", "main_metric", "read", "featurize", "decode", "recorded"}
    for name, cls in TASK_TYPES.items():
        task = cls(cls.settings_class(type=name), f"finetune.tasks.{name}", {})
        missing = {member for member in wanted if not hasattr(task, member)}
        assert not missing, f"{name} lacks {missing}"
