"""Reading ``bertwb.yaml`` and ``--set`` into a validated `Config` (:mod:`bertwb.config` says what is valid).

`load_config` parses the YAML (a key given twice is an error), applies every ``--set a.b.c=value`` and builds
each section field by field, a named sub-section as its task type's class, from its parent where a field
inherits. It keeps every key's line at every depth, so a bad key (with a "did you mean"), type, range, NaN
or infinity is one `BertwbError` naming file and line or the ``--set``; and which values a sub-section
inherited, so an error at run time blames the key that gave the value (`Config.origin`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from bertwb.config import (DEFAULT_CONFIG_NAME, SECTIONS, Config, FinetuneTaskConfig, Provenance, is_subsections,
                           union_words)
from bertwb.errors import BertwbError
from bertwb.tasks.finetune.tasktypes import TASK_TYPES, settings_class

Lines = dict[tuple[str, ...], int]  # key path -> line in the YAML file; 0 = given by --set
Inherited = dict[tuple[str, ...], tuple[str, ...]]  # a named sub-section's key path -> its section's that gave it


def load_config(path: str | Path | None = None, overrides: list[str] = (), workdir: str | None = None) -> Config:
    """Read, merge and validate the configuration.

    ``path`` defaults to ``./bertwb.yaml`` when it exists, else the built-in defaults. ``overrides``
    are ``section.key=value`` strings (any depth: ``finetune.tasks.sst.lr=3e-5``) applied on top.
    ``workdir`` is ``--set workspace.dir=WORKDIR`` (resolved), given last.
    """
    raw: dict[str, Any] = {}
    lines: Lines = {}
    cfg_path: Path | None = None
    if path is None and Path(DEFAULT_CONFIG_NAME).exists():
        path = DEFAULT_CONFIG_NAME
    if path is not None:
        cfg_path = Path(path)
        if not cfg_path.is_file():
            raise BertwbError(f"{cfg_path}: config file not found; pass --config FILE or run `bertwb init`")
        raw, lines = _read_yaml(cfg_path)
    where = str(cfg_path) if cfg_path else "config"
    if workdir is not None:  # one path into the config, with its provenance: an override like any --set
        overrides = [*overrides, f"workspace.dir={json.dumps(str(Path(workdir).resolve()))}"]
    for item in overrides:
        _apply_override(raw, lines, item, where)

    sections: dict[str, Any] = {}
    inherited: Inherited = {}  # filled by _build as named sub-sections take their section's values
    for section_name, values in raw.items():
        if section_name not in SECTIONS:
            raise BertwbError(_locate(where, lines, (section_name,))
                              + f"unknown section {_quoted(section_name)}{_suggest(section_name, SECTIONS)}")
        if values is not None:
            sections[section_name] = _build(SECTIONS[section_name], values, (section_name,), where, lines,
                                            inherited=inherited)
    return Config(**sections, path=cfg_path.resolve() if cfg_path else None,
                  base_dir=cfg_path.resolve().parent if cfg_path else Path.cwd(),
                  provenance=Provenance(where, lines, inherited))


def _apply_override(raw: dict[str, Any], lines: Lines, item: str, where: str) -> None:
    """``a.b.c=value`` into the raw mapping; every key of the path is marked as given by --set. A level
    of the path that the file gives as something other than a mapping is its error, not replaced: the
    --set would otherwise hide it (``vocab: [1, 2]`` accepted as soon as a --set touches vocab)."""
    key, sep, value = item.partition("=")
    parts = tuple(part.strip() for part in key.split("."))
    if not sep or len(parts) < 2 or not all(parts):
        raise BertwbError(f"--set {item!r}: expected section.key=value, e.g. --set vocab.vocab_size=4096")
    node = raw
    for depth, part in enumerate(parts[:-1]):
        level = parts[:depth + 1]
        if node.get(part) is not None and not isinstance(node[part], dict):
            raise BertwbError(_locate(where, lines, level) + f"{_quoted('.'.join(level))} is {node[part]!r}, not a "
                              f"mapping of key: value, so --set {item!r} has no key to set; fix the one that is wrong")
        lines.setdefault(level, 0)
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
    try:
        node[parts[-1]] = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError:
        raise BertwbError(f"--set {item!r}: the value is not valid YAML; quote strings with spaces") from None
    lines[parts] = 0


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(f"line {line}: key {_quoted(key)} is given twice (first at line {seen[key]}); "
                                    "keep one of them")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    pass


def _read_yaml(path: Path) -> tuple[dict[str, Any], Lines]:
    """Parse YAML and remember the line of every key at every depth, for error messages."""
    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except UnicodeDecodeError:
        raise BertwbError(f"{path}: not UTF-8 text; save the config as UTF-8") from None
    except _DuplicateKey as exc:
        raise BertwbError(f"{path} {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BertwbError(f"{path}{line}: invalid YAML ({problem}); fix the syntax") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise BertwbError(f"{path}: expected a mapping of sections (ingest:, vocab:, ...) at the top level")
    lines: Lines = {}

    def walk(mapping: yaml.Node, prefix: tuple[str, ...]) -> None:
        if isinstance(mapping, yaml.MappingNode):
            for key_node, value_node in mapping.value:
                key = prefix + (str(key_node.value),)
                lines[key] = key_node.start_mark.line + 1
                walk(value_node, key)

    walk(node, ())
    return data, lines


def _locate(where: str, lines: Lines, key: tuple[str, ...]) -> str:
    line = lines.get(key)
    if line == 0:
        return f"--set {'.'.join(key)}: "
    return f"{where} line {line}: " if line else f"{where}: "


def _quoted(name: object) -> str:
    """A key as it appears in a message: quoted, with control characters escaped, so the message stays one line."""
    return repr(str(name)) if not str(name).isprintable() else f"'{name}'"


def _suggest(name: str, choices: typing.Iterable[str]) -> str:
    choices = list(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(choices) or 'none'}"


def _build(cls: type, values: Any, path: tuple[str, ...], where: str, lines: Lines,
           inherited: Inherited, shared: dict[str, Any] | None = None) -> Any:
    """The section dataclass ``cls`` from a raw mapping found at ``path``, starting from ``shared`` values;
    which keys of a named sub-section come from its section goes into ``inherited``."""
    name = ".".join(path)
    if not isinstance(values, dict):
        raise BertwbError(_locate(where, lines, path) + f"section {_quoted(name)} must be a mapping of key: value")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = dict(shared or {})
    for key, value in values.items():
        key_path = path + (str(key),)
        prefix = _locate(where, lines, key_path)
        if key not in fields:
            hint = _other_types_key(cls, str(key), path) if issubclass(cls, FinetuneTaskConfig) else None
            raise BertwbError(prefix + f"unknown key {_quoted('.'.join(key_path))}"
                              f"{hint or _suggest(str(key), fields)}")
        hint = hints[key]
        if is_subsections(hint):
            kwargs[key] = _build_named(hint, values, key, key_path, where, lines, inherited, fields[key], cls)
        else:
            kwargs[key] = _coerce(value, hint, fields[key], ".".join(key_path), prefix)
    return cls(**kwargs)


def _build_named(hint: Any, parent_values: dict[str, Any], key: str, path: tuple[str, ...], where: str,
                 lines: Lines, inherited: Inherited, f: dataclasses.Field, owner: type) -> dict[str, Any]:
    """Named sub-sections (``finetune.tasks.<name>``), each starting from its parent's shared values."""
    entries = parent_values[key]
    if entries is None:
        return {}
    if not isinstance(entries, dict):
        raise BertwbError(_locate(where, lines, path) + f"{_quoted('.'.join(path))} must be a mapping of names to "
                          "sections")
    entry_cls = typing.get_args(hint)[1]
    shared: dict[str, Any] = {}
    if f.metadata.get("inherit"):
        entry_fields = {g.name for g in dataclasses.fields(entry_cls)}
        parent = _build(owner, {k: v for k, v in parent_values.items() if k != key}, path[:-1], where, lines, {})
        shared = {g.name: getattr(parent, g.name) for g in dataclasses.fields(owner)
                  if g.name in entry_fields and g.name != key}
    built = {}
    for name, values in entries.items():
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
            raise BertwbError(_locate(where, lines, path + (str(name),)) + f"{_quoted(name)} is not a usable name "
                              f"under {'.'.join(path)}; use letters, digits, - and _")
        cls = _task_class(values, path + (name,), where, lines) if entry_cls is FinetuneTaskConfig else entry_cls
        built[name] = _build(cls, values or {}, path + (name,), where, lines, inherited, shared)
        own = values if isinstance(values, dict) else {}
        inherited.update({path + (name, field): path[:-1] + (field,) for field in shared if field not in own})
    return built


def _task_class(values: Any, path: tuple[str, ...], where: str, lines: Lines) -> type[FinetuneTaskConfig]:
    """The settings class of the task at ``path``: its type's, which adds the type's own options."""
    type_name = values.get("type") if isinstance(values, dict) else None
    if type_name is not None and (not isinstance(type_name, str) or type_name not in TASK_TYPES):
        key = ".".join(path + ("type",))
        raise BertwbError(_locate(where, lines, path + ("type",))
                          + f"{key} must be one of {', '.join(TASK_TYPES)}, got {type_name!r}")
    return settings_class(type_name)


def _other_types_key(cls: type, key: str, path: tuple[str, ...]) -> str | None:
    """For a task key unknown to its type but another type's option: which types have it, and the fix."""
    owners = [name for name, task in TASK_TYPES.items()
              if key in {f.name for f in dataclasses.fields(task.settings_class)}]
    if not owners:
        return None
    of = f"; it is an option of {' and '.join(owners)} tasks"
    if cls is FinetuneTaskConfig:
        return f"{of}: set {'.'.join(path)}.type"
    own = next(name for name, task in TASK_TYPES.items() if task.settings_class is cls)
    return f"{of}, and this task is {own}"


def _yaml_word(value: Any) -> str:
    """A choice as it is written in bertwb.yaml: true and false in lower case."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _coerce(value: Any, hint: Any, f: dataclasses.Field, name: str, prefix: str) -> Any:
    """Check ``value`` against the field's type and range; return it in canonical form."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    words = ""  # an integer or a word (``limit_alphabet: auto``): the words, for the integer's errors
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        if isinstance(value, str) and value in union_words(hint):
            return value
        words = "".join(f" or {_yaml_word(word)}" for word in union_words(hint))
        hint = next(a for a in args if a is not type(None) and typing.get_origin(a) is not Literal)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        if not any(value == arg and type(value) is type(arg) for arg in args):  # 1 is not true
            raise BertwbError(prefix + f"{name} must be one of {', '.join(map(_yaml_word, args))}, got {value!r}")
        return value
    if origin is list and args == (int,):
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, int) and not isinstance(v, bool)
                                                               for v in value):
            raise BertwbError(prefix + f"{name} must be a list of whole numbers, e.g. [-4, -3, -2, -1], got {value!r}")
        return value
    if origin is list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BertwbError(prefix + f"{name} must be a list of strings, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise BertwbError(prefix + f"{name} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BertwbError(prefix + f"{name} must be an integer{words}, got {value!r}")
    elif hint is float:
        # PyYAML reads "3e-4" (no dot) as a string, so numbers in strings are accepted.
        try:
            if isinstance(value, bool):
                raise ValueError
            value = float(value)
        except (TypeError, ValueError):
            raise BertwbError(prefix + f"{name} must be a number, got {value!r}") from None
        if not math.isfinite(value):
            raise BertwbError(prefix + f"{name} must be a finite number, got {value!r}")
    elif hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise BertwbError(prefix + f"{name} must be a string, got {value!r}")
        return str(value)
    low, high = f.metadata.get("min"), f.metadata.get("max")
    if low is not None and value < low or high is not None and value > high:
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BertwbError(prefix + f"{name} must be {bounds}{words}, got {value!r}")
    return value
