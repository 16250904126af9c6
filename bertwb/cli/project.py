"""The project commands: ``bertwb init`` (a new project's files, or a recipe's config), ``run`` (the pipeline),
``status``, ``workspace`` (where it builds), ``report`` (figures and a page) and ``compare`` (several workspaces side
by side).
"""

from __future__ import annotations

from pathlib import Path

import click

from bertwb import disk, engine, recipes, stages, ui
from bertwb.cli.group import cli, config_options, load, no_config_options, workspace_of
from bertwb.cli.paths import PathArg
from bertwb.compare import compare as compare_runs
from bertwb.config import DEFAULT_CONFIG_NAME, Config
from bertwb.configfile import load_config
from bertwb.errors import BertwbError
from bertwb.scaffold import write_project


def _project_config(directory: Path) -> Config:
    """The config of the project already in ``directory`` (``init --force`` over it), whose workspace a recipe
    measures and the new config keeps; the defaults when there is no bertwb.yaml. One that does not load is
    its load error: init cannot tell which workspace it names, and another one would abandon the user's."""
    config = directory / DEFAULT_CONFIG_NAME
    if not config.is_file():
        return Config(base_dir=directory.resolve())
    try:
        return load_config(config)
    except BertwbError as exc:
        raise BertwbError(f"{exc} (init --force keeps this file's workspace.dir, so the file must load; or remove "
                          "it to start a new project in the default workspace)") from None


@cli.command("init")
@click.argument("directory", type=PathArg(), default=".")
@click.option("--input", "inputs", multiple=True, default=["corpus"], show_default=True,
              help="Corpus file, directory or glob for ingest.inputs; repeatable.")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
@click.option("--recipe", metavar="NAME", help="A config for one purpose: continue, budget, bert-base, bert-large "
              "(`--recipe list` says what each is for).")
@click.option("--from", "source", metavar="DIR", help="continue: the model to continue pre-training.")
@click.option("--hours", metavar="H", help="budget: the hours of pre-training to size the run for.")
def init_command(directory: str, inputs: tuple[str, ...], force: bool, recipe: str | None, source: str | None,
                 hours: str | None) -> None:
    """Write a commented bertwb.yaml, a Makefile and a corpus/ folder into DIRECTORY (default: here)."""
    no_config_options("init", "edit the bertwb.yaml it writes (workspace.dir names the workspace)")
    if recipe == "list":
        return click.echo("\n".join(recipes.listing()))

    def config() -> str | None:  # write_project calls it after its checks: nothing is read for a folder it refuses
        old = _project_config(Path(directory))
        return recipes.config_text(recipe, Path(directory), list(inputs), source, hours, workspace_of(old),
                                   old.workspace.dir)

    for path in write_project(Path(directory), list(inputs), force, config):
        ui.info(f"wrote {path}")


@cli.command()
@config_options
@click.option("--force", is_flag=True, help="Run every chosen stage, fresh or not.")
@click.option("--from", "start", metavar="STAGE", default=None, help="First stage to run.")
@click.option("--until", metavar="STAGE", default=None, help="Last stage to run.")
@click.option("--only", multiple=True, metavar="STAGE", help="Run only this stage (or finetune/TASK); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary table as JSON.")
def run(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, force: bool, start: str | None,
        until: str | None, only: tuple[str, ...], as_json: bool) -> None:
    """Run the pipeline (or part of it), skipping every stage that is fresh; end with a summary table."""
    cfg, ws = load(config_path, overrides, workdir)
    names = stages.between(cfg, start, until, only)
    with ui.tables_to_stderr(as_json):
        ran = engine.run_pipeline(cfg, ws, names, force=force)
    rows = engine.run_summary(cfg, ws, names, ran)
    if as_json:
        ui.print_json(rows)
    else:
        ui.table("run", ["stage", "", "took", "result"],
                 [[r["stage"], "ran" if r["ran"] else "skipped", f"{r['seconds']:.1f}s" if r["ran"] else "",
                   r["headline"]] for r in rows])


@cli.command()
@click.argument("workdirs", nargs=-1, required=True, type=PathArg(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def compare(workdirs: tuple[str, ...], as_json: bool) -> None:
    """One table of several workspaces' differing settings and results (a sweep's runs), from their manifests."""
    no_config_options("compare", "name the workspaces to compare as its arguments")
    columns, rows = compare_runs([Path(w) for w in workdirs])
    if as_json:
        ui.print_json([dict(zip(columns, row, strict=True)) for row in rows])
    else:  # one column per run, one row per setting or result: sweeps have few runs and many numbers
        ui.table("compare", ["", *(row[0] for row in rows)],
                 [[name, *(ui.cell(row[i]) for row in rows)] for i, name in enumerate(columns) if i])


@cli.command()
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, as_json: bool) -> None:
    """Show each stage: fresh, stale (and why) or missing, with key, size and times."""
    cfg, ws = load(config_path, overrides, workdir)
    rows = engine.status(cfg, ws)
    if as_json:
        ui.print_json(rows)
        return
    ui.table(f"workspace {ws.root}", ["stage", "state", "why", "key", "size", "rows", "finished", "took"],
             [[r["stage"], r["state"], r["reason"], r["key"],
               ui.human_bytes(r["size_bytes"]) if r["size_bytes"] is not None else "",
               ", ".join(f"{t} {n:,}" for t, n in (r["rows"] or {}).items()),
               r["finished_at"], f"{r['duration_s']:.1f}s" if r["duration_s"] is not None else ""] for r in rows])
    ui.table("disk (bytes per corpus MB: the corpus ingest read)", *disk.usage_table(rows))


@cli.command()
@config_options
def workspace(config_path: str | None, overrides: tuple[str, ...], workdir: str | None) -> None:
    """Print the workspace folder the config names (workspace.dir, or --workdir), for scripts and make."""
    _, ws = load(config_path, overrides, workdir)
    here = Path.cwd()  # relative where it can be: as the config wrote it, and usable by make in a path with spaces
    click.echo(ws.root.relative_to(here) if ws.root.is_relative_to(here) else ws.root)


@cli.command()
@config_options
@click.option("--output", "-o", type=PathArg(file_okay=False), default=None,
              help="Folder for index.html and figures/ (default: WORKSPACE/report).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def report(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, output: str | None,
           as_json: bool) -> None:
    """Draw training curves, data histograms and results as PNGs and one self-contained HTML page."""
    from bertwb import report as report_module  # matplotlib loads for this command only

    cfg, ws = load(config_path, overrides, workdir)
    written = report_module.write_report(cfg, ws, Path(output) if output else None)
    if as_json:
        ui.print_json(written)
    else:
        report_module.show(written)
