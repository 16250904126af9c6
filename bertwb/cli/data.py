"""The data commands: ``bertwb ingest``, ``vocab`` and ``pairs`` (one stage each), and ``bertwb sql`` over
the tables they build.
"""

from __future__ import annotations

import click

from bertwb import engine, outputs, stages, ui
from bertwb import sql as sql_module
from bertwb.cli.group import cli, config_options, load
from bertwb.cli.paths import PathArg
from bertwb.config import Config
from bertwb.errors import BertwbError


def _stage_command(name: str) -> None:
    """``bertwb NAME``: run one data stage (its help is the stage's own one line)."""
    @cli.command(name, help=stages.get(name, Config()).help)
    @config_options
    @click.option("--force", is_flag=True, help="Run even when the stage is fresh.")
    def command(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, force: bool) -> None:
        cfg, ws = load(config_path, overrides, workdir)
        engine.run_pipeline(cfg, ws, [name], force=force)


for _name in ("ingest", "vocab", "pairs"):
    _stage_command(_name)


@cli.command()
@config_options
@click.argument("query", required=False)
@click.option("-f", "--file", "sql_file", type=PathArg(dir_okay=False), help="Read the query from a .sql file.")
@click.option("--format", "fmt", type=click.Choice(sql_module.FORMATS), default="table", show_default=True)
@click.option("--output", "-o", type=PathArg(dir_okay=False), help="Write the result to this file.")
@click.option("--write", is_flag=True, help="Open the database read-write (default: read-only).")
@click.option("--max-rows", type=click.IntRange(0), default=100, show_default=True, help="Rows shown in a table.")
def sql(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, query: str | None,
        sql_file: str | None, fmt: str, output: str | None, write: bool, max_rows: int) -> None:
    """Query the workspace database with DuckDB SQL (tables, views: docs/data.md, "SQL")."""
    cfg, ws = load(config_path, overrides, workdir)
    text = sql_module.read_query(query, sql_file)
    if fmt == "parquet" and not output:
        raise BertwbError("--format parquet needs --output FILE.parquet")
    if output:
        outputs.check_file(output, outputs.protected_paths(cfg, ws, outputs.reading(sql_file, "the SQL file")))
    output_format = sql_module.output_format(fmt, output) if output else fmt
    result = sql_module.run_query(ws, text, write, outputs.bertwb_files(cfg, ws))
    if output:
        ui.info(f"wrote {sql_module.write_output(result, output_format, output):,} rows to {output}")
    elif fmt == "table":
        sql_module.show_table(result, max_rows)
    else:
        click.echo(sql_module.to_text(result, fmt), nl=False)
