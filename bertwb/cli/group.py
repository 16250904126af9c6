"""The command line's frame: the `cli` group, its one error policy and its output options, and what
the commands share: --config, --set and --workdir, --checkpoint, loading the config and workspace, an
option that stands for a --set, and task-name completion. The commands live beside it, a family a module.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, NoReturn

import click

from bertwb import __version__, environment, ui
from bertwb.cli.paths import PathArg
from bertwb.config import Config
from bertwb.configfile import load_config
from bertwb.errors import EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, BertwbError, internal_error
from bertwb.workspace import Workspace


def _usage_error(exc: click.UsageError, where: str) -> NoReturn:
    """A mistyped command line (unknown option or command, missing or bad value): one line, exit code 2."""
    if exc.ctx is not None and exc.ctx.parent is not None:
        where = exc.ctx.command_path  # the subcommand whose options were wrong
    message = exc.format_message().rstrip(".")
    ui.error(f"{message} (see `{where} --help`)" if message.endswith("?") else f"{message}; see `{where} --help`")
    sys.exit(EXIT_USAGE)


_DEBUG = "bertwb.debug"  # the key in click's context meta, shared by the group and its command


def _output_params() -> list[click.Option]:
    """-q, -v and --debug: how much a command says. The group and every command take them, so
    `bertwb -q run` and `bertwb run -q` are the same; the last of -q and -v given wins."""
    return [
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_verbosity(ui.QUIET),
                     help="Print only warnings, errors and the data asked for (tables, JSON)."),
        click.Option(["-v", "--verbose"], is_flag=True, expose_value=False, callback=_verbosity(ui.VERBOSE),
                     help="Also print details: config and workspace used, stage keys, training device."),
        click.Option(["--debug"], is_flag=True, expose_value=False, callback=_remember_debug,
                     help="Show tracebacks for errors."),
    ]


def _verbosity(level: int) -> Callable[[click.Context, click.Parameter, bool], None]:
    def callback(ctx: click.Context, param: click.Parameter, given: bool) -> None:
        if given:
            ui.set_verbosity(level)
    return callback


def _remember_debug(ctx: click.Context, param: click.Parameter, given: bool) -> None:
    if given:
        ctx.meta[_DEBUG] = True


class _Group(click.Group):
    """Every error as one red line (a traceback only with --debug) and an exit code (bertwb.errors).

    1: a user or environment error; 2: a mistyped command line, which click alone reports with a usage
    block; 130: interrupted; 141, silently: stdout's reader left (``| head``); and a bug says it is one.
    The group also gives every command the output options (`_output_params`), and scopes their
    verbosity to one invocation.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        saved = ui.verbosity()  # in-process callers (tests, scripts) get theirs back afterwards
        ui.set_verbosity(ui.NORMAL)
        try:
            return super().main(*args, **kwargs)
        finally:
            ui.set_verbosity(saved)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.params.extend(_output_params())
        super().add_command(cmd, name)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:  # an error in the options before the command (bertwb --bogus ...)
            _usage_error(exc, info_name or "bertwb")

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # an unknown command, or an error in a command's own options
            command = ctx.invoked_subcommand  # None until the command's name resolved
            _usage_error(exc, f"{ctx.command_path} {command}" if command else ctx.command_path)
        except BertwbError as exc:
            if ctx.meta.get(_DEBUG):
                raise
            ui.error(str(exc))
            ctx.exit(EXIT_ERROR)
        except KeyboardInterrupt:
            ui.error("interrupted; outputs already built are kept")
            ctx.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:  # `bertwb predict ... | head`: the reader has what it wanted; no message
            ui.stdout_to_devnull()
            ctx.exit(EXIT_BROKEN_PIPE)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # the machine (a path, the disk, memory) or a bug: one line unless asked
            if ctx.meta.get(_DEBUG):
                raise
            known = environment.user_error(exc)  # a full disk, a permission, memory, a damaged database
            ui.error(str(known) if known is not None else internal_error(exc))
            ctx.exit(EXIT_ERROR)


def config_options(func: Callable) -> Callable:
    """--config, --set and --workdir: taken by the group (before the command) and by every command."""
    func = click.option("--workdir", type=PathArg(file_okay=False), default=None,
                        help="Workspace directory (overrides workspace.dir).")(func)
    func = click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
                        help="Override a config value (any depth: finetune.tasks.NAME.lr=3e-5); repeatable.")(func)
    func = click.option("--config", "config_path", type=PathArg(dir_okay=False), default=None,
                        help="Config file (default: ./bertwb.yaml).")(func)
    return func


checkpoint_option = click.option(
    "--checkpoint", default=None, metavar="latest|STEP|DIR",
    help="Newest checkpoint of the current run (default), a step of it, or any model directory.")


def load(config_path: str | None, overrides: tuple[str, ...], workdir: str | None) -> tuple[Config, Workspace]:
    """The config and workspace; what the group got before the command applies unless the command overrides it."""
    group = click.get_current_context().find_root().params
    cfg = load_config(config_path or group.get("config_path"), [*group.get("overrides", ()), *overrides],
                      workdir or group.get("workdir"))
    ws = workspace_of(cfg)
    if os.environ.get("RANK", "0") == "0":  # under torchrun: one line, not one per rank
        ui.detail(f"config: {cfg.path or 'none, the built-in defaults'}; workspace: {ws.root}")
    return cfg, ws


def no_config_options(command: str, instead: str) -> None:
    """Refuse --config, --set or --workdir given before a command that reads no config (init, compare), which
    would otherwise be dropped without a word; ``instead`` says what to do."""
    group = click.get_current_context().find_root().params
    given = [name for name, key in (("--config", "config_path"), ("--set", "overrides"), ("--workdir", "workdir"))
             if group.get(key)]
    if given:
        them = "them" if len(given) > 1 else "it"
        raise BertwbError(f"{' and '.join(given)}: {command} reads no config and would ignore {them}; leave {them} "
                          f"out and {instead}")


def workspace_of(cfg: Config) -> Workspace:
    """The workspace ``cfg`` names: workspace.dir, with DuckDB's memory limit."""
    return Workspace(cfg.resolve(cfg.workspace.dir), cfg.workspace.memory_limit)


def option_set(config_key: str, value: str | None) -> tuple[str, ...]:
    """A command's option that stands for a config value (``--device X``) as the ``--set config_key=X`` it
    means, quoted so the value stays a string: one path into the config, and an error about the value
    names ``--set config_key`` (`Config.origin`). Given after every --set, so the option wins; unset, nothing."""
    return () if value is None else (f"{config_key}={json.dumps(value)}",)


def complete_tasks(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """The task names of finetune.tasks in the config the command line names, for shell completion.

    Completion runs on every Tab, on half-typed command lines: any failure (no config, a bad one)
    completes nothing rather than printing an error into the shell."""
    try:
        group = ctx.find_root().params
        cfg = load_config(ctx.params.get("config_path") or group.get("config_path"),
                          [*(group.get("overrides") or ()), *(ctx.params.get("overrides") or ())])
        return [name for name in cfg.finetune.tasks if name.startswith(incomplete)]
    except Exception:  # see the docstring: never an error while the user presses Tab
        return []


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, params=_output_params())
@click.version_option(__version__, prog_name="bertwb")
@config_options
def cli(config_path: str | None, overrides: tuple[str, ...], workdir: str | None) -> None:
    """bertwb: turn a raw text corpus into a trained BERT, one cached stage at a time."""
