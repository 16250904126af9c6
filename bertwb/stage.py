"""The stage contract: everything the engine needs to know about a stage, in one `Stage` object.

A module of :mod:`bertwb.stages` declares ``STAGE = Stage(...)`` beside its ``run``; the engine keys, checks,
runs and commits the stage through it and never looks inside the module. Stage modules import nothing heavy
at module level, so `bertwb status` stays quick. A template stage has one instance per name (``finetune/<task>``);
a training stage declares its `Training`, which the engine launches, so no stage calls the engine.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from bertwb.data import shard_files
from bertwb.errors import BertwbError

if TYPE_CHECKING:
    import duckdb

    from bertwb.config import Config
    from bertwb.workspace import Workspace


class NothingBuilt(Exception):  # noqa: N818 - not an error: the stage stands as it was
    """Raised by a stage's ``run`` that found nothing to do after all (a time budget already spent): the
    engine prints its message as the stage's one line and commits nothing, so outputs and manifest stay
    byte for byte as they were."""


@dataclass(frozen=True)
class Training:
    """How `bertwb <stage>` trains on every process: rank 0 runs the stage under the engine, which sends
    each run's plan to the other ranks; they train it with ``follow`` and never touch the workspace."""

    follow: Callable[[Config, Any, Any], Any]  # (cfg, plan, dist): train one plan on a rank other than 0
    # (cfg, instance or None): the device the command trains on and the setting that gave it, named in its
    # errors ("bertwb.yaml line 9: finetune.device"); a one-line error when it names nothing to train
    device: Callable[[Config, str | None], tuple[str, str]]


@dataclass
class Stage:
    """One stage of the pipeline (or one instance of a per-task stage); declared once, never changed
    (tests replace a ``run`` to prove a fresh stage does no work)."""

    name: str  # "pairs", or "finetune/sst" for an instance; also the name of its directory and manifest
    version: int  # bump when the stage's outputs change for the same inputs and params
    order: int  # position in `bertwb run`, between its dependencies and what depends on it
    help: str  # one line: what the stage makes
    run: Callable[[Config, Build], dict[str, Any]]  # does the work; returns the summary for the manifest
    sections: tuple[str, ...] = ()  # config sections whose cache fields enter the key ("{instance}" allowed)
    # more key params than whole sections give, by dotted path: {"pretrain.phases.seq128": {...}}
    params: Callable[[Config], dict[str, dict[str, Any]]] | None = None
    deps: tuple[str, ...] = ()  # upstream stages whose outputs this stage reads
    tables: tuple[str, ...] = ()  # DuckDB tables it builds (as <table>__new, swapped in at commit)
    views: tuple[str, ...] = ()  # SQL statements run in the commit's transaction, after the tables
    has_files: bool = False  # it builds a directory (workspace/<name>/), swapped in whole at commit
    # Freshness hooks, called for every `bertwb status`: identities of what the stage reads from
    # outside the workspace's stages (input files, weights), and why a stage whose key matches is still
    # stale (pretrain: fewer steps done than now asked).
    fingerprint: Callable[[Config, Workspace], list[dict[str, Any]]] | None = None
    behind: Callable[[Config, dict[str, Any]], str | None] | None = None
    report: Callable[[dict[str, Any]], None] | None = None  # prints the summary its own way (default: a table)
    # the summary in one line for `bertwb run`'s table: a format string over its keys, or several, tried in
    # order (a summary may lack a metric that a setting turned off)
    headline: str | tuple[str, ...] = ""
    instances: Callable[[Config], list[str]] | None = None  # a template: the names of its instances
    instance: str | None = None  # this instance's name (None: not an instance)
    training: Training | None = None  # a training stage: how its command runs under torchrun (engine.launch)

    def headline_of(self, summary: dict[str, Any] | None) -> str:
        """``headline`` filled from ``summary`` (the first of several that it fills); empty when the summary lacks
        what every one names."""
        for template in (self.headline,) if isinstance(self.headline, str) else self.headline:
            try:
                return template.format_map(summary or {})
            except (KeyError, ValueError, TypeError):
                continue
        return ""

    def of(self, instance: str) -> Stage:
        """The instance ``instance`` of this template: its own name, directory and config section.

        A template's freshness hooks take the instance's name as the keyword ``instance``; here it is bound.
        """
        def bind(hook: Callable | None) -> Callable | None:
            return None if hook is None else functools.partial(hook, instance=instance)

        return dataclasses.replace(
            self, name=f"{self.name}/{instance}", instance=instance, instances=None,
            sections=tuple(section.format(instance=instance) for section in self.sections),
            fingerprint=bind(self.fingerprint), behind=bind(self.behind))

    @property
    def template(self) -> str:
        """The stage's name without its instance (``finetune`` for ``finetune/sst``)."""
        return self.name.split("/")[0]


@dataclass
class Build:
    """Handed to a stage's ``run``: where to write, the database, and what it was started with."""

    workspace: Workspace
    stage: Stage
    con: duckdb.DuckDBPyConnection
    out_dir: Path  # temporary; swapped in as workspace/<stage>/ on success
    inputs: list[dict[str, Any]] = field(default_factory=list)  # the fingerprint hook's identities
    key: str = ""  # the stage key this build will be committed under
    forced: bool = False  # --force: rebuild from nothing (a stage that resumes must not)
    runtime: Any = None  # what the command hands the stage, e.g. a training process group
    # tables built as Parquet files (`share_table`): name → the select of its view, over `shard_files.FILES`
    parquet: dict[str, str] = field(default_factory=dict)

    def table(self, name: str) -> str:
        """The temporary name to build table ``name`` under."""
        if name not in self.stage.tables:
            raise ValueError(f"stage {self.stage.name} does not declare table {name}")
        return f"{name}__new"

    def shard_folder(self, name: str) -> Path:
        """The folder (made here) where table ``name``'s Parquet files go, for `share_table`."""
        self.table(name)  # a table the stage declares
        folder = shard_files.table_folder(self.out_dir, name)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def share_table(self, name: str, select: str = shard_files.PLAIN_VIEW, rows: int | None = None) -> None:
        """Make the Parquet files in `shard_folder` table ``name`` of this build: ``select`` over them (a view,
        made again over the stage's folder when the commit has swapped it in). ``rows``: how many rows the
        tasks wrote; a one-line error when the files that this machine sees hold another number."""
        self.parquet[name] = select
        folder = self.shard_folder(name)
        for leftover in folder.glob(".*"):  # a killed task's half-written file (a retry wrote it whole)
            leftover.unlink()
        self.con.execute(f'create view "{self.table(name)}" as {shard_files.view_sql(select, folder)}')
        found = self.con.execute(f'select count(*) from "{self.table(name)}"').fetchone()[0]
        if rows is not None and found != rows:
            raise BertwbError(f"{folder}: the Parquet files of table {name} hold {found:,} rows here, and the Ray "
                              f"tasks wrote {rows:,}; put the workspace (workspace.dir) on storage every node "
                              "mounts, at the same path on each")

    def upstream_dir(self, stage: str) -> Path:
        return self.workspace.stage_dir(stage)
