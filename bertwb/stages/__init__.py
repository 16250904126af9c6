"""The pipeline: every module in this package is one stage and declares ``STAGE`` beside its ``run``.

The stages are found here, not listed: adding a stage is one new module (and its config section in
:mod:`bertwb.config`). They run in the order of their ``order`` (a dependency always comes first);
a template stage (``instances``) stands in the pipeline once per instance the config names.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil

from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.stage import Stage


@functools.cache
def templates() -> tuple[Stage, ...]:
    """Every stage module's ``STAGE``, in pipeline order."""
    found = [importlib.import_module(f"{__name__}.{info.name}").STAGE for info in pkgutil.iter_modules(__path__)]
    found.sort(key=lambda stage: stage.order)
    names = [stage.name for stage in found]
    for stage in found:
        for dep in stage.deps:
            if dep not in names or names.index(dep) > names.index(stage.name):
                raise RuntimeError(f"stage {stage.name} depends on {dep}, which does not run before it")
    return tuple(found)


def pipeline(cfg: Config) -> list[Stage]:
    """Every stage in order, each template expanded into its instances for ``cfg``."""
    stages: list[Stage] = []
    for stage in templates():
        if stage.instances is None:
            stages.append(stage)
        else:
            stages.extend(stage.of(name) for name in stage.instances(cfg))
    return stages


def names() -> list[str]:
    """The stage names `bertwb run --until` and friends accept (templates by their own name)."""
    return [stage.name for stage in templates()]


def template(name: str) -> Stage:
    """The stage or template called ``name`` as its module declares it (``finetune``, never ``finetune/sst``)."""
    found = next((stage for stage in templates() if stage.name == name), None)
    if found is None:
        raise BertwbError(_unknown(name))
    return found


def get(name: str, cfg: Config) -> Stage:
    """The stage (or instance, ``finetune/sst``) called ``name``; a one-line error naming the known ones."""
    for stage in pipeline(cfg):
        if stage.name == name:
            return stage
    template, _, instance = name.partition("/")
    for stage in templates():
        if stage.name == template and stage.instances is not None:
            known = ", ".join(stage.instances(cfg)) or "none"
            raise BertwbError(f"{template} has no instance {instance!r} in the config (known: {known})")
    raise BertwbError(_unknown(name))


def _unknown(name: str) -> str:
    """The line for a stage name that is none: the closest one, when one is close, and all of them."""
    close = difflib.get_close_matches(name.lower(), names(), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"no stage called {name!r}; {hint}the stages are {', '.join(names())}"


def select(cfg: Config, name: str) -> list[Stage]:
    """The pipeline's stages called ``name``: one stage, one instance, or every instance of a template."""
    chosen = [stage for stage in pipeline(cfg) if stage.name == name or stage.template == name]
    if chosen or any(stage.name == name and stage.instances is not None for stage in templates()):
        return chosen  # a template without instances in this config runs nothing
    return [get(name, cfg)]


def between(cfg: Config, start: str | None = None, until: str | None = None,
            only: tuple[str, ...] = ()) -> list[str]:
    """The stages `bertwb run` runs, in order: ``only`` those (stages, templates or instances), else every
    stage from ``start`` to ``until`` (each a stage or template name; a template brings all its instances)."""
    if only and (start or until):
        raise BertwbError(f"--only runs just the stages it names, so --from/--until beside it would be ignored; "
                          f"give --only {only[0]} alone, or --from/--until")
    if only:
        return [stage.name for name in only for stage in select(cfg, name)]

    def order_of(name: str, option: str) -> int:
        template, slash, instance = name.partition("/")
        found = next((stage for stage in templates() if stage.name == template), None)
        if found is None:
            raise BertwbError(_unknown(name))
        if slash:  # one instance cannot bound a range: its template's other instances would run too
            raise BertwbError(f"{option} takes a stage ({template}), not one of its instances ({name}); "
                              f"run one instance with --only {name}")
        return found.order

    low = order_of(start, "--from") if start else -1
    high = order_of(until, "--until") if until else 1 << 30
    if low > high:
        raise BertwbError(f"--from {start} comes after --until {until}; the stages run {' → '.join(names())}")
    orders = {stage.name: stage.order for stage in templates()}
    return [stage.name for stage in pipeline(cfg) if low <= orders[stage.template] <= high]
