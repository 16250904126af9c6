"""The corpus a recipe sizes its run to, measured at ``init`` time, before any stage ran (no torch).

Ingest's own counts when it ran in the project's workspace (characters and sentences), else the files
``ingest.inputs`` names (bytes and lines; init's corpus/README.md is not corpus). Tokens are estimated at
`BYTES_PER_TOKEN`: `budget` times steps against them, `continue` sizes its passes by them.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from bertwb.workspace import Workspace

BYTES_PER_TOKEN = 4.0  # English text in WordPiece pieces, about
_EXACT_LINES = 64 << 20  # files read whole for their lines up to this much; past it, lines are extrapolated


@dataclass(frozen=True)
class CorpusSize:
    size: int  # characters after ingest, else bytes in the files
    what: str  # which of the two, in words
    lines: int  # sentences after ingest, else lines in the files (extrapolated past `_EXACT_LINES`)
    line_word: str  # "sentences" or "lines"

    @property
    def tokens(self) -> float:
        return self.size / BYTES_PER_TOKEN


def corpus_size(workspace: Workspace, directory: Path, inputs: list[str]) -> CorpusSize:
    """The corpus's size and what was counted: ingest's characters and sentences if it ran in ``workspace``,
    else the bytes and lines of the files ``inputs`` (relative to ``directory``) name."""
    try:
        summary = (workspace.read_manifest("ingest") or {})["summary"]
        return CorpusSize(int(summary["characters"]), "characters after ingest", int(summary["sentences"]),
                          "sentences")
    except (ValueError, KeyError, TypeError):
        pass
    files = _files(directory, inputs)
    total = sum(path.stat().st_size for path in files)
    return CorpusSize(total, "bytes in the corpus files", _lines(files, total), "lines")


def _files(directory: Path, inputs: list[str]) -> list[Path]:
    found = []
    for pattern in inputs:
        # normalised first: the project folder may not exist yet, and `DIR/../corpus` must still match
        for match in glob.glob(os.path.normpath(directory / Path(pattern).expanduser()), recursive=True):
            path = Path(match)
            found += [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [path for path in found if path.name != "README.md"]


def _lines(files: list[Path], total: int) -> int:
    """Newlines in the first `_EXACT_LINES` bytes of the corpus, scaled to its whole size past that."""
    counted = lines = 0
    for path in files:
        with open(path, "rb") as handle:
            while counted < _EXACT_LINES and (block := handle.read(1 << 20)):
                lines, counted = lines + block.count(b"\n"), counted + len(block)
        if counted >= _EXACT_LINES:
            break
    return round(lines * total / counted) if counted else 0
