"""``bertwb init --recipe``: each recipe writes a config that loads and trains, and bad options are one line.

``continue`` starts from an import-hf folder of a model bertwb exported (first step at lr 0: the weights are
the imported ones, the vocabulary its own, NSP on as its head was trained) and from a Hugging Face masked-LM
folder (no NSP head: NSP off); ``budget`` times a real step here and its run stops at the hours (fake clock).
``init --force``, recipe or not, keeps the old config's workspace.dir, and refuses a config that does not load.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import safetensors.torch
import torch
from click.testing import CliRunner

from bertwb.cli import cli
from bertwb.configfile import load_config
from bertwb.recipes import RECIPES
from conftest import (REPO, BuiltProject, FakeClock, Project, assert_one_line_error, make_documents, run_metrics,
                      write_bert_format)


def _init(*args: str):
    return CliRunner().invoke(cli, ["init", *args])


def _project(root: Path, *recipe: str) -> Project:
    """A project at ``root`` made by ``bertwb init --recipe ...`` around a small generated corpus."""
    write_bert_format(root / "corpus" / "a.txt", make_documents(200))
    result = _init(str(root), *recipe)
    assert result.exit_code == 0, result.output
    return Project(root)


def test_recipe_list_says_what_each_recipe_is_for_in_one_line():
    result = _init("--recipe", "list")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines] == list(RECIPES) == ["continue", "budget", "bert-base", "bert-large"]
    assert all(len(line.split(maxsplit=1)[1]) > 30 for line in lines)


@pytest.mark.parametrize(("args", "needles"), [
    (["--recipe", "cramming"], ["--recipe cramming", "no such recipe", "--recipe list"]),
    (["--recipe", "continue"], ["needs --from DIR"]),
    (["--recipe", "budget"], ["needs --hours H"]),
    (["--recipe", "budget", "--hours", "soon"], ["--hours soon", "above 0"]),
    (["--recipe", "budget", "--hours", "0"], ["--hours 0", "above 0"]),
    (["--recipe", "budget", "--hours", "nan"], ["--hours nan"]),
    (["--recipe", "continue", "--from", "x", "--hours", "1"], ["takes no --hours", "budget"]),
    (["--recipe", "bert-base", "--from", "x"], ["takes no --from", "continue"]),
    (["--hours", "1"], ["--hours goes with a recipe", "--recipe budget"]),
    (["--recipe", "continue", "--from", "missing"], ["--from missing", "no such folder"]),
    # an empty corpus sizes nothing: it timed every preset up to large, for minutes, before
    (["--recipe", "budget", "--hours", "1000"], ["--recipe budget", "no text in corpus", "put the text there first"]),
])
def test_bad_recipe_options_are_one_line_and_write_nothing(tmp_path: Path, args: list[str], needles: list[str]):
    result = _init(str(tmp_path / "p"), *args)
    assert_one_line_error(result, *needles)
    assert not (tmp_path / "p" / "bertwb.yaml").exists()


@pytest.mark.parametrize("size", ["base", "large"])
def test_paper_recipes_are_pipelines_bert_base_yaml(tmp_path: Path, size: str):
    project = _project(tmp_path / "p", "--recipe", f"bert-{size}")
    ours, paper = load_config(project.config), load_config(REPO / "pipelines" / "bert-base.yaml")
    assert ours.model.preset == size
    ours.model.preset = paper.model.preset
    for section in ("workspace", "vocab", "pairs", "model", "pretrain", "evaluate"):
        ours_values = dataclasses.asdict(ours.section(section))
        paper_values = dataclasses.asdict(paper.section(section))
        if section == "pretrain":  # the yaml names the device; phases compared whole
            assert ours_values.pop("device") == paper_values.pop("device") == "cuda"
        assert ours_values == paper_values, section
    assert ours.ingest.valid_fraction == paper.ingest.valid_fraction
    assert project.run("status", "--json").exit_code == 0


def test_budget_recipe_measures_this_machine_and_its_run_stops_at_the_hours(tmp_path: Path, fake_clock: FakeClock):
    project = _project(tmp_path / "p", "--recipe", "budget", "--hours", "0.005")
    text = project.config.read_text()
    assert "#   machine: CPU" in text and "tokens/s" in text
    size = (project.root / "corpus" / "a.txt").stat().st_size  # init's corpus/README.md is not corpus
    assert f"#   corpus: {size:,} bytes in the corpus files" in text
    cfg = load_config(project.config)
    assert cfg.pretrain.max_hours == 0.005 and cfg.pretrain.nsp is False and cfg.pairs.random_next_prob == 0
    assert cfg.model.preset == "tiny" and cfg.model.hidden_dropout == 0 and cfg.pairs.masking == "dynamic"
    # on a CPU one micro-batch a step: accumulation would buy no speed there, only fewer updates
    assert (cfg.pretrain.batch_size, cfg.pretrain.grad_accum) == (32, 1) and cfg.pretrain.steps > 0
    assert "one micro-batch; accumulating buys a CPU no speed" in text
    project.run("run", "--until", "pretrain", "--set", "pretrain.eval_batches=1")  # the fake clock: 1 s a step
    summary = json.loads((project.workspace / "manifests" / "pretrain.json").read_text())["summary"]
    assert summary["stopped_at_budget"] and summary["steps_done"] == 18  # 18 s of 0.005 h: a 19th would pass it
    assert run_metrics(project)[-1]["lr"] < 0.1 * cfg.pretrain.lr


def test_budget_batch_accumulates_to_cramming_s_large_batch_on_a_gpu_only():
    from bertwb.recipes.budget import MAX_BATCH, MIN_STEPS, _batch

    assert _batch(32, 1_000_000, "cpu")[0] == 32  # a CPU: every micro-batch is an update
    assert _batch(64, 1_000_000, "cuda")[0] == 256  # the power of two that leaves at least MIN_STEPS steps
    assert 1_000_000 / 256 >= MIN_STEPS > 1_000_000 / 512
    assert _batch(64, 10**12, "cuda")[0] == MAX_BATCH and _batch(64, 1_000, "cuda")[0] == 64  # capped both ways


@pytest.mark.parametrize("workspace", [".bertwb", "runs/short-notes"])
def test_budget_recipe_times_pairs_as_long_as_the_ingested_documents_make(tmp_path: Path, workspace: str):
    """Documents of 100 characters (25 tokens by the recipe's 4 a token) fill one pair of 28 tokens each: once
    ingest has run, init times pairs of 32 (28 padded to 8), not 128, so the steps it counts are these. It
    finds them in the workspace the project's bertwb.yaml names, the default one or another."""
    root = tmp_path / "p"
    documents = [[f"Note {i:05d} is one of many short ones in a file.",
                  f"It has a twin, {i:05d}, which ends this page right now."] for i in range(400)]
    assert {sum(map(len, doc)) for doc in documents} == {100}
    write_bert_format(root / "corpus" / "a.txt", documents)
    assert _init(str(root), "--recipe", "budget", "--hours", "0.005").exit_code == 0
    assert "pairs of 128 tokens:" in (root / "bertwb.yaml").read_text()  # no ingest yet: full pairs
    project = Project(root)
    project.write_config(project.config.read_text().replace("dir: .bertwb ", f"dir: {workspace} ", 1))
    project.run("ingest")
    assert (root / workspace / "manifests" / "ingest.json").is_file()
    assert (root / ".bertwb").is_dir() == (workspace == ".bertwb")
    result = _init(str(root), "--recipe", "budget", "--hours", "0.005", "--force")
    assert result.exit_code == 0, result.output
    text = project.config.read_text()
    assert "pairs of 32 tokens (the mean pair of the ingested documents):" in text
    assert f"#   corpus: {400 * 100:,} characters after ingest" in text
    assert load_config(project.config).workspace.dir == workspace  # the config sized by it works on it


@pytest.mark.parametrize("recipe", [[], ["--recipe", "bert-base"]], ids=["defaults", "bert-base"])
def test_init_force_keeps_the_workspace_the_old_config_named(tmp_path: Path, recipe: list[str]):
    """``init --force`` over a project whose bertwb.yaml names another workspace.dir writes that dir as the user
    wrote it (relative to the project), so the next command works on the stages already built there."""
    project = _project(tmp_path / "p")
    project.write_config(project.config.read_text().replace("dir: .bertwb ", "dir: runs/notes ", 1))
    project.run("ingest")
    result = _init(str(project.root), *recipe, "--force")
    assert result.exit_code == 0, result.output
    assert re.search(r"^  dir: runs/notes +# Kept from the bertwb.yaml", project.config.read_text(), re.M)
    rows = {row["stage"]: row for row in json.loads(project.run("status", "--json").output)}
    assert rows["ingest"]["rows"]["documents"] == 200  # what was built, found (a recipe may make it stale)
    assert rows["ingest"]["state"] == "fresh" or recipe
    assert not project.workspace.exists()  # nothing started over in the default workspace


@pytest.mark.parametrize(("edit", "problem"), [
    (("dir: .bertwb ", "dir: [runs "), "invalid YAML"),
    (("  dir: .bertwb ", "  dri: runs/notes "), "unknown key 'workspace.dri'; did you mean 'dir'?"),
    (("masked_lm_prob: 0.15", "masked_lm_prob: lots"), "pairs.masked_lm_prob must be a number"),
], ids=["yaml", "key", "value"])
@pytest.mark.parametrize("recipe", [[], ["--recipe", "bert-base"]], ids=["defaults", "bert-base"])
def test_init_force_over_a_config_that_does_not_load_writes_nothing(tmp_path: Path, edit: tuple[str, str],
                                                                     problem: str, recipe: list[str]):
    """Which workspace a config that does not load names is unknown, and the default one would silently abandon
    the user's: one line names the file and its fault, says to fix or remove it, and nothing is written."""
    project = _project(tmp_path / "p")
    broken = project.config.read_text().replace(*edit, 1)
    project.write_config(broken)
    (project.root / "Makefile").unlink()
    result = _init(str(project.root), *recipe, "--force")
    assert_one_line_error(result, f"error: {project.config} line ", problem,
                          "init --force keeps this file's workspace.dir", "remove it to start a new project")
    assert project.config.read_text() == broken and not (project.root / "Makefile").exists()
    assert_one_line_error(_init(str(project.root), *recipe), "bertwb.yaml already exists; pass --force")
    project.config.unlink()  # the other way out the line gives: a new project in the default workspace
    assert _init(str(project.root), *recipe, "--force").exit_code == 0
    assert load_config(project.config).workspace.dir == ".bertwb"


def _state(folder: Path) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(folder / "model.safetensors"))


def test_continue_from_an_import_starts_from_its_weights_and_vocabulary(built_project: BuiltProject, tmp_path: Path):
    trainer = built_project("pretrain")
    trainer.run("export", str(tmp_path / "export"))
    trainer.run("import-hf", str(tmp_path / "export"), "--out", str(tmp_path / "imported"))
    project = _project(tmp_path / "adapt", "--recipe", "continue", "--from", str(tmp_path / "imported"))
    cfg = load_config(project.config)
    assert cfg.model.init_from == str(tmp_path / "imported") and cfg.pretrain.nsp is True  # its NSP head was trained
    assert f"# Started from: {tmp_path / 'imported'}" in project.config.read_text()
    project.run("run", "--until", "pretrain", "--set", "pretrain.steps=1", "--set", "pretrain.lr=0",
                "--set", "pretrain.batch_size=8")
    assert (project.workspace / "vocab" / "vocab.txt").read_text() == (tmp_path / "imported" / "vocab.txt").read_text()
    imported, trained = _state(tmp_path / "imported"), _state(project.workspace / "pretrain")
    assert imported.keys() == trained.keys()
    assert all(torch.equal(imported[name], trained[name]) for name in imported)  # a step at lr 0 changes nothing


def test_continue_from_a_masked_lm_folder_trains_without_nsp(tmp_path: Path):
    transformers = pytest.importorskip("transformers")
    from publishedkit import tiny_published_model  # noqa: PLC0415

    hf = tiny_published_model(tmp_path / "hf", transformers, "BertForMaskedLM", pad_to=64)
    project = _project(tmp_path / "p", "--recipe", "continue", "--from", str(tmp_path / "hf"))
    cfg = load_config(project.config)
    assert cfg.pretrain.nsp is False and cfg.pairs.random_next_prob == 0
    assert cfg.vocab.from_file == str(tmp_path / "hf" / "tokenizer.json")
    assert "NSP head start anew here" in project.config.read_text()
    assert cfg.pretrain.heads_first == 0 and cfg.pretrain.heads_lr_scale == 1  # its MLM head was trained
    project.run("run", "--until", "pretrain", "--set", "pretrain.steps=2", "--set", "pretrain.batch_size=8")
    metrics = run_metrics(project)
    assert all(m["loss"] == m["mlm_loss"] for m in metrics)
    embeddings = hf.bert.embeddings.word_embeddings.weight.detach()
    trained = _state(project.workspace / "pretrain")["bert.embeddings.tokens.weight"]
    assert trained.shape == embeddings.shape and not torch.equal(trained, embeddings)  # trained on from them
    assert (trained - embeddings).abs().max() < 0.01  # two steps at 5e-5 from them


def test_continue_from_a_model_without_heads_trains_its_new_mlm_head_alone_first(tmp_path: Path):
    """A sentence-embedding BERT (a bare ``BertModel``, as all-MiniLM-L6-v2 ships) has no MLM head: the recipe
    gives the new one the first fifth of the run alone, at ten times the encoder's rate (LP-FT)."""
    transformers = pytest.importorskip("transformers")
    from publishedkit import tiny_published_model  # noqa: PLC0415

    tiny_published_model(tmp_path / "hf", transformers, "BertModel", pad_to=64)
    project = _project(tmp_path / "p", "--recipe", "continue", "--from", str(tmp_path / "hf"))
    cfg = load_config(project.config)
    assert cfg.pretrain.nsp is False and cfg.pretrain.heads_first == 0.2 and cfg.pretrain.heads_lr_scale == 10
    text = project.config.read_text()
    assert "MLM head and NSP head start anew here" in text and "LP-FT" in text
    project.run("run", "--until", "pretrain", "--set", "pretrain.steps=10", "--set", "pretrain.batch_size=8",
                "--set", "pretrain.log_every=1")
    metrics = run_metrics(project)
    assert [m["encoder_lr"] for m in metrics] == [0.0, 0.0, *(m["lr"] for m in metrics[2:])]  # steps 0, 1 of 10
    assert all(m["lr"] > 0 for m in metrics)


def _continue_project(root: Path, corpus_bytes: int, model: Path) -> str:
    """``init --recipe continue`` over a generated corpus of about ``corpus_bytes``; the config's text."""
    documents = make_documents(300)
    text = "\n\n".join("\n".join(doc) for doc in documents) + "\n\n"
    (root / "corpus").mkdir(parents=True)
    (root / "corpus" / "a.txt").write_text(text * max(1, round(corpus_bytes / len(text))), encoding="utf-8")
    result = _init(str(root), "--recipe", "continue", "--from", str(model))
    assert result.exit_code == 0, result.output
    return (root / "bertwb.yaml").read_text()


def test_continue_sizes_its_passes_to_the_corpus(tmp_path: Path):
    """Two epochs for every corpus made 72 steps of a 1 MB one; TAPT ran 100 over corpora that size. A task-sized
    corpus gets 100 epochs, a larger one fewer passes of more steps each, and the head says which and why."""
    from conftest import tiny_model_dir  # noqa: PLC0415

    model = tiny_model_dir(tmp_path / "model", max_positions=128)
    small = _continue_project(tmp_path / "small", 1_000_000, model)
    lines = (tmp_path / "small" / "corpus" / "a.txt").read_text().count("\n")
    assert "# Passes: 100 epochs (about " in small and f"{lines:,} lines ≈ 1.0 MB, task-sized (TAPT" in small
    cfg = load_config(tmp_path / "small" / "bertwb.yaml")
    assert (cfg.pretrain.epochs, cfg.pretrain.steps) == (100, 0)
    larger = _continue_project(tmp_path / "larger", 20_000_000, model)
    cfg = load_config(tmp_path / "larger" / "bertwb.yaml")
    assert 2 <= cfg.pretrain.epochs <= 10 and cfg.pretrain.steps == 0
    steps = int(re.search(r"# Passes: \d+ epochs \(about ([\d,]+) steps of 64\)", larger)[1].replace(",", ""))
    assert 4_000 <= steps < 5_000  # passes until about 4,000 steps, not 100 of them
    assert "≈ 20.0 MB, between a task's corpus" in larger


def test_continue_over_a_domain_sized_corpus_takes_dapts_steps_and_an_empty_one_says_it_cannot_size():
    from bertwb.recipes.continued import passes  # noqa: PLC0415
    from bertwb.recipes.corpus import CorpusSize  # noqa: PLC0415

    epochs, steps, why = passes(CorpusSize(40 * 10**9, "bytes", 400_000_000, "lines"), 128)
    assert (epochs, steps) == (1, 12_500 * 2_048 // 64) and "domain-sized" in why and "0.32 of a pass" in why
    epochs, steps, why = passes(CorpusSize(0, "bytes", 0, "lines"), 128)
    assert (epochs, steps) == (1, 0) and "no corpus found" in why and "--force" in why


def test_the_pretrain_summary_names_an_imported_models_own_shape_not_a_preset(tmp_path: Path):
    """An imported MiniLM-like model (a bare BertModel: L2 H32 A2 I64 here) was summarised as `preset = tiny`,
    the config's untouched default, which the run never built."""
    transformers = pytest.importorskip("transformers")
    from publishedkit import tiny_published_model  # noqa: PLC0415

    tiny_published_model(tmp_path / "hf", transformers, "BertModel", pad_to=64)
    imported = CliRunner().invoke(cli, ["import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "imported")])
    assert imported.exit_code == 0, imported.output
    project = _project(tmp_path / "p", "--recipe", "continue", "--from", str(tmp_path / "imported"))
    result = project.run("run", "--until", "pretrain", "--set", "pretrain.steps=2", "--set", "pretrain.batch_size=8")
    summary = json.loads((project.workspace / "manifests" / "pretrain.json").read_text())["summary"]
    assert summary["model"] == "L2 H32 A2 I64 (imported)" and "preset" not in summary
    assert "pretrain: model = L2 H32 A2 I64 (imported)" in result.output and "preset" not in result.output


def test_a_model_built_from_a_preset_is_summarised_by_its_preset_and_shape(trainer: Project):
    result = trainer.run("pretrain", "--set", "pretrain.steps=1", "--set", "model.num_layers=1")
    summary = json.loads((trainer.workspace / "manifests" / "pretrain.json").read_text())["summary"]
    assert summary["preset"] == "tiny" and summary["model"] == "L1 H128 A2 I512 (preset tiny)"
    assert "pretrain: model = L1 H128 A2 I512 (preset tiny)" in result.output


def test_budget_times_only_what_the_corpus_can_feed_and_shows_its_progress(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    """1000 hours would buy any size, but 20 kB of text feed none past tiny 20 tokens a parameter: tiny alone is
    timed, and the timing says what it times and how far it is (plain lines off a terminal)."""
    from bertwb import ui  # noqa: PLC0415

    monkeypatch.setattr(ui, "PLAIN_PROGRESS_EVERY_S", 0.0)  # a plain line at every advance
    root = tmp_path / "p"
    write_bert_format(root / "corpus" / "a.txt", make_documents(60))
    assert 10_000 < (root / "corpus" / "a.txt").stat().st_size < 40_000
    result = _init(str(root), "--recipe", "budget", "--hours", "1000")
    assert result.exit_code == 0, result.output
    assert "init: timing a training step of tiny on this CPU" in result.output
    assert "init: timing: 1 presets (100%)" in result.output
    measured = next(line for line in (root / "bertwb.yaml").read_text().splitlines() if "a training step of" in line)
    assert "tiny " in measured and "mini " not in measured, measured
    assert "the smallest: 4 passes over the corpus give fewer than 20 tokens per parameter" in \
        (root / "bertwb.yaml").read_text()
