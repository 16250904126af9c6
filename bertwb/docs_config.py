"""`python -m bertwb.docs_config`: docs/configuration.md, every key of bertwb.yaml with its type, default, range
and doc, written from the typed config (`bertwb.config`'s sections, each task type's options) so the page cannot
drift from the code. ``--check`` writes nothing and fails, naming this command, while the page is out of date.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from bertwb import ui
from bertwb.config import (SECTIONS, FinetuneConfig, FinetuneTaskConfig, PretrainConfig, PretrainPhase, is_subsections,
                           union_words)
from bertwb.tasks.finetune.tasktypes import TASK_TYPES

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
COMMAND = "python -m bertwb.docs_config"

_HEAD = f"""# Configuration reference

Every key of `bertwb.yaml`, section by section, as `bertwb/config.py` and the fine-tuning task types declare
it. This page is generated: `{COMMAND}` rewrites it, and `tests/test_docs.py` fails
while it differs from the code. How the file is read (types checked before any work, "did you mean",
relative paths, `--set` at any depth) is in [Commands and configuration](commands.md#configuration).

The defaults are the code's, which `bertwb init` writes (BERT's own recipe); the repository's own
`bertwb.yaml` changes a few of them so that the demo trains in minutes on a CPU, and says which in its
head. *In the key* says whether a value enters its stage's cache key: *yes*, a change rebuilds the stage
and those below it; *no*, it changes how a result is computed (devices, threads, logging), never what;
*off its default*, it enters only when set to another value, so workspaces built before the key existed
stay fresh.
"""


def reference() -> str:
    """The whole page, as `PAGE` should hold it."""
    named = [name for name in SECTIONS] + ["pretrain phases", "finetune tasks"]
    parts = [_HEAD, "Sections: " + " · ".join(f"[{name}](#{name.replace(' ', '-')})" for name in named) + "\n"]
    for name, cls in SECTIONS.items():
        parts.append(_section(f"## {name}", _doc(cls), name, _own_fields(cls)))
    parts.append(_section(
        "## pretrain phases",
        "`pretrain.phases.<name>`: one phase of a phased pre-training, trained in the order written. A phase takes "
        "every `pretrain` key it does not set (any of them but `nsp` and `phases` may be set per phase), and its "
        "pairs may have a length of their own:",
        "pretrain.phases.<name>", [f for f in _own_fields(PretrainPhase) if f.name not in _names(PretrainConfig)]))
    parts.append(_section(
        "## finetune tasks",
        "`finetune.tasks.<name>`: one fine-tuning task, its own cached stage `finetune/<name>`. A task takes every "
        "`finetune` key it does not set (any of them but `tasks` may be set per task), and has these of its own; "
        "its type adds the options below.",
        "finetune.tasks.<name>", [f for f in _own_fields(FinetuneTaskConfig) if f.name not in _names(FinetuneConfig)]))
    for type_name, task in TASK_TYPES.items():
        parts.append(_section(
            f"### {type_name} tasks",
            f"The options of a task with `type: {type_name}`, beside those of every task.",
            "finetune.tasks.<name>",
            [f for f in _own_fields(task.settings_class) if f.name not in _names(FinetuneTaskConfig)]))
    return "\n".join(parts)


@dataclasses.dataclass
class _Field:
    """A config field and its type, resolved from the annotation's text."""

    field: dataclasses.Field
    hint: Any

    @property
    def name(self) -> str:
        return self.field.name


def _names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _own_fields(cls: type) -> list[_Field]:
    """``cls``'s fields with their resolved types, in declaration order."""
    hints = typing.get_type_hints(cls)
    return [_Field(f, hints[f.name]) for f in dataclasses.fields(cls)]


def _doc(cls: type) -> str:
    """A section class's own docstring; none for a dataclass whose docstring is the one dataclass writes."""
    doc = cls.__doc__ or ""
    return "" if doc.startswith(cls.__name__ + "(") else doc


def _section(heading: str, doc: str, prefix: str, fields: list[_Field]) -> str:
    lines = [heading, ""]
    if doc:
        lines += [" ".join(doc.split()), ""]
    lines += ["| key | type | default | range or choices | in the key | what it does |",
              "|---|---|---|---|---|---|"]
    for item in fields:
        f, meta = item.field, item.field.metadata
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        cells = [f"`{prefix}.{f.name}`", _type(item.hint), f"`{_value(default)}`", _range(item.hint, meta),
                 _in_key(item.hint, meta), meta["doc"]]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _type(hint: Any) -> str:
    """A field's type as a reader of YAML thinks of it: ``int or null``, ``list of int``, ``named sections``."""
    if is_subsections(hint):
        return "named sections"
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        named = [_type(arg) for arg in args if typing.get_origin(arg) is not Literal]
        named += map(_value, union_words(hint))
        return " or ".join(named + ["null"] * (type(None) in typing.get_args(hint)))  # int or null, int or auto
    if typing.get_origin(hint) is Literal:
        return "choice"
    if typing.get_origin(hint) is list:
        return f"list of {_type(args[0])}"
    return {bool: "bool", int: "int", float: "number", str: "text"}.get(hint, getattr(hint, "__name__", str(hint)))


def _value(value: Any) -> str:
    """A value as YAML writes it: ``null``, ``true``, ``[]``, ``5e-05``, ``auto``."""
    return value if isinstance(value, str) else json.dumps(value)


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else repr(x)


def _range(hint: Any, meta: dict[str, Any]) -> str:
    choices = [arg for arg in typing.get_args(hint) if typing.get_origin(hint) is Literal]
    if choices:
        return ", ".join(f"`{_value(choice)}`" for choice in choices)
    low, high = meta["min"], meta["max"]
    if low is not None and high is not None:
        bounds = f"{_number(low)} to {_number(high)}"
    elif low is not None:
        bounds = f"≥ {_number(low)}"
    else:
        bounds = f"≤ {_number(high)}" if high is not None else ""
    return ", ".join([bounds] * bool(bounds) + [f"`{_value(word)}`" for word in union_words(hint)])  # ≥ 1, `auto`


def _in_key(hint: Any, meta: dict[str, Any]) -> str:
    if is_subsections(hint):
        return "each its own"
    if not meta["in_key"]:
        return "no"
    return "off its default" if meta["added"] else "yes"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Write nothing; exit 1 when the page is out of date.")
    parser.add_argument("--output", type=Path, default=PAGE, help=f"The page (default {PAGE}).")
    args = parser.parse_args(argv)
    text = reference()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            ui.error(f"{args.output} is out of date with bertwb/config.py and the task types' options; "
                     f"run `{COMMAND}` and commit the page")
            return 1
        ui.info(f"{args.output} is up to date")
        return 0
    if current != text:
        args.output.write_text(text, encoding="utf-8")
    ui.info(f"wrote {args.output}" if current != text else f"{args.output} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
