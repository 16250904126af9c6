"""`bertwb status` says how much disk each data artifact takes, and per MB of corpus, in figures that
match the files: what a user multiplies to plan a workspace for a larger corpus."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from conftest import Project

TABLES = ("documents", "sentences", "vocab", "tokens", "scripts", "pairs")


def _files_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _disk(project: Project) -> dict[str, dict]:
    rows = json.loads(project.run("status", "--json").output)
    return {item["artifact"]: item for row in rows for item in row["disk"]}


def test_status_shows_bytes_and_bytes_per_corpus_mb_of_every_data_artifact(project: Project):
    project.run("run", "--until", "pairs", "--set", "pairs.dupe_factor=2")
    disk = _disk(project)
    assert set(disk) == {*TABLES, "vocab/", "pairs/"}
    corpus_mb = _files_bytes(project.root / "corpus") / 1e6
    for name, item in disk.items():
        assert item["bytes"] > 0 and item["bytes_per_corpus_mb"] == round(item["bytes"] / corpus_mb), name
    for folder in ("vocab", "pairs"):  # a folder is its files, to the byte
        assert disk[f"{folder}/"]["kind"] == "files"
        assert disk[f"{folder}/"]["bytes"] == _files_bytes(project.workspace / folder)
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        _, _, block_size, _, used_blocks, *_ = con.execute("pragma database_size").fetchone()
    tables = sum(disk[name]["bytes"] for name in TABLES)
    # The tables are the database's used blocks but for the catalog and bertwb's own small tables.
    assert used_blocks * block_size - 4 * block_size <= tables <= used_blocks * block_size
    assert tables <= (project.workspace / "bertwb.duckdb").stat().st_size

    text = project.run("status").output
    total = sum(item["bytes"] for item in disk.values())
    assert f"{disk['pairs/']['bytes']:,}" in text and f"{total:,}" in text and "per corpus MB" in text


def test_dynamic_masking_stores_one_copy_where_static_masks_store_dupe_factor(project: Project):
    """The README's advice at scale, measured: many epochs of dynamic masks cost the disk of one."""
    project.run("run", "--until", "pairs", "--set", "pairs.dupe_factor=4")
    static = _disk(project)["pairs/"]["bytes"]
    project.run("pairs", "--set", "pairs.dupe_factor=1", "--set", "pairs.masking=dynamic")
    dynamic = _disk(project)["pairs/"]["bytes"]
    assert 4 < static / dynamic < 8  # four copies, each with its masks besides


def test_a_workspace_without_stages_has_no_disk_rows(project: Project):
    rows = json.loads(project.run("status", "--json").output)
    assert all(row["disk"] == [] for row in rows)
    assert "total" not in project.run("status").output
