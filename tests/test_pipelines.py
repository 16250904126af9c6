"""pipelines/Makefile driven by GNU make as a user drives it: the tiny pipeline, a second `make` that
does nothing, a config edit that reruns only what it changes, the sweep with `make compare`, and the
fine-tuning of an imported Hugging Face BERT. A copy of pipelines/ is used, so edits stay in the test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, REPO

# Seconds, not minutes: a few steps of each training stage (make passes EXTRA to every bertwb command).
EXTRA = ("--set pretrain.steps=6 --set pretrain.eval_every=3 --set pretrain.eval_batches=2 "
         "--set pretrain.checkpoint_every=3 --set finetune.steps=4 --set vocab.vocab_size=512")
STAGES = ["ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune/sentiment"]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of pipelines/ beside a link to the sample corpus, as the configs' ../sample_corpus expects."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("runs"))
    (root / "sample_corpus").symlink_to(REPO / "sample_corpus")
    return root / "pipelines"


def make(folder: Path, *args: str, extra: str = EXTRA) -> subprocess.CompletedProcess:
    result = subprocess.run(["make", "-C", str(folder), f"BERTWB={PYTHON} -m bertwb", f"EXTRA={extra}", *args],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


COMMANDS = {"ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune", "import-hf", "compare", "status"}


def bertwb_commands(result: subprocess.CompletedProcess) -> list[str]:
    """The bertwb commands make ran (it echoes each recipe line), by name."""
    lines = [line for line in result.stdout.splitlines() if " -m bertwb " in line]
    return [next(word for word in line.split() if word in COMMANDS) for line in lines]


def manifest_times(workspace: Path) -> dict[str, int]:
    return {stage: (workspace / "manifests" / f"{stage}.json").stat().st_mtime_ns for stage in STAGES}


def test_make_runs_the_pipeline_once_and_then_only_what_a_config_edit_changes(pipelines: Path):
    first = make(pipelines)
    tiny = pipelines / "runs" / "tiny"
    assert bertwb_commands(first) == ["ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune"]
    assert json.loads((tiny / "evaluate" / "metrics.json").read_text())["step"] == 6
    assert json.loads((tiny / "finetune" / "sentiment" / "metrics.json").read_text())["dev"]["examples"] == 300
    built = manifest_times(tiny)

    second = make(pipelines)
    assert bertwb_commands(second) == [] and "Nothing to be done for 'all'" in second.stdout
    assert manifest_times(tiny) == built

    config = pipelines / "tiny-cpu.yaml"
    config.write_text(config.read_text().replace("  lr: 1e-3\n", "  lr: 5e-4\n", 1))
    third = make(pipelines)
    assert len(bertwb_commands(third)) == 6  # make asks every stage: the config is newer than each manifest
    stderr = third.stderr
    for stage in ("ingest", "vocab", "pairs"):
        assert f"{stage}: fresh" in stderr and f"{stage}: running" not in stderr
    assert "pretrain: running (stale: pretrain.lr 0.001 → 0.0005)" in stderr
    assert "evaluate: running" in stderr and "finetune/sentiment: running" in stderr
    assert bertwb_commands(make(pipelines)) == []


def test_the_sweep_builds_one_workspace_per_setting_and_compare_tables_them(pipelines: Path):
    sweep = ["VOCAB_SIZES=512", "MASK_PROBS=0.15 0.3"]
    first = make(pipelines, "compare", *sweep, extra=EXTRA.replace(" --set vocab.vocab_size=512", ""))
    workspaces = [pipelines / "runs" / "vocab512-mask0.15", pipelines / "runs" / "vocab512-mask0.3"]
    for workspace, prob in zip(workspaces, (0.15, 0.3), strict=True):
        assert (workspace / "manifests" / "evaluate.json").is_file()
        assert json.loads((workspace / "manifests" / "pairs.json").read_text())["params"]["pairs"]["masked_lm_prob"] \
            == prob
    assert "--set vocab.vocab_size=512 --set pairs.masked_lm_prob=0.3" in first.stdout
    table = first.stdout[first.stdout.index("-m bertwb compare"):]
    row = next(line for line in table.splitlines() if "pairs.masked_lm_prob" in line)
    assert "0.15" in row and "0.3" in row
    assert "vocab.vocab_size" not in table  # the same in both: not a difference
    mask_rates = [json.loads((w / "manifests" / "pairs.json").read_text())["summary"]["mask_rate"] for w in workspaces]
    assert mask_rates[0] < 0.2 < mask_rates[1]
    again = make(pipelines, "compare", *sweep, extra=EXTRA.replace(" --set vocab.vocab_size=512", ""))
    assert bertwb_commands(again) == ["compare"]


def test_make_finetune_imports_a_hugging_face_bert_and_fine_tunes_it(pipelines: Path, tmp_path: Path):
    transformers = pytest.importorskip("transformers")
    missing = subprocess.run(["make", "-C", str(pipelines), "finetune"], capture_output=True, text=True)
    assert missing.returncode != 0 and "set HF_MODEL to a Hugging Face BERT folder" in missing.stderr

    # A small published-style BERT: random weights, a vocabulary that covers the sample texts.
    vocab = tmp_path / "tok" / "vocab.txt"
    vocab.parent.mkdir()
    words = sorted({word for line in (REPO / "sample_corpus" / "finetune" / "sentiment_train.csv").read_text().lower()
                    .splitlines() for word in line.replace(",", " ").replace(".", " ").split()})
    tokens = dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", ".", ";", "'", '"', *words])
    vocab.write_text("\n".join(tokens) + "\n")
    hf = tmp_path / "hf-bert"
    config = transformers.BertConfig(vocab_size=len(tokens), hidden_size=32,
                                     num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    transformers.BertForPreTraining(config).save_pretrained(hf)
    transformers.BertTokenizerFast.from_pretrained(vocab.parent).save_pretrained(hf)

    first = make(pipelines, "finetune", f"HF_MODEL={hf}", extra="--set finetune.steps=4")
    assert bertwb_commands(first) == ["import-hf", "finetune"]
    result = json.loads((pipelines / "runs" / "finetune" / "finetune" / "sentiment" / "metrics.json").read_text())
    assert result["dev"]["examples"] == 300 and 0 <= result["dev"]["accuracy"] <= 1
    assert (pipelines / "runs" / "finetune-model" / "model.safetensors").is_file()
    assert bertwb_commands(make(pipelines, "finetune", f"HF_MODEL={hf}", extra="--set finetune.steps=4")) == []


def fake_bertwb(folder: Path) -> Path:
    """A stand-in for bertwb that logs each command line it gets to ``folder``/asked.log and does nothing else,
    but runs `workspace` and `ingest` as bertwb does: make asks the one which workspace the config names,
    and the other whether its inputs changed (ingest writes its manifest only when it reads them again)."""
    fake = folder / "fake-bertwb"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {folder / "asked.log"}\nfor last; do :; done\n'
                    f'case "$last" in workspace|ingest) exec {PYTHON} -m bertwb "$@";; esac\n')
    fake.chmod(0o755)
    return fake


def init_project(folder: Path) -> None:
    """`bertwb init` in ``folder``, with one small text file in its corpus/."""
    subprocess.run([PYTHON, "-m", "bertwb", "init", str(folder)], check=True, capture_output=True)
    (folder / "corpus" / "a.txt").write_text("One sentence here.\nAnd another one there.\n")


def asked(project: Path, fake: Path, *variables: str) -> list[str]:
    """`make` in ``project`` with ``fake`` for bertwb: the command lines it gave bertwb, in order."""
    subprocess.run(["make", "-C", str(project), f"BERTWB={fake}", *variables], check=True, capture_output=True)
    log = fake.parent / "asked.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def test_the_makefile_init_writes_asks_each_stage_once_and_again_after_a_config_edit(tmp_path: Path):
    """`bertwb init`'s Makefile, with a stand-in for bertwb that logs its command: make's part only."""
    init_project(tmp_path)
    fake = fake_bertwb(tmp_path)

    def stages() -> list[str]:
        return [line.split()[-1] for line in asked(tmp_path, fake) if not line.endswith(" workspace")]

    assert stages() == ["ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune"]
    assert stages() == ["ingest", "finetune"]  # ingest checks its inputs; the tasks decide for themselves
    config = tmp_path / "bertwb.yaml"
    config.write_text(config.read_text() + "\n")
    assert stages() == ["ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune"]


def test_the_makefile_init_writes_rebuilds_when_the_inputs_change_wherever_they_are(tmp_path: Path):
    """Issue: the ingest target watched corpus/ whatever ingest.inputs named, so an edit of a corpus kept
    elsewhere rebuilt nothing, and a removed file went unseen even in corpus/. bertwb now decides."""
    project, elsewhere = tmp_path / "project", tmp_path / "texts"
    init_project(project)
    elsewhere.mkdir()
    (elsewhere / "b.txt").write_text("A text kept outside the project.\n")
    (elsewhere / "c.txt").write_text("A second one.\n")
    config = project / "bertwb.yaml"
    config.write_text(config.read_text().replace("inputs: [corpus]", f"inputs: ['{elsewhere}/*.txt']", 1))
    fake = fake_bertwb(tmp_path)

    def stages() -> list[str]:
        return [line.split()[-1] for line in asked(project, fake) if not line.endswith(" workspace")]

    everything = ["ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune"]
    assert stages() == everything
    (project / "corpus" / "a.txt").write_text("Not an input any more.\n")
    assert stages() == ["ingest", "finetune"]
    (elsewhere / "b.txt").write_text("A text kept outside the project, edited.\n")
    assert stages() == everything
    (elsewhere / "c.txt").unlink()
    assert stages() == everything
    assert stages() == ["ingest", "finetune"]


def test_the_makefile_init_writes_ignores_workdir_and_config_in_the_environment(tmp_path: Path):
    """WORKDIR and CONFIG are common names: exported for something else, they must not move the build."""
    init_project(tmp_path)
    fake = fake_bertwb(tmp_path)
    env = {**os.environ, "WORKDIR": str(tmp_path / "other"), "CONFIG": "other.yaml"}
    subprocess.run(["make", "-C", str(tmp_path), f"BERTWB={fake}"], check=True, capture_output=True, env=env)
    lines = (tmp_path / "asked.log").read_text().splitlines()
    assert lines[0] == "--config bertwb.yaml workspace" and all("other" not in line for line in lines)
    assert (tmp_path / ".bertwb" / "manifests" / "evaluate.json").is_file() and not (tmp_path / "other").exists()


def test_the_makefile_init_writes_builds_in_the_workspace_the_config_names_or_in_workdir(tmp_path: Path):
    """Issue: the Makefile passed --workdir .bertwb whatever bertwb.yaml's workspace.dir said, so a project
    that names another workspace started from nothing in .bertwb. Now bertwb gets the config's workspace and
    make watches its manifests; `make WORKDIR=DIR` builds in DIR; `init --force` keeps the workspace."""
    project = tmp_path / "project"
    init_project(project)
    config = project / "bertwb.yaml"
    config.write_text(config.read_text().replace("\n  dir: .bertwb ", "\n  dir: runs/x  ", 1))
    fake = fake_bertwb(tmp_path)
    stages = ["ingest", "vocab", "pairs", "pretrain", "evaluate"]
    for workspace in ("runs/x", "other"):  # only the right folder exists: touching another one fails make
        (project / workspace / "manifests").mkdir(parents=True)

    commands = [f"--config bertwb.yaml {stage}" for stage in [*stages, "finetune"]]
    assert asked(project, fake) == ["--config bertwb.yaml workspace", *commands]
    assert all((project / "runs/x/manifests" / f"{stage}.json").is_file() for stage in stages)
    assert not (project / ".bertwb").exists()

    elsewhere = asked(project, fake, "WORKDIR=other")  # given: no question, and every command is told
    assert elsewhere == [command.replace(" bertwb.yaml ", " bertwb.yaml --workdir other ") for command in commands]
    assert all((project / "other/manifests" / f"{stage}.json").is_file() for stage in stages)

    built = (project / "runs/x/manifests/vocab.json").stat().st_mtime_ns
    forced = subprocess.run([PYTHON, "-m", "bertwb", "init", str(project), "--force"], capture_output=True, text=True)
    assert forced.returncode == 0, forced.stderr
    assert asked(project, fake) == ["--config bertwb.yaml workspace", *commands]  # a new Makefile: make asks again
    assert (project / "runs/x/manifests/vocab.json").stat().st_mtime_ns > built
    assert not (project / ".bertwb").exists()


def test_the_makefile_init_writes_stops_on_a_config_that_names_no_workspace(tmp_path: Path):
    """A config bertwb cannot load: its own error line, then make's, before any stage is asked."""
    subprocess.run([PYTHON, "-m", "bertwb", "init", str(tmp_path)], check=True, capture_output=True)
    result = subprocess.run(["make", "-C", str(tmp_path), f"BERTWB={PYTHON} -m bertwb", "CONFIG=missing.yaml"],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "missing.yaml: config file not found" in result.stderr
    assert "no workspace make can use" in result.stderr and "give WORKDIR=DIR" in result.stderr
    assert " ingest" not in result.stdout
