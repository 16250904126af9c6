"""Where a command may write a path the user names: the one guard that every such command calls.

``predict --output``, ``sql --output``, ``report --output``, ``export OUT`` and ``import-hf --out`` list what
they must not replace with `protected_paths` (the workspace, the config file, every path the config names,
what the command reads) and check their target with `check_file` or `check_folder` before writing anything;
a refusal is one line naming the path and the fix. Paths are compared after resolving links. A command's
own folder in the workspace (``report/``, ``imports/``) is allowed.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.workspace import Workspace


@dataclass(frozen=True)
class Protected:
    """A path no output may be (nor, for a folder output, hold); ``contents``: nor be inside it."""

    path: Path
    what: str  # what it is, in words: "the workspace", "ingest.inputs in the config"
    contents: bool = True


def reading(path: str | Path | None, what: str, contents: bool = False) -> list[Protected]:
    """What a command reads (its input file, the model it loads), to protect it from its own output."""
    return [Protected(Path(path), what, contents)] if path else []


def protected_paths(cfg: Config, ws: Workspace, read: Iterable[Protected] = ()) -> list[Protected]:
    """The workspace and what is in it, the config file and its folder, the current directory, every
    path a config value names that exists (a glob: the folder it starts in), and ``read``."""
    paths = [Protected(ws.root, "the workspace"), Protected(Path.cwd(), "the current directory", contents=False)]
    if cfg.path is not None:
        paths += [Protected(cfg.path, "the config file", contents=False),
                  Protected(cfg.path.parent, "the config's folder", contents=False)]
    for where, value in _config_strings(cfg):
        if glob.has_magic(value):
            value = value[: min(value.find(ch) for ch in "*?[" if ch in value)]
            value = os.path.dirname(value) or "."
        path = cfg.resolve(value)
        if value and path.exists():
            paths.append(Protected(path, f"{where} in the config"))
    return [*paths, *read]


def bertwb_files(cfg: Config, ws: Workspace) -> list[Protected]:
    """What bertwb itself keeps: the workspace (the database, manifests, weights) and the config file. What
    ``sql --write`` may not touch; the config's data it may read, and rewrite on purpose."""
    own = [Protected(ws.root, "the workspace")]
    return own + [Protected(cfg.path, "the config file", contents=False)] if cfg.path is not None else own


def _config_strings(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every string value in the config, with its dotted key (``ingest.inputs``, ``finetune.tasks.x.train``)."""
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            if f.name not in ("path", "base_dir"):
                yield from _config_strings(getattr(node, f.name), f"{where}.{f.name}".lstrip("."))
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _config_strings(value, f"{where}.{key}")
    elif isinstance(node, list):
        for value in node:
            yield from _config_strings(value, where)
    elif isinstance(node, str) and node:
        yield where, node


def check_file(output: str | Path, protected: Iterable[Protected], option: str = "--output") -> None:
    """Refuse a file ``output`` that is a protected path or lies inside one kept whole."""
    _check(output, protected, option, folder=False, own=None,
           fix="bertwb writes no output there; give a file outside the workspace and the config's data")


def check_folder(output: str | Path, protected: Iterable[Protected], option: str, own: Path | None = None) -> None:
    """Refuse a folder ``output`` that is a protected path, holds one, or lies inside one kept whole
    (but for ``own``, the command's own folder in the workspace, and what is inside it)."""
    _check(output, protected, option, folder=True, own=own,
           fix="write to a folder of its own, outside the workspace and the config's data")


def _check(output: str | Path, protected: Iterable[Protected], option: str, folder: bool, own: Path | None,
           fix: str) -> None:
    target = Path(output).resolve()
    mine = own is not None and (target == own.resolve() or own.resolve() in target.parents)
    resolved = [(item, item.path.resolve()) for item in protected]
    for item, path in resolved:
        if target == path:
            raise BertwbError(f"{option} {output} is {item.what}; {fix}")
    for item, path in resolved:
        if folder and target in path.parents:
            raise BertwbError(f"{option} {output} holds {item.what} ({path}); {fix}")
    for item, path in resolved:
        if item.contents and path in target.parents and not mine:
            raise BertwbError(f"{option} {output} is inside {item.what} ({path}); {fix}")
