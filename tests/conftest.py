"""Shared fixtures: a small generated corpus, a project directory around it, and a CLI driver."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from bertwb.cli import cli

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "sample_corpus" / "pretrain"

_TOPICS = {
    "sea": "ship sail harbour wave captain anchor deck crew storm tide island rope",
    "kitchen": "bread oven flour butter soup knife recipe salt pepper onion garlic cook",
    "sky": "star planet moon telescope orbit comet galaxy night astronomer light dust",
}
_GLUE = "the a of to in and with on at was is by for from".split()


def make_documents(n_docs: int, seed: int = 0) -> list[list[str]]:
    """Deterministic documents of 2–9 sentences, each on one topic."""
    rng = random.Random(seed)
    documents = []
    for _ in range(n_docs):
        words = _TOPICS[rng.choice(sorted(_TOPICS))].split()
        sentences = []
        for _ in range(rng.randint(2, 9)):
            tokens = [rng.choice(words) if rng.random() < 0.6 else rng.choice(_GLUE)
                      for _ in range(rng.randint(4, 14))]
            sentences.append(" ".join(tokens).capitalize() + rng.choice([".", ".", "?", "!"]))
        documents.append(sentences)
    return documents


def write_bert_format(path: Path, documents: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return path


@dataclass
class Project:
    """A directory with a corpus and a bertwb.yaml, driven through the CLI in-process."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "bertwb.yaml"

    @property
    def workspace(self) -> Path:
        return self.root / ".bertwb"

    def write_config(self, text: str) -> None:
        self.config.write_text(text, encoding="utf-8")

    def run(self, command: str, *args: str, expect: int | None = 0) -> Result:
        """``bertwb COMMAND --config PROJECT/bertwb.yaml ARGS...``; checks the exit code unless None."""
        result = CliRunner().invoke(cli, [command, "--config", str(self.config), *args])
        if expect is not None and result.exit_code != expect:
            raise AssertionError(f"bertwb {command} {' '.join(args)} exited {result.exit_code}, "
                                 f"expected {expect}:\n{result.output}\n{result.exception!r}")
        return result


DEFAULT_TEST_CONFIG = """
ingest:
  inputs: [corpus]
  valid_fraction: 0.1
vocab:
  vocab_size: 256
  min_frequency: 1
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """A project with 120 small documents in corpus/a.txt and a config for a 256-token vocab."""
    write_bert_format(tmp_path / "corpus" / "a.txt", make_documents(120))
    proj = Project(tmp_path)
    proj.write_config(DEFAULT_TEST_CONFIG)
    return proj


def assert_one_line_error(result: Result, *needles: str) -> None:
    """Exit 1, a single 'error:' line naming every needle, and no traceback."""
    assert result.exit_code == 1, result.output
    text = result.output.strip()
    error_lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, text
    assert "Traceback" not in text
    for needle in needles:
        assert needle in error_lines[0], f"{needle!r} not in {error_lines[0]!r}"


PYTHON = sys.executable
