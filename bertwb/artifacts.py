"""The files runs and stages leave behind, named and read in one place, without torch.

Status, the report, prediction and the stages read them here: manifests (shape-checked), a training
run's log (`METRICS_FILE`), a stage's final numbers (`RESULTS_FILE`), ``phases.json``, ``task.json``, a
model directory's weights file and identity; `read_json` reads any other JSON object bertwb reads back, its
fields' types checked. Readers never raise on a damaged file where the caller can go on without it: they
return None, or skip and count what they could not read; where it cannot, one line names file and fix.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertwb.errors import BertwbError
from bertwb.textinput import text_lines

METRICS_FILE = "metrics.jsonl"  # the trainer's log: one JSON object per logging step, appended
RESULTS_FILE = "metrics.json"  # a stage's final numbers: evaluate's, a fine-tuned task's dev and test
PHASES_FILE = "phases.json"  # a phased run's (or pairs output's) folders, in order: {"phases": [...]}
TASK_FILE = "task.json"  # a fine-tuned model's task: how inputs become features, what training recorded
IMPORT_FILE = "import.json"  # what import-hf made of a published model: its kind, the heads it made anew
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented JSON and a newline (anything JSON has no type for as its ``str``)."""
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def read_json(path: Path, fix: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON object in ``path``, each of ``fields`` that it holds of its type (a type, a tuple of types,
    or ``list[str]``: a list of those), else one line naming the file, what is wrong and ``fix``. A file a
    model's publisher or a damaged disk gave must not become an internal error three calls further on."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BertwbError(f"{path}: unreadable JSON ({reason}); {fix}") from None
    if not isinstance(data, dict):
        raise BertwbError(f"{path}: holds {_json_name(data)}, not a JSON object; {fix}")
    for name, kind in (fields or {}).items():
        if name in data and not _is_of(data[name], kind):
            raise BertwbError(f"{path}: its {name!r} is {_json_name(data[name])}, not {_kind_name(kind)}; {fix}")
    return data


def _is_of(value: Any, kind: Any) -> bool:
    if typing.get_origin(kind) is list:
        (item,) = typing.get_args(kind)
        return isinstance(value, list) and all(_is_of(v, item) for v in value)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


_JSON_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def _json_name(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _kind_name(kind: Any) -> str:
    if typing.get_origin(kind) is list:
        return f"a list of {_JSON_NAMES[typing.get_args(kind)[0]].split()[-1]}s"
    return " or ".join(_JSON_NAMES[k] for k in (kind if isinstance(kind, tuple) else (kind,)))


# --- manifests --------------------------------------------------------------------------------------------

# The type of each field a manifest may hold (`bertwb.commit` writes them), and of the outputs' fields.
_MANIFEST_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": int, "stage": str, "key": str, "build": str, "identity": str, "has_files": bool,
    "config": (str, type(None)), "params": dict, "deps": dict, "inputs": list, "version": int, "outputs": dict,
    "started_at": str, "finished_at": str, "duration_s": (int, float), "versions": dict, "summary": (dict, type(None)),
}
_OUTPUT_FIELDS: dict[str, type] = {"files": dict, "tables": dict, "digests": dict}


def read_manifest_file(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A manifest file's content and why it is unusable: (manifest, None), (None, None) when there is no
    file, or (None, reason) when it is not JSON or not a manifest's shape (``[1, 2, 3]`` is valid JSON)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    problem = _manifest_shape_problem(data)
    return (None, problem) if problem else (data, None)


def _manifest_shape_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    for name, kind in _MANIFEST_FIELDS.items():
        if name in data and (not isinstance(data[name], kind) or isinstance(data[name], bool) and kind is int):
            return f"its {name!r} is {type(data[name]).__name__}"
    for name, kind in _OUTPUT_FIELDS.items():
        value = data.get("outputs", {}).get(name, {})
        if not isinstance(value, kind):
            return f"its outputs.{name} is {type(value).__name__}"
    for name in ("files", "tables"):
        sizes = data.get("outputs", {}).get(name, {}).values()
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes):
            return f"its outputs.{name} holds something other than sizes"
    if not all(isinstance(i, dict) and "path" in i for i in data.get("inputs", [])):
        return "its inputs are not objects with a path"
    if not all(isinstance(v, dict) for v in data.get("params", {}).values()):
        return "its params are not sections"
    return None


# --- metrics ----------------------------------------------------------------------------------------------

@dataclass
class MetricsLog:
    """A `METRICS_FILE` as read: its lines in step order, and the numbers (from 1) of the lines skipped."""

    path: Path
    lines: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # not JSON (torn by a kill mid-append), or no step


def read_metrics_log(path: Path) -> MetricsLog:
    """The JSON lines of a metrics file, sorted by step; a line that is not a JSON object with an integer
    ``step`` (a torn last line of a run killed mid-write, or damage) is skipped and its number kept."""
    log = MetricsLog(path)
    texts = text_lines(path.read_text(encoding="utf-8", errors="replace")) if path.is_file() else []
    for number, text in enumerate(texts, 1):
        try:
            line = json.loads(text)
        except ValueError:
            line = None
        if isinstance(line, dict) and isinstance(line.get("step"), int):
            log.lines.append(line)
        else:
            log.skipped.append(number)
    log.lines.sort(key=lambda line: line["step"])
    return log


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """`read_metrics_log`'s lines alone: for a reader that goes on past a torn line without a word."""
    return read_metrics_log(path).lines


def read_results(folder: Path) -> dict[str, Any] | None:
    """The `RESULTS_FILE` a stage wrote into ``folder``; None when there is none or it is not a JSON object."""
    return _json_object(folder / RESULTS_FILE)


def read_task_file(folder: Path) -> dict[str, Any]:
    """A fine-tuned model directory's `TASK_FILE`; empty when it has none (a model trained elsewhere). One that
    is there but not a JSON object is an error: without it the inputs would be featurised as a guess."""
    path = folder / TASK_FILE
    if not path.is_file():
        return {}
    return read_json(path, "restore it, or fine-tune the task again (`bertwb finetune TASK --force`)",
                     {"type": (str, type(None)), "recorded": dict})


def _json_object(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- phases -----------------------------------------------------------------------------------------------

def read_phases(folder: Path) -> list[str] | None:
    """The phase names ``folder``'s `PHASES_FILE` lists, in order; None when it has none. A file that is not
    JSON, or not ``{"phases": [names]}``, raises `ValueError`."""
    listing = folder / PHASES_FILE
    if not listing.is_file():
        return None
    data = json.loads(listing.read_text(encoding="utf-8"))
    names = data.get("phases") if isinstance(data, dict) else None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"{listing}: not a list of phase names")
    return names


# --- weights ----------------------------------------------------------------------------------------------

def weights_file(model_dir: Path) -> Path | None:
    """The file holding a model directory's weights (the first of `WEIGHT_FILES` present), or None."""
    return next((model_dir / name for name in WEIGHT_FILES if (model_dir / name).is_file()), None)


def weights_identity(weights: Path) -> dict[str, Any]:
    """Identity of a weights file for a stage key: path, size and modification time (replacing it changes it)."""
    stat = weights.stat()
    return {"path": str(weights), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
