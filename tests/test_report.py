"""bertwb report: every figure exists at its fixed size, really plots data, follows its data, and the page
embeds them; it works on a run that is still going, with the database held by another process.

One workspace is built and reported once per module (`reported`: a 300-document corpus, a 256-token
vocab, 64-token pairs, 12 pre-training steps logged every step with validation every 4, evaluate,
and a two-label classification task fine-tuned for 12 steps); each test works on its own copy.

"Plots data" is measured on the colourful pixels: axes, ticks and text are black or grey, while every
line, dot, bar and colour map of the data is drawn in saturated colours, so an empty plot has none
and a plot whose data changed has them elsewhere.
"""

from __future__ import annotations

import base64
import html
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from bertwb.configfile import load_config
from bertwb.report import sources
from bertwb.workspace import Workspace
from conftest import (Project, assert_one_line_error, make_documents, pretrain_config, tiny_model_dir,
                      write_bert_format)

CONFIG = pretrain_config(pretrain={"eval_every": 4, "checkpoint_every": 6}, finetune={
    "steps": 12, "batch_size": 16, "lr": 1.0e-3, "max_seq_length": 32, "log_every": 2, "eval_every": 4,
    "tasks": {"topic": {"type": "classify", "train": "train.csv", "dev": "dev.csv"}}})
FIGURES = ["pairs_length", "pairs_mask_kinds", "vocab_fertility", "pretrain_loss", "pretrain_accuracy",
           "pretrain_lr", "pretrain_tokens_per_s", "evaluate", "finetune_topic_curves", "finetune_topic_confusion"]
WIDTH, HEIGHT = 800, 450  # 8 × 4.5 inches at 100 dpi


def _labelled_rows(rng: random.Random, n: int) -> str:
    words = {"sea": "ship sail harbour wave captain anchor", "food": "bread oven flour butter soup salt"}
    rows = ["text,label"]
    for _ in range(n):
        label = rng.choice(sorted(words))
        rows.append(" ".join(rng.choice(words[label].split()) for _ in range(6)) + f",{label}")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    write_bert_format(root / "corpus" / "a.txt", make_documents(300))
    rng = random.Random(0)
    (root / "train.csv").write_text(_labelled_rows(rng, 96))
    (root / "dev.csv").write_text(_labelled_rows(rng, 32))
    project = Project(root)
    project.write_config(CONFIG)
    project.run("run")
    project.run("report")
    return root


@pytest.fixture
def project(reported: Path, tmp_path: Path) -> Project:
    shutil.copytree(reported, tmp_path / "p")
    return Project(tmp_path / "p")


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.int16)


def _data_pixels(pixels: np.ndarray) -> np.ndarray:
    """Where the image is colourful (saturated): the data, never the black and grey axes and text."""
    return (pixels.max(axis=2) - pixels.min(axis=2)) > 60


def _figures(project: Project, folder: Path | None = None) -> dict[str, Path]:
    return {path.stem: path for path in sorted((folder or project.workspace / "report" / "figures").glob("*.png"))}


def _run_dir(project: Project, runs: str) -> Path:
    return next((project.workspace / runs).rglob("metrics.jsonl")).parent


def test_every_figure_is_drawn_at_the_fixed_size_plots_data_and_is_embedded_in_the_page(project: Project):
    figures = _figures(project)
    assert sorted(figures) == sorted(FIGURES)
    page = (project.workspace / "report" / "index.html").read_text()
    for name, path in figures.items():
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size == (WIDTH, HEIGHT), name
        pixels = _pixels(path)
        assert pixels.std() > 20 and _data_pixels(pixels).sum() > 300, f"{name} looks blank"
        embedded = re.search(rf"<figure id='{name}'><img alt='[^']*' src='data:image/png;base64,([^']+)'>", page)
        assert embedded and base64.b64decode(embedded.group(1)) == path.read_bytes(), name
    assert "<script" not in page and "http" not in page  # self-contained: nothing fetched, nothing run
    evaluate = json.loads((project.workspace / "evaluate" / "metrics.json").read_text())
    dev = json.loads((project.workspace / "finetune" / "topic" / "metrics.json").read_text())["dev"]
    assert f"MLM acc {100 * evaluate['mlm_acc']:.2f}%" in page and f"dev accuracy {dev['accuracy']:.4f}" in page
    assert "not run yet" not in page and "fresh, finished" in page


def test_every_figure_changes_when_its_data_changes(project: Project):
    before = {name: _data_pixels(_pixels(path)) for name, path in _figures(project).items()}
    pretrain_log = _run_dir(project, "pretrain-runs") / "metrics.jsonl"
    with open(pretrain_log, "a", encoding="utf-8") as log:
        for step in range(13, 21):
            valid = {"valid_loss": 3.0, "valid_mlm_loss": 2.5, "valid_nsp_loss": 0.5, "valid_mlm_acc": 0.4,
                     "valid_nsp_acc": 0.8} if step % 4 == 0 else {}
            log.write(json.dumps({"step": step, "loss": 4.0 - step / 10, "mlm_loss": 3.5 - step / 10, "nsp_loss": 0.5,
                                  "mlm_acc": step / 40, "nsp_acc": 0.75, "lr": 1e-3, "tokens_per_s": 30000.0 + step,
                                  **valid}) + "\n")
    with open(_run_dir(project, "finetune-runs") / "metrics.jsonl", "a", encoding="utf-8") as log:
        for step in (14, 16, 18, 20):
            log.write(json.dumps({"step": step, "loss": 0.1, "acc": 0.2, "lr": 1e-4, "tokens_per_s": 900.0,
                                  "valid_loss": 0.1, "valid_accuracy": 0.2, "valid_macro_f1": 0.2}) + "\n")
    results_path = project.workspace / "finetune" / "topic" / "metrics.json"
    results = json.loads(results_path.read_text())
    results["dev"]["confusion_matrix"] = [[3, 11], [9, 9]]
    results_path.write_text(json.dumps(results))
    evaluate_path = project.workspace / "evaluate" / "metrics.json"
    evaluate = json.loads(evaluate_path.read_text())
    evaluate.update(mlm_acc=0.6, nsp_acc=0.95, by_kind={kind: {"positions": 10, "mlm_acc": 0.5 + i / 10}
                                                         for i, kind in enumerate(("mask", "random", "keep"))})
    evaluate_path.write_text(json.dumps(evaluate))
    project.run("vocab", "--set", "vocab.vocab_size=64")  # words now take several pieces each
    project.run("pairs", "--set", "vocab.vocab_size=64", "--set", "pairs.max_seq_length=48", "--set", "pairs.seed=5")

    printed = project.run("report").output
    assert f"wrote {project.workspace / 'report' / 'index.html'} with {len(FIGURES)} figures" in printed
    after = {name: _data_pixels(_pixels(path)) for name, path in _figures(project).items()}
    assert sorted(after) == sorted(before)
    unchanged = [name for name in FIGURES if (before[name] != after[name]).sum() < 100]
    assert not unchanged, f"figures that did not follow their data: {unchanged}"


def test_a_run_still_going_is_drawn_from_its_partial_log_and_stages_not_run_are_listed(project: Project):
    """No finished pretrain (no manifest, no stage output), a torn last line, evaluate and finetune never run."""
    ws = project.workspace
    for stage in ("pretrain", "evaluate", "finetune", "finetune-runs"):
        shutil.rmtree(ws / stage)
    for manifest in ("pretrain.json", "evaluate.json", "finetune"):
        path = ws / "manifests" / manifest
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    log = _run_dir(project, "pretrain-runs") / "metrics.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:5]) + "\n" + lines[5][:25])  # step 6 is being written

    result = project.run("report", "--json")
    report = json.loads(result.stdout)
    drawn = [figure["name"] for figure in report["figures"]]
    assert drawn == ["pairs_length", "pairs_mask_kinds", "vocab_fertility", "pretrain_loss", "pretrain_accuracy",
                     "pretrain_lr", "pretrain_tokens_per_s"]
    assert sorted(_figures(project)) == sorted(drawn)  # the figures of the stages gone were removed
    assert report["stages"]["evaluate"] == "not run yet" and report["stages"]["finetune/topic"] == "not run yet"
    assert report["stages"]["pretrain"] == "not run yet; a run is going or was interrupted at step 5"
    loss = _pixels(ws / "report" / "figures" / "pretrain_loss.png")
    assert _data_pixels(loss).sum() > 300
    page = (ws / "report" / "index.html").read_text()
    assert "step 5, running or interrupted" in page and page.count("not run yet") >= 2


def test_damaged_lines_of_a_training_log_are_skipped_with_one_warning_naming_the_file_and_lines(project: Project):
    """A line in the middle of pretrain's log that is not JSON, and a torn last line (a run killed mid-write):
    the report draws the other lines and says in one line, on stderr and on the page, which file, which lines
    and how many it left out (`bertwb report` skipped them silently before)."""
    log = _run_dir(project, "pretrain-runs") / "metrics.jsonl"
    lines = log.read_text().splitlines()
    assert len(lines) == 12
    lines[3] = "[bold]not json\x00 {"  # line 4: damage, brackets and all
    lines[11] = lines[11][:25]  # line 12: torn
    log.write_text("\n".join(lines))

    result = project.run("report")
    note = (f"pretrain: skipped 2 damaged lines of {log} (lines 4, 12: not a JSON object with a step); "
            "the figures leave them out")
    assert [line for line in result.stderr.splitlines() if line.startswith("warning:")] == [f"warning: {note}"]
    assert f"wrote {project.workspace / 'report' / 'index.html'} with {len(FIGURES)} figures" in result.output
    page = (project.workspace / "report" / "index.html").read_text()
    assert f"<li class='note'>{html.escape(note, quote=True)}</li>" in page
    assert "step 11, running or interrupted" in page  # steps 1-3 and 5-11 drawn: the last whole line is step 11
    report = json.loads(project.run("report", "--json").stdout)
    assert note in report["notes"]


# What `bertwb pretrain` holds while it trains: the workspace lock and a read-write database connection;
# and what it does: append whole lines to the run's metrics.jsonl.
_TRAINING_STAND_IN = """
import json, sys
from pathlib import Path
from bertwb.workspace import Workspace
ws, log = Workspace(Path(sys.argv[1])), Path(sys.argv[2])
with ws.lock("bertwb pretrain"):
    con = ws.connect()
    with open(log, "a", encoding="utf-8") as handle:
        for step in range(13, 16):
            handle.write(json.dumps({"step": step, "loss": 5.0, "mlm_loss": 4.4, "nsp_loss": 0.6, "mlm_acc": 0.05,
                                     "nsp_acc": 0.5, "lr": 1e-4, "tokens_per_s": 9000.0}) + "\\n")
    print("training", flush=True)
    sys.stdin.read()
"""


def test_while_another_process_trains_it_draws_the_run_so_far_and_says_the_database_is_busy(project: Project):
    log = _run_dir(project, "pretrain-runs") / "metrics.jsonl"
    training = subprocess.Popen([sys.executable, "-c", _TRAINING_STAND_IN, str(project.workspace), str(log)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert training.stdout.readline() == "training\n"
        report = json.loads(project.run("report", "--json").stdout)  # it would fail on the lock if it took it
    finally:
        training.stdin.close()
        training.wait(timeout=30)
    names = [figure["name"] for figure in report["figures"]]
    assert "pretrain_loss" in names and "pairs_length" in names  # the pairs figures need no database
    assert "vocab_fertility" not in names
    assert any(note.startswith("vocab: no fertility figure") for note in report["notes"]), report["notes"]
    # the config asks for the 12 steps the stage has done; the run beyond them is the other process's
    assert re.fullmatch(r"fresh, finished \S+; a run is going or was interrupted at step 15",
                        report["stages"]["pretrain"]), report["stages"]["pretrain"]


def test_fertility_is_the_pieces_per_word_the_vocab_stage_reports(project: Project):
    cfg = load_config(project.config)
    ws = Workspace(cfg.resolve(cfg.workspace.dir))
    fertility = sources.fertility(ws)
    vocab = json.loads((project.workspace / "manifests" / "vocab.json").read_text())["summary"]
    assert fertility.sentences == fertility.of_sentences == vocab["sentences"]  # small corpus: the whole of it
    assert fertility.tokens == vocab["tokens"] and fertility.mean == pytest.approx(vocab["tokens_per_word"], abs=1e-4)
    assert int((np.arange(len(fertility.words_by_pieces)) * fertility.words_by_pieces).sum()) == fertility.tokens


def test_output_folder_and_json(project: Project, tmp_path: Path):
    shutil.rmtree(project.workspace / "report")
    result = project.run("report", "--output", str(tmp_path / "out"), "--json")
    report = json.loads(result.stdout)
    assert report["page"] == str(tmp_path / "out" / "index.html") and Path(report["page"]).is_file()
    assert sorted(figure["name"] for figure in report["figures"]) == sorted(FIGURES)
    assert all(Path(figure["path"]).parent == tmp_path / "out" / "figures" for figure in report["figures"])
    assert not (project.workspace / "report").exists()


def test_no_workspace_or_nothing_to_report_is_one_line(tmp_path: Path):
    empty = Project(tmp_path)
    empty.write_config("ingest:\n  inputs: [corpus]\n")
    assert_one_line_error(empty.run("report", expect=None), "no workspace at", "bertwb run")
    (tmp_path / ".bertwb").mkdir()
    assert_one_line_error(empty.run("report", expect=None), "nothing to report", "bertwb run")


def _tiny_tasks(root: Path, names: list[str]) -> Project:
    """Classification tasks ``names`` fine-tuned for 2 steps from a tiny random model: a report in seconds."""
    rows = "text,label\n" + "".join(f"ship number {i},{'sea' if i % 2 else 'food'}\n" for i in range(8))
    (root / "train.csv").write_text(rows)
    model = tiny_model_dir(root / "model")
    tasks = {name: {"type": "classify", "train": "train.csv", "dev": "train.csv", "init_from": str(model),
                    "seed": seed} for seed, name in enumerate(names)}
    project = Project(root)
    project.write_config(yaml.safe_dump({"finetune": {"steps": 2, "batch_size": 4, "max_seq_length": 16,
                                                      "eval_every": 1, "tasks": tasks}}, allow_unicode=True))
    project.run("finetune")
    return project


def test_tasks_whose_names_differ_only_in_non_ascii_letters_or_case_get_figures_of_their_own(tmp_path: Path):
    """Issue #25: tasks ``café`` and ``cafè`` shared one figure file (both ``finetune_caf__...``), so the
    report showed one task's curves under both; ``NER`` and ``ner`` would share one on a case-insensitive disk."""
    tasks = ["café", "cafè", "NER", "ner"]
    project = _tiny_tasks(tmp_path, tasks)
    report = json.loads(project.run("report", "--json").stdout)
    curves = {figure["title"]: Path(figure["path"]) for figure in report["figures"]
              if figure["name"].endswith("_curves")}
    assert sorted(curves) == sorted(f"{name}: training" for name in tasks)
    assert len({path.name.lower() for path in curves.values()}) == len(tasks)
    assert all(path.is_file() for path in curves.values())
    assert "finetune_ner_curves.png" in {path.name for path in curves.values()}  # a plain name stays as it was


def test_a_report_killed_between_its_folder_renames_is_put_back_by_the_next_report(tmp_path: Path):
    """Issue #25: every folder bertwb replaces by renaming is repaired after a crash between the renames;
    the report's own folder too (outside any stage: the next report repairs it before it builds)."""
    project = _tiny_tasks(tmp_path, ["topic"])
    project.run("report")
    folder = project.workspace / "report"
    before = sorted(path.name for path in (folder / "figures").iterdir())
    killed = subprocess.run([sys.executable, "-m", "bertwb", "report", "--config", str(project.config)],
                            env={**os.environ, "BERTWB_FAULT": "report_mid_swap:exit"}, capture_output=True, text=True)
    assert killed.returncode == 137, killed.stdout + killed.stderr
    assert not folder.exists()  # set aside, the new one not yet in
    project.run("report")
    assert sorted(path.name for path in (folder / "figures").iterdir()) == before
    assert not [path for path in project.workspace.iterdir() if ".old-" in path.name or ".tmp-" in path.name]
