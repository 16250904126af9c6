"""Issue #25, "also deliver": the failure paths of the newer commands (finetune, predict, report, run
--only/--from/--until, fill-mask's and predict's inputs, any path option) as a careless user meets them.

Each case is one line that names the key or option at fault (not the wrong one, not only the file),
exit code 1, no traceback and no internal error, and nothing built or written. The classes fixed:

* a task's train/dev/test file that is missing or a folder names its key (it said "the task's
  train/dev/test"); an init_from or --checkpoint that is a file says so and names its key or option
  (it said "no such model directory");
* predict named the task's settings "task.format", "task.text_column" instead of finetune.tasks.NAME...,
  a plain .txt of lines gets the hint to pipe it on stdin, and another task's --checkpoint is said aloud;
* bytes that are not UTF-8 on stdin were a tokenizer's internal TypeError (tests/bad_inputs/stdin);
* a folder where a file belongs (or the reverse) for any path option was click's usage error, exit 2;
* an --output whose folder is missing, or a path through a file, named the wrong path or "free space";
* run --only beside --from/--until ignored them silently, and --until finetune/TASK ran every task;
* a phase's batch size was blamed on pretrain.batch_size, and a phase longer than model.init_from's
  positions failed only once the phases before it had trained, naming pairs.max_seq_length.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from bertwb.cli import cli
from conftest import Project, assert_one_line_error, make_documents, tiny_model_dir, write_bert_format
from test_bad_inputs import STDIN_LINES

BAD = Path(__file__).resolve().parent / "bad_inputs"


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A classify and a tag task fine-tuned for two steps from a tiny random model (init_from in the finetune
    section)."""
    root = tmp_path_factory.mktemp("messages")
    tiny_model_dir(root / "model")
    write_bert_format(root / "corpus" / "a.txt", make_documents(20, seed=2))
    (root / "train.csv").write_text("text,label\n" + "".join(f"the ship sail {i},{'ab'[i % 2]}\n" for i in range(8)))
    (root / "lines.txt").write_text("the ship\nthe sail\n")
    (root / "train.conll").write_text("the O\nship B-X\n\nsail O\nthe B-X\n\nthe O\nsail B-X\n\n")
    (root / "folder").mkdir()
    project = Project(root)
    project.write_config(yaml.safe_dump({"ingest": {"inputs": ["corpus"]}, "finetune": {
        "steps": 2, "batch_size": 2, "max_seq_length": 32, "init_from": "model",
        "tasks": {"topic": {"type": "classify", "train": "train.csv", "dev": "train.csv"},
                  "ner": {"type": "tag", "train": "train.conll"}}}}))
    project.run("finetune", "-q")
    return project


def _invoke(project: Project, args: list[str], stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(cli, [args[0], "--config", str(project.config), *args[1:]], input=stdin)


def _built(project: Project) -> dict[str, int]:
    """What the workspace holds, by file, with its modification time: a refusal changes none of it."""
    return {str(p.relative_to(project.workspace)): p.stat().st_mtime_ns
            for p in project.workspace.rglob("*") if p.is_file() and p.name != ".lock"}


T = "finetune.tasks.topic"
CASES = {
    "train-missing": (["finetune", "topic", "--set", f"{T}.train=missing.csv"],
                      f"{T}.train: {{root}}/missing.csv: no such file; give the task's train file"),
    "train-folder": (["finetune", "topic", "--set", f"{T}.train=folder"],
                     f"{T}.train: {{root}}/folder: is a folder, not a file"),
    "dev-missing": (["finetune", "topic", "--set", f"{T}.dev=missing.csv"],
                    f"{T}.dev: {{root}}/missing.csv: no such file; give the task's dev file"),
    "test-folder": (["finetune", "topic", "--set", f"{T}.test=folder"], f"{T}.test: {{root}}/folder: is a folder"),
    "task-init-from-file": (["finetune", "topic", "--set", f"{T}.init_from=train.csv"],
                            f"{T}.init_from: {{root}}/train.csv: is a file, not a model directory"),
    "section-init-from-missing": (["finetune", "topic", "--set", "finetune.init_from=nosuch"],
                                  "finetune.init_from: {root}/nosuch: no such model directory"),
    "predict-txt-lines": (["predict", "topic", "{root}/lines.txt"],
                          f"set {T}.format or rename the file (for plain text, one input per line, give it on "
                          "stdin: bertwb predict topic < {root}/lines.txt)"),
    "predict-no-column": (["predict", "topic", str(BAD / "corpus" / "no_text_column.csv")],
                          f"no column 'text' (has: id, body); set {T}.text_column"),
    "predict-checkpoint-file": (["predict", "topic", "--checkpoint", "{root}/train.csv"],
                                "--checkpoint: {root}/train.csv: is a file, not a model directory"),
    "predict-input-folder": (["predict", "topic", "{root}/folder"],
                             "INPUT_FILE {root}/folder is a folder, where a file belongs"),
    "predict-output-folder": (["predict", "topic", "--output", "{root}/folder"],
                              "--output {root}/folder is a folder, where a file belongs"),
    "predict-output-no-folder": (["predict", "topic", "--output", "{root}/no/such/x.jsonl"],
                                 "--output {root}/no/such/x.jsonl: its folder {root}/no/such does not exist"),
    "sql-output-through-a-file": (["sql", "select 1 as x", "--output", "{root}/lines.txt/x.csv"],
                                  "--output {root}/lines.txt/x.csv: {root}/lines.txt is a file, not a folder"),
    "report-output-file": (["report", "--output", "{root}/lines.txt"],
                           "--output {root}/lines.txt is a file, where a folder belongs"),
    "report-through-a-file": (["report", "--output", "{root}/lines.txt/report"],
                              "{root}/lines.txt is a file, where a folder is needed"),
    "config-folder": (["status", "--config", "{root}/folder"], "--config {root}/folder is a folder"),
    "run-only-and-from": (["run", "--only", "ingest", "--from", "vocab"],
                          "--only runs just the stages it names, so --from/--until beside it would be ignored"),
    "run-until-an-instance": (["run", "--until", "finetune/topic"],
                              "--until takes a stage (finetune), not one of its instances (finetune/topic); run one "
                              "instance with --only finetune/topic"),
    "run-from-a-typo": (["run", "--from", "pretrian"], "no stage called 'pretrian'; did you mean 'pretrain'?"),
    "run-only-a-capital": (["run", "--only", "Ingest"], "did you mean 'ingest'?"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_failure_of_the_new_commands_is_one_line_naming_the_key(finetuned: Project, case: str):
    args, line = CASES[case]
    root = str(finetuned.root)
    before = _built(finetuned)
    result = _invoke(finetuned, [arg.format(root=root) for arg in args], stdin=b"the ship\n")
    assert_one_line_error(result, line.format(root=root))
    assert "internal error" not in result.output
    assert _built(finetuned) == before
    assert not (finetuned.root / "no").exists() and sorted(p.name for p in (finetuned.root / "folder").iterdir()) == []


def test_predict_with_another_tasks_model_says_which_task_it_predicts(finetuned: Project):
    """--checkpoint of the tag task's model for `predict topic` (a classify task) printed tags without a word."""
    result = _invoke(finetuned, ["predict", "topic", "--checkpoint", str(finetuned.workspace / "finetune" / "ner")],
                     stdin=b"the ship\n")
    assert result.exit_code == 0 and '"entities"' in result.stdout
    assert "is a tag model, but finetune.tasks.topic is classify: predicting as the model was trained (tag)" \
        in result.output


@pytest.mark.parametrize("name", sorted(p.name for p in (BAD / "stdin").iterdir()))
def test_bad_inputs_stdin_of_predict(finetuned: Project, name: str):
    """Issue #25: `bertwb predict TASK < binary` was "internal error: TypeError: TextEncodeInput must be ..."."""
    result = _invoke(finetuned, ["predict", "topic"], stdin=(BAD / "stdin" / name).read_bytes())
    assert_one_line_error(result, STDIN_LINES[name].split(";")[0])  # fill-mask's line, its hint aside
    assert "internal error" not in result.output


def test_the_same_commands_work_when_the_input_is_right(finetuned: Project, tmp_path: Path):
    """The control: the task predicts piped lines into a new file, and run takes a stage for --until."""
    out = tmp_path / "p.jsonl"
    _invoke(finetuned, ["predict", "topic", "--output", str(out)], stdin="the ship\nthe café\n".encode())
    assert len(out.read_text().splitlines()) == 2
    assert _invoke(finetuned, ["run", "--until", "ingest", "-q"]).exit_code == 0


# --- phases: a phase's setting is named as the phase's key, or the section's when it is inherited -----------

PHASES = ["--set", "pretrain.phases.short.max_seq_length=16", "--set", "pretrain.phases.short.steps=2",
          "--set", "pretrain.phases.long.steps=2", "--set", "pretrain.log_every=1"]


@pytest.mark.parametrize("override, line", [
    ("pretrain.phases.short.batch_size=100000", "pretrain.phases.short.batch_size 100000 is more than the "),
    ("pretrain.batch_size=100000", "pretrain: pretrain.batch_size 100000 is more than the "),  # every phase's
])
def test_a_phases_batch_size_is_blamed_where_it_is_set(trainer: Project, override: str, line: str):
    """It said "pretrain.batch_size" for a phase's own batch_size, which the user had not touched."""
    result = trainer.run("run", "--until", "pretrain", *PHASES, "--set", override, expect=None)
    assert_one_line_error(result, line)
    assert not list(trainer.workspace.glob("pretrain-runs/*/*/checkpoints/*"))


def test_a_phase_longer_than_the_init_from_model_fails_before_the_first_phase_trains(trainer: Project):
    """It failed only when the long phase began, after the short one had trained, naming pairs.max_seq_length."""
    model = tiny_model_dir(trainer.root / "model", 64)
    result = trainer.run("run", "--until", "pretrain", *PHASES, "--set", "pretrain.phases.long.max_seq_length=100",
                         "--set", f"model.init_from={model}", "--set", f"vocab.from_file={model / 'vocab.txt'}",
                         "--set", "vocab.max_unk_rate=1",  # the tiny model knows five words of the corpus
                         expect=None)
    assert_one_line_error(result, f"pretrain.phases.long.max_seq_length 100 is more than the 64 positions of {model}")
    assert "pretrain short: step" not in result.output


# --- a task's setting is blamed where it was given: the task's key, the finetune section's it inherits, --set --

PROVENANCE = """\
finetune:
  steps: 2
  init_from: model
  {section}
  tasks:
    topic:
      type: classify
      train: train.csv
      {task}
"""  # the section's setting on line 4, the task's on line 9


@pytest.mark.parametrize("section, task, args, line", [
    # checked on load
    ("lr: 2.0", "", [], "bertwb.yaml line 4: finetune.lr must be between 0.0 and 1.0, got 2.0"),
    ("lr: 1.0e-4", "lr: 2.0", [], "bertwb.yaml line 9: finetune.tasks.topic.lr must be between 0.0 and 1.0"),
    ("", "", ["--set", "finetune.lr=2"], "--set finetune.lr: finetune.lr must be between 0.0 and 1.0"),
    # checked once the task runs: the task inherited the section's value, or set its own
    ("batch_size: 64", "", [], "bertwb.yaml line 4: finetune.batch_size 64 is more than the 8 training features"),
    ("batch_size: 2", "batch_size: 64", [], "bertwb.yaml line 9: finetune.tasks.topic.batch_size 64 is more than"),
    ("", "", ["--set", "finetune.batch_size=64"], "--set finetune.batch_size 64 is more than the 8 training"),
    ("", "", ["--set", "finetune.tasks.topic.batch_size=64"], "--set finetune.tasks.topic.batch_size 64 is more"),
    ("max_seq_length: 200", "", [], "bertwb.yaml line 4: finetune.max_seq_length 200 is more than the 128"),
    ("batch_tokens: 4", "", [], "bertwb.yaml line 4: finetune.batch_tokens 4 holds 0 of the longest examples"),
    ("device: gpu", "", ["run", "--only", "finetune/topic"],
     "bertwb.yaml line 4: finetune.device 'gpu' is not a device"),
    ("device: gpu", "", [], "bertwb.yaml line 4: finetune.device 'gpu' is not a device"),  # as launched
    ("device: cpu", "device: gpu", [], "bertwb.yaml line 9: finetune.tasks.topic.device 'gpu' is not a device"),
    ("device: cpu", "", ["--device", "gpu"], "--set finetune.device 'gpu' is not a device"),  # --device is a --set
    # the command line beats the task's own device: --device sets each task's too
    ("", "device: cpu", ["--device", "gpu"], "--set finetune.tasks.topic.device 'gpu' is not a device"),
    ("", "init_from: pretrain", [], "bertwb.yaml line 9: finetune.tasks.topic.init_from is pretrain, but pretrain"),
])
def test_a_tasks_setting_is_blamed_where_it_was_given(tmp_path: Path, section: str, task: str, args: list[str],
                                                      line: str):
    """Issue #25: a value a task inherits from the finetune section was blamed on finetune.tasks.NAME.key."""
    tiny_model_dir(tmp_path / "model", max_positions=128)
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"the ship {i},{'ab'[i % 2]}\n" for i in range(8)))
    project = Project(tmp_path)
    project.write_config(PROVENANCE.format(section=section, task=task))
    command = args if args[:1] == ["run"] else ["finetune", "topic", *args]
    assert_one_line_error(_invoke(project, command), line)
    assert not (project.workspace / "finetune" / "topic").exists()


def test_an_inherited_init_from_is_blamed_on_the_finetune_section(tmp_path: Path):
    (tmp_path / "train.csv").write_text("text,label\nthe ship,a\n")
    project = Project(tmp_path)
    project.write_config(PROVENANCE.replace("init_from: model", "init_from: pretrain").format(section="", task=""))
    assert_one_line_error(_invoke(project, ["finetune", "topic"]),
                          "bertwb.yaml line 3: finetune.init_from is pretrain, but pretrain has not run")


@pytest.mark.parametrize("content", ["{\"type\": \"classify\", \"text_col", "[1, 2, 3]"])
def test_a_damaged_task_file_is_one_line_and_predicts_nothing(finetuned: Project, tmp_path: Path, content: str):
    """A torn or wrong-shape task.json was a ValueError or AttributeError: `internal error`."""
    model = tmp_path / "model"
    shutil.copytree(finetuned.workspace / "finetune" / "topic", model)
    (model / "task.json").write_text(content)
    result = _invoke(finetuned, ["predict", "topic", "--checkpoint", str(model)], stdin=b"the ship\n")
    assert_one_line_error(result, f"{model}/task.json: ", "; restore it, or fine-tune")
    assert result.stdout == ""


# --- seeds: a number past what numpy, torch and DuckDB take was an internal error at the stage ---------------

@pytest.mark.parametrize("key", ["ingest.seed", "vocab.seed", "pairs.seed", "pretrain.seed", "finetune.seed",
                                 "finetune.tasks.topic.seed", "pretrain.phases.a.seed"])
def test_a_seed_too_big_for_the_libraries_is_refused_on_load(finetuned: Project, key: str):
    """`finetune --set ...seed=99999999999999999999` was "internal error: ValueError: Overflow when unpacking
    long long" once training began (OverflowError in ingest); every seed is now checked with the config."""
    result = _invoke(finetuned, ["status", "--set", f"{key}=99999999999999999999"])
    assert_one_line_error(result, f"{key} must be between 0 and 4294967295, got 99999999999999999999")


def test_every_seed_of_the_config_has_the_bound():
    import dataclasses

    from bertwb.config import SECTIONS, SEED_MAX, FinetuneTaskConfig, PretrainPhase

    for cls in [*SECTIONS.values(), FinetuneTaskConfig, PretrainPhase]:
        for f in dataclasses.fields(cls):
            if f.name == "seed":
                assert f.metadata["max"] == SEED_MAX, cls.__name__


def test_a_missing_input_is_called_missing_in_the_stale_reason(finetuned: Project):
    """`status` said "input added: .../missing.csv" of a file that is not there; the stage then fails on it."""
    import json

    result = _invoke(finetuned, ["status", "--json", "--set", f"{T}.train=missing.csv"])
    row = next(row for row in json.loads(result.stdout) if row["stage"] == "finetune/topic")
    assert "input added: missing.csv (missing)" in row["reason"]  # named as the config names it


def test_reports_note_on_a_damaged_database_gives_the_databases_own_fix(trainer: Project, tmp_path: Path):
    """It ended "rerun `bertwb report` once it is free" whatever the reason, a lock's fix for a damaged file."""
    import json

    (trainer.workspace / "bertwb.duckdb").write_bytes(b"not a database")
    report = json.loads(_invoke(trainer, ["report", "--json", "--output", str(tmp_path / "r")]).stdout)
    [note] = [note for note in report["notes"] if note.startswith("vocab: no fertility figure")]
    assert "move it aside (or delete it) and run `bertwb run`" in note and "once it is free" not in note
