"""The report's folder: what ``bertwb report`` may replace there, and writing it whole.

The report (``index.html``, ``figures/*.png``) is built beside its target and swapped in
(`bertwb.workspace.building`), and its marker file, `MARKER`, lists every file it wrote. It replaces a
folder only when that is its own earlier output: missing, empty, or every file listed by the marker (in the
workspace's ``report/``, also a marker-less folder of only those files, as reports before the marker were).
Anything else is refused with one line, and nothing is removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from bertwb.errors import BertwbError

MARKER = ".bertwb-report"
PAGE = "index.html"
FIGURES_DIR = "figures"


def check_replaceable(out: Path, legacy_ok: bool = False) -> None:
    """Refuse ``out`` unless it is missing, empty, or holds only files an earlier report wrote (its
    marker lists them; with ``legacy_ok``, a report from before markers: the page and PNG figures)."""
    if not out.exists():
        return
    name = f"the report folder {out}" if legacy_ok else f"--output {out}"
    if not out.is_dir() or out.is_symlink():
        raise BertwbError(f"{name} is a file or a link, not a folder; give a folder for the report (a new one, or one "
                          "an earlier `bertwb report` wrote)")
    found = sorted(_files(out))
    listed = _listed(out)
    if listed is None:
        legacy = {PAGE} | {name for name in found if _legacy_figure(name)}
        if not found or (legacy_ok and set(found) <= legacy):
            return
        raise BertwbError(f"{name} holds files bertwb report did not write (no {MARKER} in it, e.g. "
                          f"{found[0]}); give a new folder, or empty this one yourself")
    foreign = [name for name in found if name not in listed]
    if foreign:
        raise BertwbError(f"{name} holds {foreign[0]}, which no earlier report wrote ({MARKER} does not "
                          "list it); move it out, or give another folder")


def write_marker(folder: Path, files: Iterable[str]) -> None:
    """Record the files the report wrote in ``folder`` (relative names), so the next run may replace them."""
    record = {"written_by": "bertwb report", "files": sorted(files)}
    (folder / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _files(out: Path) -> Iterable[str]:
    """Every entry under ``out`` but the marker, folders with contents standing for their files."""
    for path in out.rglob("*"):
        if path.is_dir() and not path.is_symlink() and any(path.iterdir()):
            continue
        name = path.relative_to(out).as_posix()
        if name != MARKER and name != FIGURES_DIR:
            yield name


def _listed(out: Path) -> set[str] | None:
    """The files the marker lists, or None when there is no readable marker."""
    try:
        record = json.loads((out / MARKER).read_text(encoding="utf-8"))
        return {str(name) for name in record["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _legacy_figure(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and parts[0] == FIGURES_DIR and parts[1].endswith(".png")
