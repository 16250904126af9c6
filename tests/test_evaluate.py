"""evaluate, fill-mask and nsp, driven through the CLI on a model trained for a few steps.

The data stages and 12 training steps run once per session (``trained``, a build of conftest's
``project_builds``); tests that change the workspace work on a copy.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from bertwb.model import modeldir
from conftest import (BuiltProject, Project, ProjectBuilds, assert_one_line_error, make_documents, pretrain_config,
                      write_bert_format)

CONFIG = pretrain_config(ingest={"valid_fraction": 0.15}, pretrain={
    "lr": 2.0e-3, "log_every": 4, "eval_batches": 0, "keep_checkpoints": 3})


@pytest.fixture
def trained(project_builds: ProjectBuilds) -> Project:
    """The session's build of CONFIG through pretrain: tests read it and never change it."""
    return Project(project_builds.folder("pretrain", CONFIG))


@pytest.fixture
def copy(built_project: BuiltProject) -> Project:
    return built_project("pretrain", CONFIG)


def _json(result):
    """A command's JSON: stdout alone (messages and tables went to stderr)."""
    return json.loads(result.stdout)


def test_evaluate_matches_the_validation_pretrain_ran_and_the_pairs_table(copy: Project):
    result = copy.run("evaluate")
    assert "MLM accuracy" in result.output and "NSP accuracy" in result.output and "perplexity" in result.output
    metrics = json.loads((copy.workspace / "evaluate" / "metrics.json").read_text())
    assert metrics["step"] == 12 and metrics["checkpoint"].endswith("step-00000012")

    # pretrain's final validation (eval_batches 0 = the whole valid split) ran the same model on the
    # same pairs through another code path (its loader's batches, padding and reductions)
    training = json.loads((copy.workspace / "pretrain" / "training.json").read_text())
    assert metrics["mlm_loss"] == pytest.approx(training["valid_mlm_loss"], rel=1e-4)
    assert metrics["nsp_loss"] == pytest.approx(training["valid_nsp_loss"], rel=1e-4)
    assert abs(metrics["mlm_acc"] - training["valid_mlm_acc"]) <= 2 / metrics["masked_tokens"]
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["mlm_loss"]), rel=1e-4)

    with duckdb.connect(str(copy.workspace / "bertwb.duckdb"), read_only=True) as con:
        pairs, masked = con.execute("select count(*), sum(len(masked_positions)) from pairs "
                                    "where split = 'valid'").fetchone()
        kinds = dict(con.execute("select kind, positions from pairs_mask_kinds where split = 'valid'").fetchall())
    assert metrics["pairs"] == pairs and metrics["masked_tokens"] == masked
    assert {k: v["positions"] for k, v in metrics["by_kind"].items()} == kinds
    kind_hits = sum(v["mlm_acc"] * v["positions"] for v in metrics["by_kind"].values())
    assert kind_hits == pytest.approx(metrics["mlm_acc"] * masked, abs=0.01)


def test_status_judges_trained_stages_without_importing_torch(copy: Project):
    """`bertwb status` answers from manifests and file identities: the model stages' hooks need no torch."""
    copy.run("evaluate")
    script = ("import runpy, sys\n"
              "try:\n    runpy.run_module('bertwb', run_name='__main__')\n"
              "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
              "print('torch imported' if 'torch' in sys.modules else 'no torch', file=sys.stderr)\n")

    def status(*args: str) -> tuple[dict, str]:
        done = subprocess.run([sys.executable, "-c", script, "status", "--json", "--config", str(copy.config), *args],
                              capture_output=True, text=True, check=True)
        return {row["stage"]: row for row in json.loads(done.stdout)}, done.stderr

    rows, stderr = status()
    assert "no torch" in stderr
    assert rows["pretrain"]["state"] == "fresh" and rows["evaluate"]["state"] == "fresh"
    rows, stderr = status("--set", "pretrain.steps=14")
    assert "no torch" in stderr
    assert rows["pretrain"]["state"] == "stale"
    assert rows["pretrain"]["reason"] == "pretrain.steps 12 done < 14 asked; continuing from step 12"
    (copy.workspace / "pretrain-runs").rename(copy.root / "elsewhere")  # evaluate's checkpoint is gone
    rows, _ = status()
    assert rows["evaluate"]["state"] == "stale"


def test_evaluate_is_cached_per_checkpoint(copy: Project):
    first = _json(copy.run("evaluate", "--json"))
    again = copy.run("evaluate", "--json")
    assert "evaluate: fresh" in again.output and _json(again) == first

    earlier = _json(copy.run("evaluate", "--checkpoint", "10", "--json"))
    assert earlier["step"] == 10 and earlier["mlm_loss"] != first["mlm_loss"]
    assert "running" in copy.run("evaluate").output  # back to latest: another checkpoint, so it runs again

    copy.run("pretrain", "--set", "pretrain.steps=14")  # more training: latest is a new checkpoint
    later = copy.run("evaluate", "--set", "pretrain.steps=14", "--json")
    assert "running" in later.output and _json(later)["step"] == 14


def test_device_option_is_a_set_of_evaluate_device_outside_the_key(copy: Project):
    """``--device X`` is ``--set evaluate.device=X``: the key stays, and a bad device is blamed on the command line."""
    first = _json(copy.run("evaluate", "--json"))
    again = copy.run("evaluate", "--device", "cpu", "--json")
    assert "evaluate: fresh" in again.output and _json(again) == first
    assert_one_line_error(copy.run("evaluate", "--device", "gpu", "--force", expect=None),
                          "--set evaluate.device 'gpu' is not a device")


def test_evaluate_json_keeps_stdout_clean(copy: Project):
    result = copy.run("evaluate", "--json")
    assert "MLM accuracy" in result.stderr  # the table still shows, on stderr
    assert json.loads(result.stdout)["pairs"] > 0


def test_evaluate_errors_are_one_line(copy: Project, tmp_path: Path):
    assert_one_line_error(copy.run("evaluate", "--checkpoint", "3", expect=None), "no checkpoint at step 3", "10")
    assert_one_line_error(copy.run("evaluate", "--checkpoint", str(tmp_path / "nowhere"), expect=None),
                          "no such model directory")
    foreign = tmp_path / "foreign"
    shutil.copytree(copy.workspace / "pretrain", foreign)
    (foreign / "vocab.txt").write_text("".join(f"tok{i}\n" for i in range(256)))
    assert_one_line_error(copy.run("evaluate", "--checkpoint", str(foreign), expect=None),
                          "vocab.txt differs", "vocab.from_file")

    fresh = Project(tmp_path / "untrained")
    write_bert_format(fresh.root / "corpus" / "a.txt", make_documents(60))
    fresh.write_config(CONFIG)
    fresh.run("run", "--until", "pairs")
    assert_one_line_error(fresh.run("evaluate", expect=None), "no checkpoint", "bertwb pretrain")


def test_evaluate_with_dynamic_masking_is_repeatable(copy: Project):
    dynamic = ["--set", "pairs.masking=dynamic"]
    copy.run("run", "--until", "pretrain", *dynamic)
    first = _json(copy.run("evaluate", *dynamic, "--json"))
    second = _json(copy.run("evaluate", *dynamic, "--force", "--json"))
    assert first == {**second, "seconds": first["seconds"]}
    assert sum(v["positions"] for v in first["by_kind"].values()) == first["masked_tokens"] > 0


def _model_and_tokenizer(project: Project):
    model_dir = modeldir.open_model_dir(project.workspace / "pretrain")
    tokenizer = modeldir.load_tokenizer(model_dir)  # the pretrain output keeps its tokenizer beside it
    model, _ = modeldir.load_model(model_dir)
    return model.eval(), tokenizer


def test_fill_mask_gives_the_models_top_k_at_every_mask(trained: Project, tmp_path: Path):
    text = "the ship [MASK] in the harbour and the [MASK] sailed ."
    results = _json(trained.run("fill-mask", text, "--top-k", "3", "--json"))
    assert len(results) == 1 and results[0]["text"] == text
    masks = results[0]["masks"]
    assert len(masks) == 2

    model, tokenizer = _model_and_tokenizer(trained)
    encoding = tokenizer.encode(text)
    with torch.no_grad():
        dense = model(torch.tensor([encoding.ids]), torch.tensor([encoding.type_ids])).mlm_logits[0]  # (T, V)
    for mask in masks:
        assert encoding.tokens[mask["position"]] == "[MASK]"
        probs = dense[mask["position"]].softmax(-1)
        top = probs.topk(3)
        assert [p["token_id"] for p in mask["predictions"]] == top.indices.tolist()
        assert [p["score"] for p in mask["predictions"]] == pytest.approx(top.values.tolist(), abs=1e-5)
        assert [p["token"] for p in mask["predictions"]] == [tokenizer.id_to_token(i) for i in top.indices.tolist()]
        assert mask["predictions"][0]["sequence"].count("[MASK]") == 1  # the other mask stays visible

    table = trained.run("fill-mask", text).output
    assert masks[0]["predictions"][0]["token"] in table and "probability" in table


def test_fill_mask_reads_stdin_and_files_and_rejects_text_without_a_mask(trained: Project, tmp_path: Path):
    from click.testing import CliRunner

    from bertwb.cli import cli
    piped = CliRunner().invoke(cli, ["fill-mask", "--config", str(trained.config), "--json"],
                               input="the [MASK] sailed .\n\nthe cook baked [MASK] .\n")
    assert piped.exit_code == 0, piped.output
    assert [r["text"] for r in _json(piped)] == ["the [MASK] sailed .", "the cook baked [MASK] ."]
    lines = tmp_path / "inputs.txt"
    lines.write_text("a [MASK] b\n")
    assert _json(trained.run("fill-mask", "-f", str(lines), "--json"))[0]["text"] == "a [MASK] b"
    assert_one_line_error(trained.run("fill-mask", "no mask here", expect=None), "no [MASK]")


def test_nsp_gives_the_models_probability(trained: Project):
    first, second = "the captain sailed the ship .", "the crew pulled the rope on deck ."
    result = _json(trained.run("nsp", first, second, "--json"))
    model, tokenizer = _model_and_tokenizer(trained)
    encoding = tokenizer.encode(first, second)
    assert encoding.type_ids[-1] == 1 and encoding.type_ids[0] == 0
    with torch.no_grad():
        probs = model(torch.tensor([encoding.ids]), torch.tensor([encoding.type_ids])).nsp_logits[0].softmax(-1)
    assert result["is_next"] == pytest.approx(float(probs[0]), abs=1e-6)
    assert result["is_next"] + result["is_random"] == pytest.approx(1.0, abs=1e-5)
    assert "P(IsNext)" in trained.run("nsp", first, second).output
    assert_one_line_error(trained.run("nsp", first, " ", expect=None), "sentence B is empty")


def test_evaluate_runs_in_the_pipeline_after_pretrain(copy: Project):
    result = copy.run("run")
    assert "evaluate: running" in result.output and "MLM accuracy" in result.output
    assert "evaluate: fresh" in copy.run("run").output
    status = _json(copy.run("status", "--json"))
    assert {row["stage"]: row["state"] for row in status}["evaluate"] == "fresh"
    assert np.isfinite(json.loads((copy.workspace / "evaluate" / "metrics.json").read_text())["mlm_loss"])
