"""``bertwb init --recipe NAME``: a config written for one purpose instead of the defaults (`RECIPES`).

A recipe is values by dotted key, each with why, and comment lines for the config's head; `config_text`
checks the options a recipe takes (``--from``, ``--hours``) before anything is measured or written, and
renders the whole config with `bertwb.scaffold.render_config`, so every other key keeps its default and doc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bertwb.config import WorkspaceConfig
from bertwb.errors import BertwbError
from bertwb.recipes.base import Recipe
from bertwb.recipes.paper import paper_recipe
from bertwb.scaffold import render_config
from bertwb.workspace import Workspace


@dataclass(frozen=True)
class RecipeKind:
    purpose: str  # one line for `--recipe list`
    option: str | None  # the option it needs: "--from", "--hours" or None
    build: Callable[..., Recipe]  # (directory, inputs, option's value, the project's workspace) -> Recipe


def _continue(directory: Path, inputs: list[str], source: str, workspace: Workspace) -> Recipe:
    from bertwb.recipes.continued import continue_recipe  # torch loads for this recipe only

    return continue_recipe(directory, Path(source), inputs, workspace)


def _budget(directory: Path, inputs: list[str], hours: float, workspace: Workspace) -> Recipe:
    from bertwb.recipes.budget import budget_recipe  # torch loads for this recipe only

    return budget_recipe(directory, inputs, hours, workspace)


def _paper(size: str) -> Callable[..., Recipe]:
    def build(directory: Path, inputs: list[str], _: Any, workspace: Workspace) -> Recipe:
        return paper_recipe(size)
    return build


RECIPES: dict[str, RecipeKind] = {
    "continue": RecipeKind("adapt a published BERT to your text: continued masked-LM pre-training from its weights "
                           "and vocabulary (--from DIR: an import-hf folder or a Hugging Face BERT folder)",
                           "--from", _continue),
    "budget": RecipeKind("the best BERT from scratch that --hours H buy on this machine and corpus: sized by a short "
                         "timing of the real training step, stopped by pretrain.max_hours (Cramming's choices)",
                         "--hours", _budget),
    "bert-base": RecipeKind("BERT-base as Devlin et al. (2019) trained it: 1M steps of 256, seq 128 then 512 "
                            "(GPUs; pipelines/bert-base.yaml)", None, _paper("base")),
    "bert-large": RecipeKind("BERT-large with the same recipe: 1M steps of 256, seq 128 then 512 (GPUs)", None,
                             _paper("large")),
}
OPTION_METAVAR = {"--from": "DIR", "--hours": "H"}


def listing() -> list[str]:
    """One line per recipe: its name and what it is for (``init --recipe list``)."""
    width = max(len(name) for name in RECIPES)
    return [f"{name.ljust(width)}  {kind.purpose}" for name, kind in RECIPES.items()]


def config_text(recipe: str | None, directory: Path, inputs: list[str], source: str | None,
                hours: str | None, workspace: Workspace, kept_dir: str | None = None) -> str | None:
    """The recipe's bertwb.yaml text, or None for the default config; a one-line error for a wrong option.
    ``workspace`` is the project's, where a corpus already ingested is measured; ``kept_dir`` is the
    workspace.dir its bertwb.yaml gave, which the new config keeps as written (recipe or not), so that
    ``init --force`` never moves a project off the workspace its stages built."""
    given = {"--from": source, "--hours": hours}
    kept = Recipe([])
    if kept_dir is not None and kept_dir != WorkspaceConfig().dir:
        kept.set("workspace.dir", kept_dir, "Kept from the bertwb.yaml that init --force replaced: the workspace its "
                 "stages built, relative to this file.")
    if recipe is None:
        for option, value in given.items():
            if value is not None:
                owner = next(name for name, kind in RECIPES.items() if kind.option == option)
                raise BertwbError(f"{option} goes with a recipe: `bertwb init --recipe {owner} {option} "
                                  f"{OPTION_METAVAR[option]}`")
        return render_config(inputs, [], kept.values, kept.notes) if kept.values else None
    kind = RECIPES.get(recipe)
    if kind is None:
        raise BertwbError(f"--recipe {recipe}: no such recipe; choose one of {', '.join(RECIPES)} "
                          "(`bertwb init --recipe list` says what each is for)")
    for option, value in given.items():
        if value is not None and option != kind.option:
            owner = next(name for name, other in RECIPES.items() if other.option == option)
            raise BertwbError(f"--recipe {recipe} takes no {option} (that is --recipe {owner}'s); leave it out")
    if kind.option is not None and given[kind.option] is None:
        raise BertwbError(f"--recipe {recipe} needs {kind.option} {OPTION_METAVAR[kind.option]}: "
                          f"`bertwb init --recipe {recipe} {kind.option} {OPTION_METAVAR[kind.option]}`")
    value = _hours(hours) if kind.option == "--hours" else source
    built = kind.build(directory, inputs, value, workspace)
    return render_config(inputs, [f"# Recipe {recipe}: {kind.purpose}.", *built.about],
                         {**built.values, **kept.values}, {**built.notes, **kept.notes})


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not math.isfinite(hours) or hours <= 0 or hours > 100_000:
        raise BertwbError(f"--hours {text}: give the hours of pre-training as a number above 0 (e.g. --hours 0.25 "
                          "for 15 minutes), at most 100000")
    return hours
