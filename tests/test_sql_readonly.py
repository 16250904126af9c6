"""`bertwb sql` without --write changes nothing outside what it prints: no file written or read
outside the database, no database attached, no extension installed or loaded, no network, no
setting turned back on. --output and --format parquet still work (bertwb writes those files), and a
TIMESTAMP WITH TIME ZONE prints in every format without pytz."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import Project, assert_library_error, assert_one_line_error, make_documents, write_bert_format

HINT = ("bertwb sql is read-only without --write: it reads the workspace database only (save a result with "
        "--output FILE; change the database with --write)")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("sql")
    write_bert_format(root / "corpus" / "a.txt", make_documents(30, seed=6))
    project = Project(root)
    project.write_config("ingest:\n  inputs: [corpus]\n")
    project.run("ingest")
    return project


def _database_digest(project: Project) -> str:
    return hashlib.sha256((project.workspace / "bertwb.duckdb").read_bytes()).hexdigest()


# Each refusal is DuckDB's message inside bertwb's line; what the test pins is bertwb's part (the "sql:"
# prefix, the read-only hint, exit 1, nothing written) and the facts of the case (the path or name refused),
# never DuckDB's wording, which changes between versions.
@pytest.mark.parametrize("statement, facts", [
    ("COPY (select 1) TO '{out}/x.csv'", ["{out}/x.csv"]),
    ("COPY documents TO '{out}/docs.parquet' (FORMAT parquet)", ["{out}/docs.parquet"]),
    ("ATTACH '{out}/y.duckdb' AS y (READ_WRITE); CREATE TABLE y.t AS SELECT 1; INSERT INTO y.t VALUES (2)",
     ["{out}/y.duckdb"]),
    ("select * from read_text('/etc/hostname')", ["/etc/hostname"]),
    ("INSTALL httpfs", []),
    ("LOAD httpfs", []),
    ("SET enable_external_access = true; COPY (select 1) TO '{out}/x.csv'", ["enable_external_access"]),
    ("RESET lock_configuration", ["lock_configuration"]),
    ("delete from documents", ["DELETE"]),
])
def test_read_only_sql_cannot_write_attach_read_files_or_install(built: Project, tmp_path: Path, statement: str,
                                                                 facts: list[str]):
    before = _database_digest(built)
    result = built.run("sql", statement.format(out=tmp_path), expect=None)
    assert_library_error(result, "sql: ", *(fact.format(out=tmp_path) for fact in facts), hint=HINT)
    assert not list(tmp_path.iterdir())
    assert _database_digest(built) == before


def test_write_mode_still_writes(built: Project, tmp_path: Path):
    built.run("sql", f"COPY (select 1 as x) TO '{tmp_path / 'x.csv'}'", "--write")
    assert (tmp_path / "x.csv").read_text().splitlines() == ["x", "1"]


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_output_files_are_written_by_bertwb_in_read_only_mode(built: Project, tmp_path: Path, fmt: str):
    out = tmp_path / f"docs.{fmt}"
    result = built.run("sql", "select doc_id, split from documents order by doc_id limit 4", "--output", str(out))
    assert f"wrote 4 rows to {out}" in result.output
    if fmt == "csv":
        assert [row["doc_id"] for row in csv.DictReader(out.open())] == ["0", "1", "2", "3"]
    elif fmt == "json":
        assert [row["doc_id"] for row in json.loads(out.read_text())] == [0, 1, 2, 3]
    else:
        assert pq.read_table(out).column("doc_id").to_pylist() == [0, 1, 2, 3]
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left beside it


def test_output_that_names_no_format_or_the_database_is_one_line(built: Project, tmp_path: Path):
    assert_one_line_error(built.run("sql", "select 1", "--output", str(tmp_path / "x.txt"), expect=None),
                          f"--output {tmp_path / 'x.txt'}: say --format csv, json or parquet (or name the file .csv, "
                          ".json or .parquet)")
    database = built.workspace / "bertwb.duckdb"
    assert_one_line_error(built.run("sql", "select 1", "--format", "csv", "--output", str(database), expect=None),
                          f"--output {database} is inside the workspace ({built.workspace.resolve()}); bertwb writes "
                          "no output there")


def test_timestamp_with_time_zone_in_every_format_without_pytz(built: Project, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "pytz", None)  # absent, whatever else is installed
    query = ("select TIMESTAMPTZ '2024-01-01 12:00:00+02' as t, now() as now, sum(n_sentences) as sentences "
             "from documents")
    expected = dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc)

    table = built.run("sql", query).stdout
    assert "now" in table and "sentences" in table
    [row] = list(csv.DictReader(io.StringIO(built.run("sql", query, "--format", "csv").stdout)))
    assert dt.datetime.fromisoformat(row["t"]) == expected
    [record] = json.loads(built.run("sql", query, "--format", "json").stdout)
    assert dt.datetime.fromisoformat(record["t"]) == expected
    assert isinstance(record["sentences"], int)  # a HUGEINT sum stays a JSON number
    built.run("sql", query, "--format", "parquet", "--output", str(tmp_path / "t.parquet"))
    assert pq.read_table(tmp_path / "t.parquet").column("t").to_pylist()[0] == expected


def test_a_type_parquet_cannot_hold_is_one_line(built: Project, tmp_path: Path):
    assert_one_line_error(
        built.run("sql", "select interval 3 day as i", "--output", str(tmp_path / "i.parquet"), expect=None),
        "sql: cannot write the result as Parquet (Unhandled type for Arrow to Parquet schema conversion: "
        "month_day_nano_interval); cast that column in the query, e.g. to VARCHAR")
    assert not list(tmp_path.iterdir())


def test_a_blank_query_is_one_line(built: Project):
    assert_one_line_error(built.run("sql", "   ", expect=None), "the query is blank")
