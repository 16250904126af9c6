"""The stage engine: keys, manifests, freshness, atomic commits, for any stage (:mod:`bertwb.stage`).

A stage is deps + params + outs. Its key hashes canonical JSON of its name and format version, the
config fields it reads, its upstream stages' keys and a fingerprint of what it reads from outside
the workspace's stages (ingest: its input files; pretrain and evaluate: the weights they start from
or score). A stage is fresh when its manifest holds the current key and its outputs exist. Stages build
into ``<table>__new`` tables and a temporary directory; the engine swaps both in (tables in one
DuckDB transaction, the directory by rename) and writes the manifest last.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import duckdb

from bertwb import __version__, stages, ui
from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage
from bertwb.workspace import Workspace, building

MANIFEST_FORMAT = 1


@dataclass
class State:
    """Where a stage stands: fresh, stale (with the reason) or missing."""

    stage: str
    state: str  # fresh | stale | missing
    reason: str
    key: str | None
    manifest: dict[str, Any] | None


def stage_key(stage: Stage, cfg: Config, ws: Workspace, inputs: list[dict[str, Any]]) -> tuple[str, dict]:
    """The stage's key and the parts hashed into it."""
    parts = {
        "stage": stage.name,
        "version": stage.version,
        "params": {section: cfg.cache_params(section) for section in stage.sections},
        "deps": {dep: (ws.read_manifest(dep) or {}).get("key") for dep in stage.deps},
        "inputs": inputs,
    }
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest(), parts


def input_fingerprints(stage: Stage, cfg: Config, ws: Workspace) -> list[dict[str, Any]]:
    """Identities of what a stage reads from outside the workspace's stages (files, checkpoints)."""
    return stage.fingerprint(cfg, ws) if stage.fingerprint else []


def current_key(name: str, cfg: Config, ws: Workspace) -> str:
    """The key stage ``name`` has under the current config and upstream manifests."""
    stage = stages.get(name, cfg)
    return stage_key(stage, cfg, ws, input_fingerprints(stage, cfg, ws))[0]


def check(stage: Stage, cfg: Config, ws: Workspace, con: duckdb.DuckDBPyConnection | None = None,
          inputs: list[dict[str, Any]] | None = None) -> State:
    """Compare the stage's manifest with the current config, upstream keys and outputs."""
    name = stage.name
    manifest = ws.read_manifest(name)
    for dep in stage.deps:
        dep_state = check(stages.get(dep, cfg), cfg, ws, con)
        if dep_state.state != "fresh":
            return State(name, "stale" if manifest else "missing", f"upstream {dep} is {dep_state.state}",
                         None, manifest)
    if inputs is None:
        inputs = input_fingerprints(stage, cfg, ws)
    key, parts = stage_key(stage, cfg, ws, inputs)
    if manifest is None:
        return State(name, "missing", "never run", key, None)
    if manifest.get("key") == key:
        missing = _missing_output(manifest, ws, con)
        if missing:
            return State(name, "stale", f"output missing: {missing}", key, manifest)
        behind = stage.behind(cfg, manifest) if stage.behind else None
        if behind:
            return State(name, "stale", behind, key, manifest)
        return State(name, "fresh", f"key {key[:8]}", key, manifest)
    return State(name, "stale", _why_changed(manifest, parts), key, manifest)


def _why_changed(manifest: dict[str, Any], parts: dict[str, Any]) -> str:
    """One line naming what differs between the manifest and the current key parts."""
    if manifest.get("version") != parts["version"]:
        return f"stage format v{manifest.get('version')} → v{parts['version']}"
    changes = []
    for section, params in parts["params"].items():
        old = manifest.get("params", {}).get(section, {})
        for key in sorted(set(params) | set(old)):
            if old.get(key) != params.get(key):
                changes.append(f"{section}.{key} {old.get(key)!r} → {params.get(key)!r}")
    for dep, key in parts["deps"].items():
        old_key = manifest.get("deps", {}).get(dep)
        if old_key != key:
            changes.append(f"upstream {dep} changed ({str(old_key)[:8]} → {str(key)[:8]})")
    old_inputs = {i["path"]: i for i in manifest.get("inputs", [])}
    new_inputs = {i["path"]: i for i in parts["inputs"]}
    for path in sorted(set(old_inputs) | set(new_inputs)):
        if path not in old_inputs:
            changes.append(f"input added: {path}")
        elif path not in new_inputs:
            changes.append(f"input removed: {path}")
        elif old_inputs[path] != new_inputs[path]:
            changes.append(f"input changed: {path}")
    if not changes:
        return "key changed"
    more = f" (+{len(changes) - 3} more)" if len(changes) > 3 else ""
    return ", ".join(changes[:3]) + more


def _missing_output(manifest: dict[str, Any], ws: Workspace, con: duckdb.DuckDBPyConnection | None) -> str | None:
    outputs = manifest.get("outputs", {})
    for rel in outputs.get("files", {}):
        if not (ws.root / rel).exists():
            return rel
    tables = outputs.get("tables", {})
    if tables:
        existing = _existing_tables(ws, con)
        if existing is not None:
            for table in tables:
                if table not in existing:
                    return f"table {table}"
    return None


def _existing_tables(ws: Workspace, con: duckdb.DuckDBPyConnection | None) -> set[str] | None:
    """Table names in the database, or None when it cannot be read now (busy)."""
    if not ws.db_path.exists():
        return set()
    query = "select table_name from information_schema.tables where table_type = 'BASE TABLE'"
    if con is not None:
        return {row[0] for row in con.execute(query).fetchall()}
    try:
        with duckdb.connect(str(ws.db_path), read_only=True) as ro:
            return {row[0] for row in ro.execute(query).fetchall()}
    except duckdb.Error:
        return None


def run_stage(stage: Stage, cfg: Config, ws: Workspace, con: duckdb.DuckDBPyConnection, force: bool = False,
              runtime: Any = None) -> dict[str, Any] | None:
    """Run one stage unless fresh; return its summary, or None when skipped. Caller holds the lock."""
    name = stage.name
    for dep in stage.deps:
        dep_state = check(stages.get(dep, cfg), cfg, ws, con)
        if dep_state.state != "fresh":
            raise BertwbError(f"{name} needs {dep}, which is {dep_state.state} ({dep_state.reason}); "
                              f"run `bertwb {dep}` or `bertwb run` first")
    inputs = input_fingerprints(stage, cfg, ws)
    state = check(stage, cfg, ws, con, inputs)
    if state.state == "fresh" and not force:
        ui.stage_line(name, f"fresh ({state.reason}), skipped")
        return None
    why = "forced" if state.state == "fresh" else f"{state.state}: {state.reason}"
    ui.stage_line(name, f"running ({why})")

    started = time.time()
    key, parts = stage_key(stage, cfg, ws, inputs)
    new_tables = [f"{table}__new" for table in stage.tables]
    _drop_tables(con, new_tables)
    try:
        with building(ws.stage_dir(name), keep=stage.has_files) as out_dir:
            build = Build(ws, stage, con, out_dir, inputs, key=key, forced=force, runtime=runtime)
            summary = stage.run(cfg, build)
            _commit_tables(con, stage, summary)
    except BaseException:
        _drop_tables(con, new_tables)
        raise
    finished = time.time()
    ws.write_manifest(name, {
        "format": MANIFEST_FORMAT,
        "stage": name,
        "key": key,
        **parts,
        "config": str(cfg.path) if cfg.path else None,
        "outputs": _outputs(stage, ws, con),
        "started_at": _iso(started),
        "finished_at": _iso(finished),
        "duration_s": round(finished - started, 3),
        "versions": _versions(),
        "summary": summary,
    })
    stage.report(summary) if stage.report is not None else ui.summary(name, summary)
    ui.stage_line(name, f"done in {finished - started:.1f}s (key {key[:8]})")
    return summary


def _drop_tables(con: duckdb.DuckDBPyConnection, tables: list[str]) -> None:
    for table in tables:
        con.execute(f'drop table if exists "{table}"')


def _commit_tables(con: duckdb.DuckDBPyConnection, stage: Stage, summary: dict[str, Any]) -> None:
    """Swap every ``t__new`` in for ``t``, record the summary's numbers in ``stage_metrics`` and (re)create
    the stage's views, in one transaction."""
    con.execute("begin transaction")
    try:
        for table in stage.tables:
            con.execute(f'drop table if exists "{table}"')
            con.execute(f'alter table "{table}__new" rename to "{table}"')
        _record_metrics(con, stage.name, summary)
        for view in stage.views:
            con.execute(view)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    con.execute("checkpoint")


def _record_metrics(con: duckdb.DuckDBPyConnection, stage: str, summary: dict[str, Any]) -> None:
    """The stage's summary as rows of ``stage_metrics(stage, name, value, text, finished_at)``, replacing its
    previous ones: numbers in ``value``, words in ``text``, nested names joined by dots, lists left out."""
    con.execute("create table if not exists stage_metrics (stage VARCHAR, name VARCHAR, value DOUBLE, text VARCHAR, "
                "finished_at TIMESTAMP)")
    con.execute("delete from stage_metrics where stage = ?", [stage])
    rows = [(stage, name, value if not isinstance(value, str) else None, value if isinstance(value, str) else None)
            for name, value in _flatten(summary)]
    if rows:
        con.executemany("insert into stage_metrics values (?, ?, ?, ?, now())", rows)


def _flatten(values: dict[str, Any], prefix: str = "") -> list[tuple[str, float | str]]:
    rows: list[tuple[str, float | str]] = []
    for name, value in values.items():
        if isinstance(value, dict):
            rows.extend(_flatten(value, f"{prefix}{name}."))
        elif isinstance(value, bool):
            rows.append((prefix + name, str(value).lower()))
        elif isinstance(value, (int, float)) and math.isfinite(value):
            rows.append((prefix + name, float(value)))
        elif isinstance(value, str):
            rows.append((prefix + name, value))
    return rows


def _outputs(stage: Stage, ws: Workspace, con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    files = {}
    if stage.has_files:
        stage_dir = ws.stage_dir(stage.name)
        files = {str(p.relative_to(ws.root)): p.stat().st_size for p in sorted(stage_dir.rglob("*")) if p.is_file()}
    tables = {t: con.execute(f'select count(*) from "{t}"').fetchone()[0] for t in stage.tables}
    return {"files": files, "tables": tables}


def _versions() -> dict[str, str]:
    """Versions of the libraries that shape outputs, read from package metadata (no heavy imports)."""
    versions = {"bertwb": __version__}
    for package in ("duckdb", "tokenizers", "torch", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return versions


def _iso(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(timestamp))


def run_pipeline(cfg: Config, ws: Workspace, names: list[str], force: bool = False,
                 runtime: Any = None) -> dict[str, Any]:
    """Run the stages ``names`` (a template name runs all its instances) in order under the workspace
    lock; return the summaries of those that ran. ``runtime`` goes to each stage's ``Build``."""
    chosen = [stage for name in names for stage in stages.select(cfg, name)]
    ran = {}
    with ws.lock("bertwb " + " ".join(names)):
        ws.recover()
        con = ws.connect()
        try:
            for index, stage in enumerate(chosen, 1):
                if len(chosen) > 1:
                    ui.pipeline_step(index, len(chosen), stage.name)
                try:
                    summary = run_stage(stage, cfg, ws, con, force=force, runtime=runtime)
                except BertwbError as exc:
                    if len(chosen) > 1 and not str(exc).startswith(f"{stage.name}:"):
                        raise BertwbError(f"{stage.name}: {exc}") from None
                    raise
                except Exception:
                    if len(chosen) > 1:
                        ui.stage_line(stage.name, f"failed; the {index - 1} stage(s) before it are built and kept")
                    raise
                if summary is not None:
                    ran[stage.name] = summary
        finally:
            con.close()
    return ran


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
    """One row per stage (and instance): state, reason, key, size, finish time and duration."""
    rows = []
    for stage in stages.pipeline(cfg):
        state = check(stage, cfg, ws)
        manifest = state.manifest or {}
        outputs = manifest.get("outputs", {})
        rows.append({
            "stage": stage.name,
            "state": state.state,
            "reason": state.reason,
            "key": (manifest.get("key") or "")[:8] or None,
            "size_bytes": sum(outputs.get("files", {}).values()) if stage.has_files else None,
            "rows": outputs.get("tables") or None,
            "finished_at": manifest.get("finished_at"),
            "duration_s": manifest.get("duration_s"),
        })
    return rows


def stage_path(ws: Workspace, stage: str) -> Path:
    """A fresh stage's directory; an error naming the fix when the stage has not run."""
    path = ws.stage_dir(stage)
    if ws.read_manifest(stage) is None or not path.exists():
        raise BertwbError(f"{stage} has not run in {ws.root}; run `bertwb {stage}` first")
    return path
