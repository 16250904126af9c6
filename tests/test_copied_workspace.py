"""A project copied with ``cp -a`` (or moved) is as fresh where it lands as where it was: every key names the
workspace's files relative to the workspace and the project's files relative to the config's folder.

One project runs every stage once: vocab from a tokenizer file in the project, pretrain from a model folder in
the project, evaluate, a fine-tuning task whose data sit in the project, and an embedding table; then it is
copied, and `status` calls every row fresh in the copy and in the original.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from conftest import REPO, BuiltProject, Project

FINETUNE = REPO / "sample_corpus" / "finetune"


def _states(project: Project) -> dict[str, tuple[str, str]]:
    rows = json.loads(project.run("status", "--json").stdout)
    return {row["stage"]: (row["state"], row["reason"]) for row in rows}


def test_a_copied_project_is_fresh_in_the_copy_and_in_the_original(built_project: BuiltProject, tmp_path: Path):
    trainer = built_project("pretrain")  # itself a copy of the session's build
    shutil.copytree(trainer.workspace / "pretrain", trainer.root / "base_model")  # a model folder of the project's
    (trainer.root / "data").mkdir()
    for name in ("sentiment_train.csv", "sentiment_dev.csv"):
        shutil.copy(FINETUNE / name, trainer.root / "data" / name)
    settings = yaml.safe_load(trainer.config.read_text())
    settings["vocab"]["from_file"] = "base_model/tokenizer.json"
    settings["model"] = {"init_from": "base_model"}
    settings["pretrain"]["steps"] = 4
    settings["finetune"] = {"steps": 4, "batch_size": 8, "max_seq_length": 32, "eval_every": 0,
                            "tasks": {"sentiment": {"type": "classify", "train": "data/sentiment_train.csv",
                                                    "dev": "data/sentiment_dev.csv"}}}
    trainer.write_config(yaml.safe_dump(settings, sort_keys=False))
    trainer.run("run")
    (trainer.root / "texts.txt").write_text("the ship sailed.\nthe star shone.\n", encoding="utf-8")
    trainer.run("embed", str(trainer.root / "texts.txt"), "--model", "pretrain", "--into", "vectors")
    before = _states(trainer)
    assert set(before) >= {"ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune/sentiment"}, before
    assert len(before) == 7, before  # and the embedding table
    assert all(state == "fresh" for state, _ in before.values()), before

    copy = Project(tmp_path / "elsewhere" / "copy")
    copy.root.parent.mkdir()
    subprocess.run(["cp", "-a", str(trainer.root), str(copy.root)], check=True)
    assert _states(copy) == {name: ("fresh", reason) for name, (_, reason) in before.items()}
    assert _states(trainer) == before
    assert "fresh" in copy.run("run").output  # and a run there retrains nothing
    assert "running" not in copy.run("run").output

    # no key names a path of the project's, in either place
    for manifest in (copy.workspace / "manifests").rglob("*.json"):
        inputs = json.dumps(json.loads(manifest.read_text()).get("inputs", []))
        assert str(trainer.root) not in inputs and str(copy.root) not in inputs, (manifest, inputs)
