"""The stage contract: everything the engine needs to know about a stage, in one `Stage` object.

A module of :mod:`bertwb.stages` declares ``STAGE = Stage(...)`` beside its ``run``; the engine keys, checks,
runs and commits the stage through it and never looks inside the module. Stage modules import nothing heavy
at module level, so `bertwb status` stays quick. A template stage has one instance per name (``finetune/<task>``);
a training stage declares its `Training`, which the engine launches, so no stage calls the engine.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from bertwb.data import executor, sinks
from bertwb.data.executor import Local
from bertwb.data.parts import PartWriter
from bertwb.data.sinks import DuckTable, ParquetTable

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
    each run's plan to the other ranks; they train it with ``train_received_plan`` and never touch the workspace."""

    train_received_plan: Callable[[Config, Any, Any], Any]  # (cfg, plan, dist): train it on a rank other than 0
    # (cfg, instance or None): the device the command trains on and where it was given (`Config.origin`), named
    # in its errors ("bertwb.yaml line 9: finetune.device"); a one-line error when it names nothing to train
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
    # a training stage whose current run this stage reads without depending on it (evaluate: pretrain's
    # ``latest``): whoever keys or builds it finds that run (`bertwb.current`) and hands it over as a callable,
    # to the fingerprint hook as the keyword ``current_run`` and to ``run`` as `Build.current_run`
    reads_run: str | None = None
    tables: tuple[str, ...] = ()  # DuckDB tables it builds (as <table>__new, swapped in at commit)
    views: tuple[str, ...] = ()  # SQL statements run in the commit's transaction, after the tables
    has_files: bool = False  # it builds a directory (workspace/<name>/), swapped in whole at commit
    # Freshness hooks, called for every `bertwb status`: identities of what the stage reads from
    # outside the workspace's stages (input files, weights), and why a stage whose key matches is unfinished,
    # so still stale (pretrain: fewer steps done than now asked); None when it is not.
    fingerprint: Callable[[Config, Workspace], list[dict[str, Any]]] | None = None
    unfinished: Callable[[Config, dict[str, Any]], str | None] | None = None
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
            fingerprint=bind(self.fingerprint), unfinished=bind(self.unfinished))

    @property
    def template(self) -> str:
        """The stage's name without its instance (``finetune`` for ``finetune/sst``)."""
        return self.name.split("/")[0]


@dataclass
class Build:
    """Handed to a stage's ``run``: where to write, the database, what it was started with, and who runs its
    tasks and where its tables' rows go (both chosen once, from ``workspace.executor``), so that a stage has one
    code path whichever runs it."""

    workspace: Workspace
    stage: Stage
    con: duckdb.DuckDBPyConnection
    out_dir: Path  # temporary; swapped in as workspace/<stage>/ on success
    inputs: list[dict[str, Any]] = field(default_factory=list)  # the fingerprint hook's identities
    key: str = ""  # the stage key this build will be committed under
    forced: bool = False  # --force: rebuild from nothing (a stage that resumes must not)
    runtime: Any = None  # what the command hands the stage, e.g. a training process group
    current_run: Callable[[], Path] | None = None  # the run directory of ``stage.reads_run``, found when asked
    executor_setting: str = "local"  # workspace.executor: who runs the tasks, and so where table rows go
    sinks: dict[str, Any] = field(default_factory=dict)  # each table's sink (`rows`), which the commit asks
    _scratch: list[Any] = field(default_factory=list)
    _executor: Local | None = None

    def table(self, name: str) -> str:
        """The temporary name to build table ``name`` under."""
        if name not in self.stage.tables:
            raise ValueError(f"stage {self.stage.name} does not declare table {name}")
        return f"{name}__new"

    def rows(self, name: str, columns: str | None = None, numbered: tuple[str, str | None] | None = None,
             in_flight: int = 0) -> DuckTable | ParquetTable:
        """The sink of table ``name``: rows into DuckDB, or Parquet files of the build's folder on a cluster
        (`bertwb.data.sinks`). ``columns``: the table's, as SQL (for a table that rows are added to);
        ``numbered``: (column, key) where each part's offset is added to ``key`` (None: to the row's place);
        ``in_flight``: inserts that may wait on DuckDB's writer thread (0: each one here and now)."""
        relation = self.table(name)
        if self.executor_setting == "ray":
            sink: DuckTable | ParquetTable = ParquetTable(
                self.con, name, relation, sinks.table_folder(self.out_dir, name), self.out_dir / "parts" / name,
                columns, numbered, run_tasks=self.map, workers=lambda: self.workers(1))
        else:
            sink = DuckTable(self.con, name, relation, columns, numbered, in_flight)
        self.sinks[name] = sink
        return sink

    def scratch(self, name: str, columns: str, numbered: tuple[str, str | None] | None = None
                ) -> DuckTable | ParquetTable:
        """A table the build reads by ``name`` and drops before the commit (rows its tasks read, before they
        are numbered): a temporary DuckDB table, or Parquet files in the build's ``scratch/`` on a cluster."""
        if self.executor_setting == "ray":
            sink: DuckTable | ParquetTable = ParquetTable(
                self.con, name, name, self.out_dir / "scratch" / name, self.out_dir / "parts" / name, columns,
                numbered, temporary=True)
        else:
            sink = DuckTable(self.con, name, name, columns, numbered, temporary=True)
        self._scratch.append(sink)
        return sink

    def workers(self, wanted: int) -> int:
        """How many workers run the stage's tasks, given its own choice: a cluster's CPUs on a cluster."""
        return self._runner().workers(wanted)

    def in_process(self, workers: int) -> bool:
        """Whether `map` runs the tasks in this process, where they may use its database connection."""
        return self._runner().in_process(workers)

    def part_writer(self, folder: Path) -> PartWriter:
        """How a task writes rows for this process to take (`bertwb.data.parts`), in ``folder``."""
        return self._runner().parts(folder)

    def map(self, function: Callable[[Any], Any], tasks: Iterable[Any], workers: int) -> Iterator[Any]:
        """``map(function, tasks)`` in order, on ``workers`` workers of whoever runs the stage's tasks."""
        return self._runner().map(function, tasks, workers)

    def _runner(self) -> Local:
        if self._executor is None:  # joins a cluster: only when a stage first asks
            self._executor = executor.for_setting(self.executor_setting)
        return self._executor

    def close(self) -> None:
        """After the stage's run: every sink finished, scratch tables and tasks' leftovers gone."""
        for sink in self.sinks.values():
            sink.finish()
        for sink in self._scratch:
            sink.drop()
        for work in sinks.WORK_DIRS:
            shutil.rmtree(self.out_dir / work, ignore_errors=True)

    def abort(self) -> None:
        """After a failed run: the inserts under way stopped and rolled back, so the build's tables can go."""
        for sink in [*self.sinks.values(), *self._scratch]:
            sink.abort()

    def upstream_dir(self, stage: str) -> Path:
        return self.workspace.stage_dir(stage)
