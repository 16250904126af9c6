"""``workspace.executor: ray``: the data stages as Ray tasks on a 2-CPU local cluster give the bytes, keys and
identities one local process gives, their tables as Parquet files in the stage folders; a killed driver or a
deleted file leaves the stage stale; a killed worker's task runs again and changes no byte; ``bertwb sql``
reads what Ray built; no Ray, or no cluster, is one line.

The cluster starts once for the module (its files under pytest's tmp dir). The CLI runs in this process,
joining it as any driver joins a running cluster, except where a driver must die (a subprocess).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterable, Iterator

import duckdb
import pytest

import bertwb.data

from conftest import PYTHON, SAMPLE_CORPUS, Project, assert_one_line_error

STAGES = ("ingest", "vocab", "pairs")
TABLES = {"ingest": ("documents", "sentences"), "vocab": ("vocab", "tokens"), "pairs": ("pairs",)}
# Small everything, so every seam is crossed several times: ~24 byte ranges per file, ranges of 3,200
# sentences in batches of 200 (several ranges), shards of ~1,000 tokens, two dupes.
CONFIG = """
workspace:
  executor: {executor}
ingest:
  inputs: [corpus]
  content_hash: true          # the two projects' copies differ only in modification time
  valid_fraction: 0.1
  workers: {workers}
  range_bytes: 4000
vocab:
  vocab_size: 320
  min_frequency: 1
  batch_size: 200
  train_sentences: 1500
pairs:
  max_seq_length: 64
  dupe_factor: 2
  shard_tokens: 1000
  workers: {workers}
"""


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local Ray cluster of 2 CPUs for the module; its address, for a driver in another process."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=str(tmp_path_factory.mktemp("ray")))
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _project(root: Path, executor: str, workers: int) -> Project:
    """A slice of the sample corpus (two files of 100,000 bytes, cut at a document's end, and a third that
    repeats the first's first documents) and small settings."""
    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    for name in ("part-000.txt", "part-001.txt"):
        text = (SAMPLE_CORPUS / name).read_text(encoding="utf-8")
        (corpus / name).write_text(text[:text.index("\n\n", 100_000)] + "\n", encoding="utf-8")
    # part-000's first documents again, in the last piece: de-duplication spans files and Ray tasks
    first = (corpus / "part-000.txt").read_text(encoding="utf-8")
    (corpus / "part-002.txt").write_text(first[:first.index("\n\n", 3_000)] + "\n", encoding="utf-8")
    project = Project(root)
    project.write_config(CONFIG.format(executor=executor, workers=workers))
    return project


def _manifest(project: Project, stage: str) -> dict:
    return json.loads((project.workspace / "manifests" / f"{stage}.json").read_text())


def _files(project: Project, stage: str) -> dict[str, bytes]:
    """Every file a stage built, by its path in the stage's folder (the build's id and its tables' Parquet
    files, which a local build keeps in DuckDB, left out)."""
    folder = project.workspace / stage
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name != ".bertwb-build" and path.relative_to(folder).parts[0] != "tables"}


def _disk(project: Project) -> dict[str, dict]:
    """`bertwb status`'s disk rows: each artifact's kind and bytes, by name."""
    return {item["artifact"]: item for row in json.loads(project.run("status", "--json").output)
            for item in row["disk"]}


def _states(project: Project) -> dict[str, tuple[str, str]]:
    return {row["stage"]: (row["state"], row["reason"]) for row in json.loads(project.run("status", "--json").output)}


def test_ray_builds_the_bytes_and_keys_one_local_process_builds(tmp_path: Path, ray_cluster: str):
    local = _project(tmp_path / "local", "local", workers=1)  # every file whole, every shard in-process
    on_ray = _project(tmp_path / "ray", "ray", workers=0)
    local.run("run", "--until", "pairs")
    on_ray.run("run", "--until", "vocab")
    # A driver killed while Ray tasks build pairs leaves the stage stale, never fresh, and the next run
    # builds it whole. (A separate process, so the kill takes the driver, not the test, with it; Ray's
    # token authentication is on for a cluster ray.init starts, so its other drivers must say so.)
    killed = subprocess.run([PYTHON, "-m", "bertwb", "pairs", "--config", str(on_ray.config)],
                            env={**os.environ, "RAY_ADDRESS": ray_cluster,
                                 "RAY_AUTH_MODE": "token", "BERTWB_FAULT": "pairs.work#3"},
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == 137, killed.stderr
    states = _states(on_ray)
    assert states["vocab"][0] == "fresh" and states["pairs"][0] != "fresh", states
    [left] = on_ray.workspace.glob(".pairs.tmp-*")  # what the tasks had written, never committed
    assert list(left.rglob("*.parquet")), "the tasks wrote their rows to files in the workspace"
    assert _disk(on_ray)[f"{left.name}/"]["kind"] == "temporary", "status counts it until it goes"
    # The next run, with one Ray worker process killed (os._exit) between writing a shard's rows and its
    # arrays: Ray runs that task again, the driver reads the retry's files, and the bytes below are the same.
    died = tmp_path / "worker-died"
    rerun = subprocess.run([PYTHON, "-m", "bertwb", "run", "--until", "pairs", "--config", str(on_ray.config)],
                           env={**os.environ, "RAY_ADDRESS": ray_cluster, "RAY_AUTH_MODE": "token",
                                "BERTWB_FAULT": "task_write:exit-once", "BERTWB_FAULT_READY": str(died)},
                           capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stderr
    assert died.is_file(), "a worker really died in the middle of a task"
    assert not list(on_ray.workspace.glob(".pairs.tmp-*")), "the next run cleans what the killed one left"
    assert not [name for name, item in _disk(on_ray).items() if item["kind"] == "temporary"]

    for stage in STAGES:
        mine, theirs = _manifest(on_ray, stage), _manifest(local, stage)
        assert mine["key"] == theirs["key"], stage
        assert mine["identity"] == theirs["identity"], stage
        assert mine["outputs"]["digests"] == theirs["outputs"]["digests"], stage  # every table and file
    ingest, pairs = _manifest(on_ray, "ingest")["summary"], _manifest(on_ray, "pairs")["summary"]
    assert ingest["workers"] == 2 and pairs["workers"] == 2, "Ray's two CPUs did the work"
    assert ingest["documents"] > 50 and pairs["shards"] >= 10, "the slice crossed the seams it is meant to"
    vocab = _files(on_ray, "vocab")
    assert vocab["vocab.txt"] == _files(local, "vocab")["vocab.txt"] and len(vocab["vocab.txt"].split()) == 320
    assert _files(on_ray, "pairs") == _files(local, "pairs")  # the training arrays, byte for byte

    # Ray's tables are Parquet files in each stage's folder, which DuckDB reads as they are; a local
    # build keeps them in bertwb.duckdb.
    for stage, tables in TABLES.items():
        for table in tables:
            files = sorted((on_ray.workspace / stage / "tables" / table).glob("*.parquet"))
            rows = duckdb.sql(f"select count(*) from read_parquet({[str(path) for path in files]})").fetchall()[0][0]
            assert rows == _manifest(on_ray, stage)["outputs"]["tables"][table] > 0, (stage, table)
            assert f"{stage}/tables/{table}/{files[0].name}" in _manifest(on_ray, stage)["outputs"]["files"]
    assert len(list((on_ray.workspace / "vocab" / "tables" / "tokens").glob("*.parquet"))) > 10, "one per task"
    # ingest's tasks wrote the sentences, a file per piece; the driver only the documents
    assert len(list((on_ray.workspace / "ingest" / "tables" / "sentences").glob("*.parquet"))) > 10
    assert ingest["duplicates_removed"] > 0 and not (on_ray.workspace / "ingest" / "pieces").exists()
    assert not list(local.workspace.rglob("*.parquet")) and not (local.workspace / "ingest").exists()

    # The executor is in no key: switching it back leaves every stage fresh, its build untouched.
    builds = {stage: _manifest(on_ray, stage)["build"] for stage in STAGES}
    result = on_ray.run("run", "--until", "pairs", "--set", "workspace.executor=local")
    assert result.output.count(": fresh (key") == len(STAGES), result.output
    assert {stage: _manifest(on_ray, stage)["build"] for stage in STAGES} == builds

    # bertwb sql reads what Ray built, tables and views alike, as it reads a local build.
    query = ("select (select count(*) from tokens) as sentences, (select sum(len(ids)) from tokens) as tokens, "
             "(select count(*) from pairs_text where text like '%[MASK]%') as masked_pairs")
    answers = [project.run("sql", query, "--format", "json").output for project in (on_ray, local)]
    assert answers[0] == answers[1]
    assert json.loads(answers[0])[0]["masked_pairs"] > 100
    # DuckDB may read the tables' folders, so bertwb sql must keep every other statement out of them.
    tokens = on_ray.workspace / "vocab" / "tables" / "tokens"
    for flags in ((), ("--write",)):
        refused = on_ray.run("sql", f"COPY (select 1) TO '{tokens}/x.parquet'", *flags, expect=None)
        assert_one_line_error(refused, f"sql: {tokens}/x.parquet holds a table of the workspace")
    assert not (tokens / "x.parquet").exists()

    # A table file deleted: its stage is stale, saying which file, and the next run rebuilds it. The same
    # rows again give the same identity, so the stage below it stays fresh.
    third = sorted((on_ray.workspace / "vocab" / "tables" / "tokens").glob("*.parquet"))[3]
    missing = third.relative_to(on_ray.workspace).as_posix()
    (on_ray.workspace / missing).unlink()
    states = _states(on_ray)
    assert states["vocab"] == ("stale", f"output missing: {missing}") and states["pairs"][0] == "stale", states
    rerun = on_ray.run("run", "--until", "pairs").output
    assert f"vocab: running (stale: output missing: {missing})" in rerun and "pairs: fresh" in rerun, rerun
    assert (on_ray.workspace / missing).is_file()

    # Built again locally, ingest's tables go back into DuckDB and its folder goes: the same identity.
    on_ray.run("ingest", "--force", "--set", "workspace.executor=local")
    assert not (on_ray.workspace / "ingest").exists()
    assert _manifest(on_ray, "ingest")["identity"] == _manifest(local, "ingest")["identity"]
    assert all(state == "fresh" for state, _ in list(_states(on_ray).values())[:3])


@pytest.mark.parametrize("fmt", ["auto", "jsonl"])
def test_every_bad_input_file_on_ray_reads_as_one_process_reads_it(project: Project, ray_cluster: str, fmt: str):
    """tests/bad_inputs/corpus (every kind of damaged file) read whole by one local process, and by Ray's tasks
    in ranges of 16 bytes: the same tables, skipped files, counts and warnings, or the same one-line error.
    Ingest's two passes on Ray meet empty pieces, skipped files and files given up part-way here."""
    bad = Path(__file__).resolve().parent / "bad_inputs" / "corpus"
    common = ("--set", f"ingest.inputs=[{bad}]", "--set", f"ingest.format={fmt}")
    outputs = []
    for extra in (("--set", "ingest.workers=1"), ("--set", "workspace.executor=ray", "--set", "ingest.range_bytes=16")):
        result = project.run("ingest", *common, *extra, "--force", expect=None)
        warnings = [line for line in result.output.splitlines() if line.startswith(("warning:", "error:"))]
        summary = {key: value for key, value in _manifest(project, "ingest")["summary"].items()
                   if key not in ("seconds", "mb_per_s", "workers")} if result.exit_code == 0 else None
        outputs.append((result.exit_code, warnings, summary, _ingested(project) if result.exit_code == 0 else None))
    assert outputs[1] == outputs[0]
    assert outputs[0][1], "no warning: the comparison compared nothing"
    if outputs[0][0] == 0:
        assert (project.workspace / "ingest" / "tables" / "sentences").is_dir(), "the second build ran on Ray"


def _ingested(project: Project) -> dict[str, list[tuple]]:
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        return {"documents": con.execute("select * from documents order by doc_id").fetchall(),
                "sentences": con.execute("select * from sentences order by doc_id, sent_idx").fetchall()}


def test_ray_not_installed_is_one_line_before_any_work(project: Project, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delitem(sys.modules, "bertwb.data.ray_map", raising=False)
    monkeypatch.delattr(bertwb.data, "ray_map", raising=False)  # else `from bertwb.data import ray_map` finds it
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if Ray were not installed
    result = project.run("run", "--set", "workspace.executor=ray", expect=None)
    assert_one_line_error(result, "workspace.executor", "pip install 'bertwb[ray]'")
    assert not (project.workspace / "manifests" / "ingest.json").exists()


def test_no_cluster_at_ray_address_is_one_line_not_a_hang(project: Project):
    """``ray.init`` retries an address where nothing listens forever; bertwb asks first and says so."""
    pytest.importorskip("ray")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"  # free once closed: nothing listens there
    result = subprocess.run([PYTHON, "-m", "bertwb", "ingest", "--config", str(project.config), "--set",
                             "workspace.executor=ray"], env={**os.environ, "RAY_ADDRESS": address},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"RAY_ADDRESS={address}" in errors[0] and "ray start --head" in errors[0], errors
    assert not (project.workspace / "manifests" / "ingest.json").exists()


def test_a_node_with_other_code_or_libraries_is_one_line(project: Project, ray_cluster: str,
                                                         monkeypatch: pytest.MonkeyPatch):
    """Its tasks could make other bytes: the stage refuses the cluster before any work, naming what differs."""
    from bertwb.data import ray_map

    here = ray_map.environment()
    monkeypatch.setattr(ray_map, "_nodes_checked", False)
    # This process now reads another tokenizers version; the nodes' tasks, other processes, read theirs.
    # (Not a replaced ray_map.environment: a task pickles a replacement with itself and runs it there too.)
    version = ray_map.metadata.version
    monkeypatch.setattr(ray_map.metadata, "version", lambda name: "0.0.1" if name == "tokenizers" else version(name))
    result = project.run("ingest", "--set", "workspace.executor=ray", expect=None)
    assert_one_line_error(result, "workspace.executor", f"tokenizers {here['tokenizers']} there, 0.0.1 here",
                          "install the same bertwb")
    assert not (project.workspace / "manifests" / "ingest.json").exists()


# A stand-in for a cluster whose nodes share the workspace: each task runs in the driver's process. What
# the tests below check is bertwb's storage and commit, which run as they do on Ray; leaving Ray's scheduling
# out lets them kill a driver a few times in seconds.
STAND_IN = ("import types, bertwb.data.executor as ex\n"
            "ex._ray_map = lambda: types.SimpleNamespace(cluster_cpus=lambda: 2,\n"
            "                                            map_ordered=lambda f, ts, n: map(f, ts))")
KILLED_DRIVER = STAND_IN + "\nimport sys, bertwb.cli\nbertwb.cli.cli.main(args=sys.argv[1:], prog_name='bertwb')"
COMMIT_POINTS = ("before_commit", "mid_swap", "after_swap", "after_tables", "before_manifest")


def _stand_in() -> SimpleNamespace:
    return SimpleNamespace(cluster_cpus=lambda: 2, map_ordered=lambda function, tasks, in_flight: map(function, tasks))


def test_a_ray_build_killed_at_any_point_of_its_commit_leaves_status_truthful(project: Project,
                                                                             monkeypatch: pytest.MonkeyPatch):
    """Parquet tables commit folder first, then views, then the manifest: a driver killed at any point of it
    leaves a workspace whose status calls fresh only what a whole build made, under the old config and the
    new, and the next run builds exactly what an uninterrupted one does."""
    from faultkit import artifacts, assert_status_truthful, status_rows

    from bertwb.data import executor

    monkeypatch.setattr(executor, "_ray_map", _stand_in)
    ray, change = ("--set", "workspace.executor=ray"), ("--set", "vocab.vocab_size=128")
    project.run("run", "--until", "vocab", *ray, *change)
    expected_b = artifacts(project.workspace, ("ingest", "vocab"))
    project.run("vocab", *ray)
    expected_a = artifacts(project.workspace, ("ingest", "vocab"))
    assert expected_a["vocab"] != expected_b["vocab"] and "table tokens" in expected_a["vocab"]
    for point in COMMIT_POINTS:
        killed = subprocess.run([PYTHON, "-c", KILLED_DRIVER, "vocab", "--config", str(project.config), *ray, *change],
                                env={**os.environ, "BERTWB_FAULT": f"vocab.{point}"}, capture_output=True, text=True,
                                timeout=120)
        assert killed.returncode == 137, (point, killed.stderr)
        assert_status_truthful(project, expected_a, *ray)
        assert_status_truthful(project, expected_b, *ray, *change)
        project.run("vocab", *ray, *change)
        assert status_rows(project, *ray, *change)["vocab"]["state"] == "fresh", point
        assert artifacts(project.workspace, ("vocab",))["vocab"] == expected_b["vocab"], point
        assert not list(project.workspace.glob(".*.tmp-*")) and not list(project.workspace.glob("manifests/*.pending*"))
        project.run("vocab", *ray)  # back to the first build for the next point


@pytest.mark.parametrize("when, facts", [
    ("as the task ends", ["a task wrote", "00000002.rows.parquet", "but this machine does not see it"]),
    ("after every task", ["the Parquet files of table tokens hold", "and the tasks wrote"]),
])
def test_a_node_that_does_not_see_the_workspace_is_one_line(project: Project, monkeypatch: pytest.MonkeyPatch,
                                                            when: str, facts: list[str]):
    """A task's file that this machine cannot see would leave its rows out of the table: the stage stops,
    whether the file is missing when its task's result comes back or only from the table's folder later.

    The stand-in cluster runs each task here, then loses one file, as a node whose workspace.dir is on
    its own disk would (one batch's rows of several: the table would just be shorter)."""
    from bertwb.data import executor

    project.run("ingest")

    def lose_a_file() -> None:
        if when == "as the task ends":  # the task's part, before the driver takes it into the table
            lost = list(project.workspace.glob(".vocab.tmp-*/parts/tokens/00000002.rows.parquet"))
        else:  # the table's third file
            lost = sorted(project.workspace.glob(".vocab.tmp-*/tables/tokens/part-*.parquet"))[2:3]
        for path in lost:
            path.unlink()

    def elsewhere(function: Callable, tasks: Iterable, in_flight: int) -> Iterator:
        for task in tasks:
            result = function(task)
            if when == "as the task ends":
                lose_a_file()
            yield result
        lose_a_file()

    monkeypatch.setattr(executor, "_ray_map", lambda: SimpleNamespace(cluster_cpus=lambda: 2,
                                                                         map_ordered=elsewhere))
    result = project.run("vocab", "--set", "workspace.executor=ray", "--set", "vocab.batch_size=100", expect=None)
    assert_one_line_error(result, *facts, "on storage every node mounts")
    assert not (project.workspace / "manifests" / "vocab.json").exists()
    assert not list(project.workspace.glob(".vocab.tmp-*")), "the failed build's folder was removed"


def test_a_copied_workspace_never_reads_the_original_s_parquet_files(project: Project, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    """The views name their files by absolute path: a copy of the workspace would read the original's files,
    whatever happens to them later. The copy's stages with Parquet tables are stale, and a run rebuilds them."""
    from bertwb.data import executor

    monkeypatch.setattr(executor, "_ray_map", _stand_in)
    project.run("ingest", "--set", "workspace.executor=ray")
    copy = Project(tmp_path / "copy")
    shutil.copytree(project.root, copy.root)
    state, reason = _states(copy)["ingest"]
    assert state == "stale", reason
    assert reason.startswith(f"moved: table documents reads Parquet files outside {copy.workspace}"), reason
    assert "ingest: running (stale: moved" in copy.run("ingest", "--set", "workspace.executor=ray").output
    assert _states(copy)["ingest"][0] == "fresh" and _states(project)["ingest"][0] == "fresh"
    assert str(copy.workspace) in json.loads(copy.run("sql", "select sql from duckdb_views() where view_name = "
                                                      "'sentences'", "--format", "json").output)[0]["sql"]
