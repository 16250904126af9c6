"""The stage engine: keys, freshness, `run_pipeline` and `status` for any `bertwb.stage.Stage`, and `launch`.

A stage is fresh when its manifest holds its current key (:mod:`bertwb.keys`) and its tables, directory and
manifest carry one build id (`check`, on every `bertwb status`), so a half-committed stage is stale, never
fresh; `run_pipeline` lets `commit.settle` finish or discard such a commit before any stage runs, then builds
and commits stale stages through :mod:`bertwb.commit`. `launch` runs a training stage on every torchrun
process as its `Training` declares. docs/workspace.md, "What makes a stage fresh" and "How a stage commits", says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb

from bertwb import commit, disk, environment, stages, ui
from bertwb.config import Config
from bertwb.current import runs
from bertwb.data import sinks
from bertwb.embed import store as embed_store
from bertwb.errors import BertwbError
from bertwb.keys import input_fingerprints, stage_key
from bertwb.stage import NothingBuilt, Stage
from bertwb.workspace import Workspace


@dataclass
class State:
    """Where a stage stands: fresh, stale (with the reason) or missing."""

    stage: str
    state: str  # fresh | stale | missing
    reason: str
    key: str | None
    manifest: dict[str, Any] | None


@dataclass
class _Probe:
    """What `check` reads from the workspace, read once per command: the tables with their build labels
    (None when another process holds the database), or why the database is unusable; and the verdicts
    on stages checked so far."""

    ws: Workspace
    con: duckdb.DuckDBPyConnection | None = None
    states: dict[str, State] = field(default_factory=dict)
    _tables: dict[str, str | None] | None = None
    _read: bool = False
    problem: str | None = None  # the database does not open, or is shorter than its tables need
    views: dict[str, str] = field(default_factory=dict)  # each view's SQL (a Parquet table's names its files)

    def tables(self) -> dict[str, str | None] | None:
        if not self._read:
            self._read = True
            try:
                self._tables, self.problem, self.views = _read_tables(self.ws, self.con)
            except BertwbError as exc:
                self._tables, self.problem = {}, str(exc)
        return self._tables


def _read_tables(ws: Workspace, con: duckdb.DuckDBPyConnection | None) -> tuple[dict[str, str | None] | None,
                                                                                str | None, dict[str, str]]:
    """Every table's comment (its build label) by name, whether the file is truncated, and every view's SQL;
    (None, None, {}) when the database is busy (another bertwb writes to it)."""
    if con is not None:
        return commit.table_labels(con), environment.truncation(con, ws.db_path), commit.view_sources(con)
    if not ws.db_path.exists():
        return {}, None, {}
    try:
        with duckdb.connect(str(ws.db_path), read_only=True) as ro:
            return commit.table_labels(ro), environment.truncation(ro, ws.db_path), commit.view_sources(ro)
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            return None, None, {}
        raise environment.user_error(exc, ws.root) or environment.damaged_database(ws.db_path, str(exc)) from None


def check(stage: Stage, cfg: Config, ws: Workspace, con: duckdb.DuckDBPyConnection | None = None,
          inputs: list[dict[str, Any]] | None = None, probe: _Probe | None = None) -> State:
    """Compare the stage's manifest with the current config, upstream identities and outputs."""
    probe = probe or _Probe(ws, con)
    name = stage.name
    if inputs is None and name in probe.states:
        return probe.states[name]
    manifest = ws.read_manifest(name)
    state = None
    for dep in stage.deps:
        dep_state = check(stages.get(dep, cfg), cfg, ws, probe=probe)
        if dep_state.state != "fresh":
            state = State(name, "stale" if manifest else "missing", f"upstream {dep} is {dep_state.state}",
                          None, manifest)
            break
    if state is None:
        state = _check_own(stage, cfg, ws, manifest, probe, inputs)
    if inputs is None:
        probe.states[name] = state
    return state


def _check_own(stage: Stage, cfg: Config, ws: Workspace, manifest: dict[str, Any] | None, probe: _Probe,
               inputs: list[dict[str, Any]] | None) -> State:
    name = stage.name
    if inputs is None:
        try:
            inputs = input_fingerprints(stage, cfg, ws, runs(cfg, ws))
        except BertwbError as exc:  # an input that is gone: status shows it, the run stops on it
            return State(name, "stale" if manifest else "missing", str(exc), None, manifest)
    key, parts = stage_key(stage, cfg, ws, inputs)
    if manifest is None:
        damage = ws.manifest_damage(name)
        if damage:  # as a truncated database: stale, and the next run rebuilds the stage
            return State(name, "stale", f"damaged: {ws.manifest_path(name)} is {damage}; `bertwb run` rebuilds it",
                         key, None)
        return State(name, "missing", "never run", key, None)
    if manifest.get("format") != commit.MANIFEST_FORMAT:
        return State(name, "stale", f"made by an older bertwb (manifest format {manifest.get('format')} → "
                                    f"{commit.MANIFEST_FORMAT})", key, manifest)
    if manifest.get("key") != key:
        return State(name, "stale", _why_changed(manifest, parts), key, manifest)
    broken = _inconsistent(name, manifest, ws, probe)
    if broken:
        return State(name, "stale", broken, key, manifest)
    unfinished = stage.unfinished(cfg, manifest) if stage.unfinished else None
    if unfinished:
        return State(name, "stale", unfinished, key, manifest)
    unchecked = " (tables not checked: the database is in use)" if manifest.get("outputs", {}).get("tables") \
        and probe.tables() is None else ""
    return State(name, "fresh", f"key {key[:8]}{unchecked}", key, manifest)


def _why_changed(manifest: dict[str, Any], parts: dict[str, Any]) -> str:
    """One line naming what differs between the manifest and the current key parts."""
    if manifest.get("version") != parts["version"]:
        return f"stage format v{manifest.get('version')} → v{parts['version']}"
    changes = []
    for section, params in parts["params"].items():
        old = manifest.get("params", {}).get(section, {})
        for key in sorted(set(params) | set(old)):
            if old.get(key) != params.get(key):  # absent on one side: an ``added`` option at its default
                was, now = (repr(side[key]) if key in side else "default" for side in (old, params))
                changes.append(f"{section}.{key} {was} → {now}")
    for dep, identity in parts["deps"].items():
        old_identity = manifest.get("deps", {}).get(dep)
        if old_identity != identity:
            changes.append(f"upstream {dep} was rebuilt ({str(old_identity)[:8]} → {str(identity)[:8]})")
    old_inputs = {i["path"]: i for i in manifest.get("inputs", [])}
    new_inputs = {i["path"]: i for i in parts["inputs"]}
    for path in sorted(set(old_inputs) | set(new_inputs)):
        missing = " (missing)" if new_inputs.get(path, {}).get("missing") else ""  # the stage then says so
        if path not in old_inputs:
            changes.append(f"input added: {path}{missing}")
        elif path not in new_inputs:
            changes.append(f"input removed: {path}")
        elif old_inputs[path] != new_inputs[path]:
            changes.append(f"input changed: {path}{missing}")
    if not changes:
        return "key changed"
    more = f" (+{len(changes) - 3} more)" if len(changes) > 3 else ""
    return ", ".join(changes[:3]) + more


def _inconsistent(name: str, manifest: dict[str, Any], ws: Workspace, probe: _Probe) -> str | None:
    """Why the stage's outputs are not the ones its manifest describes, from what is cheap to read: the
    files' sizes, the directory's and the tables' build ids, whether the database opens. None: they are."""
    outputs, build = manifest.get("outputs", {}), manifest.get("build")
    for rel, size in outputs.get("files", {}).items():
        try:
            actual = (ws.root / rel).stat().st_size
        except OSError:
            return f"output missing: {rel}"
        if actual != size:
            return f"output changed: {rel} is {actual:,} bytes, its build wrote {size:,}"
    interrupted = "; the next run repairs it" if ws.pending_path(name).exists() else ""
    if manifest.get("has_files") and ws.files_build(name) != build:
        return f"interrupted commit: {name}/ is not the build its manifest describes{interrupted}"
    if outputs.get("tables"):
        tables = probe.tables()
        if probe.problem:
            return f"database unreadable: {probe.problem}"
        for table in outputs["tables"] if tables is not None else ():
            if table not in tables:
                return f"output missing: table {table}"
            if tables[table] != commit.TABLE_LABEL + str(build):
                return f"interrupted commit: table {table} is not the build its manifest describes{interrupted}"
            folder = sinks.table_folder(ws.stage_dir(name), table)
            if table in probe.views and not sinks.reads_folder(probe.views[table], folder):
                return (f"moved: table {table} reads Parquet files outside {ws.root} (the workspace was moved or "
                        "copied); the next run rebuilds it")
    return None


def run_stage(stage: Stage, cfg: Config, ws: Workspace, con: duckdb.DuckDBPyConnection, force: bool = False,
              runtime: Any = None) -> dict[str, Any] | None:
    """Run one stage unless fresh; return its summary, or None when skipped. Caller holds the lock."""
    name = stage.name
    probe = _Probe(ws, con)
    for dep in stage.deps:
        dep_state = check(stages.get(dep, cfg), cfg, ws, probe=probe)
        if dep_state.state != "fresh":
            raise BertwbError(f"{name} needs {dep}, which is {dep_state.state} ({dep_state.reason}); "
                              f"run `bertwb {dep}` or `bertwb run` first")
    inputs = input_fingerprints(stage, cfg, ws, runs(cfg, ws))
    state = check(stage, cfg, ws, inputs=inputs, probe=probe)
    key, parts = stage_key(stage, cfg, ws, inputs)
    _detail_key(name, key, state.manifest)
    if state.state == "fresh" and not force:
        ui.stage_line(name, f"fresh ({state.reason}), skipped")
        return None
    why = "forced" if state.state == "fresh" else f"{state.state}: {state.reason}"
    ui.stage_line(name, f"running ({why})")

    try:
        summary, seconds = commit.build_and_commit(stage, cfg, ws, con, inputs, key, parts, force, runtime)
    except NothingBuilt as exc:
        ui.stage_line(name, str(exc))
        return None
    stage.report(summary) if stage.report is not None else ui.summary(name, summary)
    ui.stage_line(name, f"done in {seconds:.1f}s (key {key[:8]})")
    return summary


def _detail_key(name: str, key: str, manifest: dict[str, Any] | None) -> None:
    """With -v: the stage's full key, and the one its manifest holds when that differs (why it reruns)."""
    built = (manifest or {}).get("key")
    if built is None:
        ui.detail(f"{name}: key {key}; no manifest yet")
    elif built != key:
        ui.detail(f"{name}: key {key}; the manifest holds {built}")
    else:
        ui.detail(f"{name}: key {key}, as in its manifest")


def run_pipeline(cfg: Config, ws: Workspace, names: list[str], force: bool = False,
                 runtime: Any = None) -> dict[str, Any]:
    """Run the stages ``names`` (a template name runs all its instances) in order under the workspace
    lock; return the summaries of those that ran. ``runtime`` goes to each stage's ``Build``.

    A full disk, a permission or a damaged database is a one-line `BertwbError` (`bertwb.environment`)."""
    chosen = [stage for name in names for stage in stages.select(cfg, name)]
    ran: dict[str, Any] = {}
    current = None
    try:
        with ws.lock("bertwb " + " ".join(names)):
            ws.recover()
            con = ws.connect()
            try:
                damage = environment.truncation(con, ws.db_path)
                if damage:
                    raise environment.damaged_database(ws.db_path, damage)
                commit.settle(ws, con)
                for index, current in enumerate(chosen, 1):
                    if len(chosen) > 1:
                        ui.pipeline_step(index, len(chosen), current.name)
                    summary = _run_named(current, index, len(chosen), cfg, ws, con, force, runtime)
                    if summary is not None:
                        ran[current.name] = summary
            finally:
                try:
                    con.close()
                except duckdb.Error:
                    pass  # invalidated by a fatal error, reported below
    except BertwbError:
        raise
    except Exception as exc:  # noqa: BLE001 - a full disk comes as OSError, DuckDB's, torch's or safetensors' type
        known = environment.user_error(exc, ws.root, _last_size(ws, current.name) if current else None)
        if known is None:
            raise
        raise known from exc
    return ran


def launch(cfg: Config, ws: Workspace, name: str, force: bool = False) -> dict[str, Any] | None:
    """`bertwb pretrain`, `bertwb finetune [TASK]`: run training stage ``name`` (a template: every instance)
    on every process torchrun started, or on this one alone, as the stage's `Training` declares. Rank 0
    runs the pipeline with the process group as the builds' runtime and returns its summaries; the other
    ranks train each plan it sends and return None."""
    from bertwb.train.distributed import launch as on_every_rank  # torch loads for training commands only

    base, _, instance = name.partition("/")
    training = stages.template(base).training
    if training is None:
        raise ValueError(f"{base} is not a training stage: run it with run_pipeline")
    device, origin = training.device(cfg, instance or None)
    return on_every_rank(lambda session: run_pipeline(cfg, ws, [name], force, runtime=session),
                         lambda plan, dist: training.train_received_plan(cfg, plan, dist), device, origin)


def _run_named(stage: Stage, index: int, total: int, cfg: Config, ws: Workspace, con: duckdb.DuckDBPyConnection,
               force: bool, runtime: Any) -> dict[str, Any] | None:
    """`run_stage`, its failure naming the stage when it is one of several (what ran before it is kept)."""
    try:
        return run_stage(stage, cfg, ws, con, force=force, runtime=runtime)
    except BertwbError as exc:
        if total > 1 and not str(exc).startswith(f"{stage.name}:"):
            raise BertwbError(f"{stage.name}: {exc}") from None
        raise
    except (Exception, KeyboardInterrupt) as exc:
        if total > 1:
            what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            ui.stage_line(stage.name, f"{what}; the {index - 1} stage(s) before it are built and kept", always=True)
        raise


def _last_size(ws: Workspace, name: str) -> str | None:
    """How much the stage's last build wrote to files, in words, for a full disk's error."""
    files = ((ws.read_manifest(name) or {}).get("outputs") or {}).get("files") or {}
    return f"the last {name} build wrote {ui.human_bytes(sum(files.values()))} of files" if files else None


def run_summary(cfg: Config, ws: Workspace, names: list[str], ran: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per stage of a `bertwb run`: whether it ran, how long it took, and its result in one line."""
    rows = []
    for stage in (stage for name in names for stage in stages.select(cfg, name)):
        manifest = ws.read_manifest(stage.name) or {}
        summary = ran.get(stage.name, manifest.get("summary"))
        rows.append({"stage": stage.name, "ran": stage.name in ran,
                     "seconds": manifest.get("duration_s", 0.0) if stage.name in ran else 0.0,
                     "headline": stage.headline_of(summary), "summary": summary})
    return rows


def status(cfg: Config, ws: Workspace) -> list[dict[str, Any]]:
    """One row per stage (and instance, and embedding table): state, reason, key, size, finish time, duration
    and disk use."""
    rows = []
    probe = _Probe(ws)
    tables = disk.table_bytes(ws)
    for stage in stages.pipeline(cfg):
        state = check(stage, cfg, ws, probe=probe)
        manifest = state.manifest or {}
        outputs = manifest.get("outputs", {})
        rows.append({
            "stage": stage.name,
            "state": state.state,
            "reason": state.reason,
            "key": (manifest.get("key") or "")[:8] or None,
            "size_bytes": sum(outputs.get("files", {}).values()) if manifest.get("has_files") else None,
            "rows": outputs.get("tables") or None,
            "finished_at": manifest.get("finished_at"),
            "duration_s": manifest.get("duration_s"),
            "disk": disk.stage_usage(stage, ws, tables),  # each table and folder: bytes, per corpus MB
        })
    return rows + embed_store.status_rows(cfg, ws, tables)  # `bertwb embed --into` tables, keyed as stages

