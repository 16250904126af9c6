"""The command line: parse options, load the config, call one function, print through ``ui``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

import click

from bertwb import __version__, disk, engine, environment, memory, outputs, recipes, stages, ui
from bertwb import sql as sql_module
from bertwb.artifacts import RESULTS_FILE, read_results
from bertwb.cli_paths import PathArg
from bertwb.compare import compare as compare_runs
from bertwb.config import DEFAULT_CONFIG_NAME, Config
from bertwb.configfile import load_config
from bertwb.current import current_run_dir
from bertwb.embed import inputs as embed_inputs
from bertwb.embed import pooling as embed_pooling
from bertwb.embed import writing as embed_writing
from bertwb.embed.run import EmbedRequest, similar as search
from bertwb.embed.run import embed as embed_texts
from bertwb.errors import EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, BertwbError, internal_error
from bertwb.scaffold import write_project
from bertwb.stages import evaluate as evaluate_stage
from bertwb.textinput import input_lines, stdin_lines
from bertwb.train import model_choice
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


def _config_options(func: Callable) -> Callable:
    """--config, --set and --workdir: taken by the group (before the command) and by every command."""
    func = click.option("--workdir", type=PathArg(file_okay=False), default=None,
                        help="Workspace directory (overrides workspace.dir).")(func)
    func = click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
                        help="Override a config value (any depth: finetune.tasks.NAME.lr=3e-5); repeatable.")(func)
    func = click.option("--config", "config_path", type=PathArg(dir_okay=False), default=None,
                        help="Config file (default: ./bertwb.yaml).")(func)
    return func


_checkpoint_option = click.option(
    "--checkpoint", default=None, metavar="latest|STEP|DIR",
    help="Newest checkpoint of the current run (default), a step of it, or any model directory.")


def _load(config_path: str | None, overrides: tuple[str, ...], workdir: str | None) -> tuple[Config, Workspace]:
    """The config and workspace; what the group got before the command applies unless the command overrides it."""
    group = click.get_current_context().find_root().params
    cfg = load_config(config_path or group.get("config_path"), [*group.get("overrides", ()), *overrides],
                      workdir or group.get("workdir"))
    ws = _workspace(cfg)
    if os.environ.get("RANK", "0") == "0":  # under torchrun: one line, not one per rank
        ui.detail(f"config: {cfg.path or 'none, the built-in defaults'}; workspace: {ws.root}")
    return cfg, ws


def _workspace(cfg: Config) -> Workspace:
    return Workspace(cfg.resolve(cfg.workspace.dir), cfg.workspace.memory_limit)


def _project_workspace(directory: Path) -> Workspace:
    """The workspace of the project already in ``directory`` (``init --force`` over it), where a recipe finds
    the corpus ingested: its bertwb.yaml's workspace.dir, or the default one when it has none that loads."""
    config = directory / DEFAULT_CONFIG_NAME
    try:
        return _workspace(load_config(config))
    except BertwbError:  # none, or one init is about to replace: nothing of it to measure
        return _workspace(Config(base_dir=directory.resolve()))


def _option_set(config_key: str, value: str | None) -> tuple[str, ...]:
    """A command's option that stands for a config value (``--device X``) as the ``--set config_key=X`` it
    means, quoted so the value stays a string: one path into the config, and an error about the value
    names ``--set config_key`` (`Config.origin`). Given after every --set, so the option wins; unset, nothing."""
    return () if value is None else (f"{config_key}={json.dumps(value)}",)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, params=_output_params())
@click.version_option(__version__, prog_name="bertwb")
@_config_options
def cli(config_path: str | None, overrides: tuple[str, ...], workdir: str | None) -> None:
    """bertwb: turn a raw text corpus into a trained BERT, one cached stage at a time."""


def _stage_command(name: str) -> None:
    """``bertwb NAME``: run one data stage (its help is the stage's own one line)."""
    @cli.command(name, help=stages.get(name, Config()).help)
    @_config_options
    @click.option("--force", is_flag=True, help="Run even when the stage is fresh.")
    def command(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, force: bool) -> None:
        cfg, ws = _load(config_path, overrides, workdir)
        engine.run_pipeline(cfg, ws, [name], force=force)


for _name in ("ingest", "vocab", "pairs"):
    _stage_command(_name)


@cli.command()
@_config_options
@click.option("--force", is_flag=True, help="Train from scratch even when the stage is fresh or a run can resume.")
@click.option("--device", default=None, help="auto, cpu, cuda or cuda:N (--set pretrain.device=DEVICE).")
def pretrain(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, force: bool,
             device: str | None) -> None:
    """Pre-train BERT on the pairs (MLM + NSP); resumes after Ctrl-C; works under torchrun."""
    cfg, ws = _load(config_path, (*overrides, *_option_set("pretrain.device", device)), workdir)
    engine.launch(cfg, ws, "pretrain", force=force)


@cli.command()
@_config_options
@_checkpoint_option
@click.option("--device", default=None, help="auto, cpu, cuda or cuda:N (--set evaluate.device=DEVICE).")
@click.option("--force", is_flag=True, help="Evaluate again even when the result is fresh.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def evaluate(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, checkpoint: str | None,
             device: str | None, force: bool, as_json: bool) -> None:
    """MLM and NSP accuracy, loss and perplexity of a checkpoint on the valid pairs (cached)."""
    cfg, ws = _load(config_path, (*overrides, *_option_set("evaluate.checkpoint", checkpoint),
                                  *_option_set("evaluate.device", device)), workdir)
    with ui.tables_to_stderr(as_json):
        ran = engine.run_pipeline(cfg, ws, ["evaluate"], force=force)
    metrics = ran.get("evaluate") or read_results(ws.stage_dir("evaluate"))
    if metrics is None:  # fresh by its manifest, yet its file does not read
        raise BertwbError(f"{ws.stage_dir('evaluate') / RESULTS_FILE} is missing or unreadable; "
                          "run `bertwb evaluate --force`")
    if as_json:
        ui.print_json(metrics)
    elif "evaluate" not in ran:
        evaluate_stage.report(metrics)


def _complete_tasks(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
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


@cli.command()
@_config_options
@click.argument("task", required=False, shell_complete=_complete_tasks)
@click.option("--force", is_flag=True, help="Train from scratch even when the task is fresh or a run can resume.")
@click.option("--device", default=None, help="auto, cpu, cuda or cuda:N (--set finetune.device=DEVICE, and "
              "finetune.tasks.NAME.device=DEVICE for a task that names its own: the command line wins).")
def finetune(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, task: str | None, force: bool,
             device: str | None) -> None:
    """Fine-tune TASK (default: every task in finetune.tasks); resumes after Ctrl-C; works under torchrun."""
    cfg, ws = _load(config_path, overrides, workdir)
    if device is not None:  # the command line beats a task's own device too: a --set of each task that names one
        keys = ["finetune.device", *(f"finetune.tasks.{name}.device" for name in cfg.finetune.tasks
                                     if cfg.given(f"finetune.tasks.{name}.device"))]
        sets = tuple(item for key in keys for item in _option_set(key, device))
        cfg, ws = _load(config_path, (*overrides, *sets), workdir)
    engine.launch(cfg, ws, f"finetune/{task}" if task else "finetune", force=force)


@cli.command()
@_config_options
@click.argument("task", shell_complete=_complete_tasks)
@click.argument("input_file", required=False, type=PathArg(dir_okay=False))
@click.option("--output", "-o", type=PathArg(dir_okay=False), help="Write the predictions here (default: stdout).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one object per input (--format jsonl).")
@_checkpoint_option
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--words", "word_labels", is_flag=True, help="A tag task on raw text: also each word, its tag and score.")
def predict(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, task: str,
            input_file: str | None, output: str | None, fmt: str, as_json: bool, checkpoint: str | None,
            device: str, batch_size: int, word_labels: bool) -> None:
    """Predict with fine-tuned TASK on INPUT_FILE (the task's format; raw text for a tag task) or stdin lines."""
    from bertwb.tasks.prediction import open_predictor, write_predictions  # torch loads for this command only

    if as_json and fmt == "csv":
        raise click.UsageError("--json means --format jsonl; give one of --json and --format csv")
    cfg, ws = _load(config_path, overrides, workdir)
    if input_file and not Path(input_file).is_file():  # before the model loads
        raise BertwbError(f"{input_file}: no such file; give a file in the task's format, or lines on stdin")
    if output:
        model = model_choice.user_path(cfg, checkpoint) if checkpoint else None
        outputs.check_file(output, outputs.protected_paths(cfg, ws, [
            *outputs.reading(input_file, "the input file"), *outputs.reading(model, "the model", True)]))
    predictor = open_predictor(cfg, ws, task, checkpoint, device, batch_size, word_labels)
    examples = predictor.read(Path(input_file)) if input_file else \
        predictor.read(lines=stdin_lines(sys.stdin))
    count = write_predictions(predictor, examples, fmt, output, sys.stdout)
    if output:
        ui.info(f"wrote {count:,} predictions to {output}")


def _model(cfg: Config, ws: Workspace, checkpoint: str | None) -> tuple[Any, Path]:
    """The model directory --checkpoint names (``latest``, steps: of the current pretrain run), opened, and
    its tokenizer's folder."""
    from bertwb.model import modeldir  # torch loads only for the commands that use a model

    model_dir = modeldir.open_model_dir(model_choice.checkpoint_dir(
        cfg, ws, checkpoint, lambda: current_run_dir(cfg, ws, "pretrain")))
    return model_dir, model_choice.tokenizer_dir(ws, model_dir.tokenizer_dir)


def _predictor_options(func: Callable) -> Callable:
    func = click.option("--json", "as_json", is_flag=True, help="Print JSON.")(func)
    func = click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")(func)
    func = _checkpoint_option(func)
    return _config_options(func)


@cli.command("fill-mask")
@_predictor_options
@click.argument("texts", nargs=-1)
@click.option("-f", "--file", "text_file", type=PathArg(dir_okay=False), help="One input per line.")
@click.option("--top-k", type=click.IntRange(1, 1000), default=5, show_default=True, help="Predictions per [MASK].")
def fill_mask(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, checkpoint: str | None,
              device: str, as_json: bool, texts: tuple[str, ...], text_file: str | None, top_k: int) -> None:
    """Predict the tokens at every [MASK] of TEXTS (or --file, or stdin lines)."""
    from bertwb.inference import PretrainedModel  # torch loads for this command only

    cfg, ws = _load(config_path, overrides, workdir)
    inputs = input_lines(texts, text_file, sys.stdin)
    model = PretrainedModel.load(*_model(cfg, ws, checkpoint), device, cfg.pretrain.precision)
    results = model.fill_mask(inputs, top_k)
    if as_json:
        ui.print_json(results)
        return
    for result in results:
        rows = [[m + 1, rank + 1, p["token"], f"{p['score']:.4f}", p["sequence"]]
                for m, mask in enumerate(result["masks"]) for rank, p in enumerate(mask["predictions"])]
        ui.table(result["text"], ["mask", "rank", "token", "probability", "sequence"], rows)


@cli.command()
@_predictor_options
@click.argument("sentence_a")
@click.argument("sentence_b")
def nsp(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, checkpoint: str | None,
        device: str, as_json: bool, sentence_a: str, sentence_b: str) -> None:
    """The probability that SENTENCE_B follows SENTENCE_A (next-sentence prediction)."""
    from bertwb.inference import PretrainedModel  # torch loads for this command only

    cfg, ws = _load(config_path, overrides, workdir)
    model = PretrainedModel.load(*_model(cfg, ws, checkpoint), device, cfg.pretrain.precision)
    result = model.next_sentence(sentence_a, sentence_b)
    if as_json:
        ui.print_json(result)
        return
    verdict = "B follows A" if result["is_next"] >= 0.5 else "B looks unrelated to A"
    ui.table(None, ["P(IsNext)", "P(random)", "verdict"],
             [[f"{result['is_next']:.4f}", f"{result['is_random']:.4f}", verdict]])


@cli.command()
@_config_options
@click.argument("input_file", required=False, type=PathArg(dir_okay=False))
@click.option("--model", "-m", default="pretrain", show_default=True, metavar="pretrain|TASK|DIR",
              help="The workspace's current checkpoint, a fine-tuning task's model, or any model folder.")
@click.option("--text-column", default="text", show_default=True, help="The column of the text (CSV, TSV, JSONL, "
              "Parquet input).")
@click.option("--id-column", default=None, help="The column of each row's id (default: id if there is one, else "
              "the row's line).")
@click.option("--pooling", type=click.Choice(["auto", *embed_pooling.MODES]), default="auto", show_default=True,
              help="auto: the model's sentence-transformers pooling, else mean over the tokens.")
@click.option("--layers", default="-1", show_default=True, help="Hidden states: -1 the last layer, -4,-3,-2,-1 the "
              "last four, 0 the embeddings.")
@click.option("--combine", type=click.Choice(["concat", "mean"]), default="concat", show_default=True,
              help="How several --layers become one vector per token.")
@click.option("--normalize/--no-normalize", default=None, help="Scale vectors to length 1 (default: as the model's "
              "config says, else not).")
@click.option("--max-length", type=click.IntRange(3), default=None, help="Tokens per window; longer texts are split "
              "and their windows averaged (default: the model's).")
@click.option("--tokens", type=click.Choice(["pieces", "words"]), is_flag=False, flag_value="pieces", default=None,
              help="A vector per token with its character offsets, not one per text: each word piece (--tokens), or "
              "each word's first piece (--tokens words).")
@click.option("--format", "fmt", type=click.Choice(["auto", *embed_writing.FORMATS]), default="auto",
              show_default=True, help="auto: by --output's extension, else jsonl.")
@click.option("--output", "-o", type=PathArg(dir_okay=False), help="Write the vectors here (default: JSON lines on "
              "stdout).")
@click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True)
@click.option("--into", metavar="TABLE", help="Store the vectors in the workspace database as TABLE (skipped while "
              "fresh).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "auto"]), default="auto", show_default=True,
              help="auto: bf16 autocast where the CPU has bf16 matrix instructions and a quick check finds them "
              "faster (vectors within about 2e-3 of fp32's), else fp32; fp32: vectors equal to "
              "sentence-transformers'.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=256, show_default=True,
              help="Windows per batch at most; a batch holds windows of one length and at most 8,192 tokens.")
@click.option("--force", is_flag=True, help="With --into: embed again even when the table is fresh.")
@click.option("--chunk-rows", type=click.IntRange(1), default=embed_inputs.CHUNK_ROWS, hidden=True,
              help="Rows read, embedded and written at once (tests set it small).")
def embed(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, **options: Any) -> None:
    """Turn texts (INPUT_FILE or stdin lines) into vectors with any model bertwb holds: JSONL, Parquet, NumPy or a
    database table."""

    cfg, ws = _load(config_path, overrides, workdir)
    done = embed_texts(cfg, ws, EmbedRequest(**options), sys.stdin, sys.stdout)
    if not done["skipped"]:
        where = f"table {options['into']}" if options["into"] else options["output"]
        made = f"{done['tokens']:,} token vectors" if done["tokens"] is not None else f"{done['pooling']} pooling"
        ui.info(f"embedded {done['rows']:,} texts as {done['dimension']}-dimensional vectors "
                f"({made}{', normalised' if done['normalized'] else ''})" + (f" into {where}" if where else ""))


@cli.command()
@_config_options
@click.argument("query")
@click.option("--in", "where", required=True, metavar="TABLE|FILE", help="An embedding table (`embed --into`) or a "
              "Parquet file `embed` wrote.")
@click.option("--top-k", type=click.IntRange(1, 100_000), default=10, show_default=True)
@click.option("--model", "-m", default=None, metavar="pretrain|TASK|DIR", help="Embed the query with this model "
              "(default: the one the vectors were made with).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def similar(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, query: str, where: str,
            top_k: int, model: str | None, device: str, as_json: bool) -> None:
    """The stored texts nearest to QUERY by cosine similarity (exact search, as the vectors were made)."""

    cfg, ws = _load(config_path, overrides, workdir)
    found = search(cfg, ws, query, where, top_k, model, device)
    if as_json:
        return ui.print_json(found)
    columns = list(dict.fromkeys(name for row in found for name in row if name not in ("score", "id")))
    ui.table(f"nearest to {query!r} in {where}", ["rank", "score", "id", *columns],
             [[rank, f"{row['score']:.4f}", row.get("id"), *(ui.cell(row.get(c)) for c in columns)]
              for rank, row in enumerate(found, 1)])


@cli.command()
@_config_options
@click.argument("out", type=PathArg())
@click.option("--format", "fmt", type=click.Choice(["hf", "sentence-transformers"]), default="hf", show_default=True,
              help="hf: a folder transformers' from_pretrained loads; sentence-transformers: that, with the pooling "
              "files SentenceTransformer(OUT) reads (the model's own, else mean).")
@_checkpoint_option
@click.option("--force", is_flag=True, help="Replace OUT when it exists.")
def export(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, out: str, fmt: str,
           checkpoint: str | None, force: bool) -> None:
    """Write a checkpoint and its tokenizer to OUT in Hugging Face format (weights, config, tokenizer)."""
    from bertwb.model import hf, modeldir  # torch loads for this command only

    cfg, ws = _load(config_path, overrides, workdir)
    model_dir, tokenizer_dir = _model(cfg, ws, checkpoint)
    written = hf.export_hf(model_dir, modeldir.load_tokenizer(model_dir, tokenizer_dir), Path(out), force,
                           outputs.protected_paths(cfg, ws), fmt == "sentence-transformers")
    ui.info(f"exported {written['source']} to {written['path']} as {written['architecture']}: "
            f"{written['parameters']:,} parameters in {written['tensors']} tensors; {', '.join(written['files'])}")
    if written["feature_layers"]:
        ui.warn(f"its head reads layers {', '.join(map(str, written['feature_layers']))} side by side, which "
                f"transformers' {written['architecture']} cannot: transformers.BertModel loads the encoder from "
                f"{written['path']}, and `bertwb predict TASK --checkpoint {written['path']}` uses all of it")


@cli.command("import-hf")
@_config_options
@click.argument("source", type=PathArg(file_okay=False))
@click.option("--out", type=PathArg(), default=None,
              help="Where to write the bertwb model (default: WORKSPACE/imports/<name of SOURCE>).")
@click.option("--force", is_flag=True, help="Replace OUT when it exists.")
def import_hf(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, source: str,
              out: str | None, force: bool) -> None:
    """Convert a Hugging Face BERT folder into a bertwb model: BertModel, BertForPreTraining, BertForMaskedLM, or a
    fine-tuned BertForSequenceClassification, BertForTokenClassification or BertForQuestionAnswering (head kept)."""
    from bertwb.model import hf  # torch loads for this command only

    cfg, ws = _load(config_path, overrides, workdir)
    target = Path(out) if out else ws.root / "imports" / Path(source).resolve().name
    done = hf.import_hf(Path(source), target, force, outputs.protected_paths(cfg, ws), ws.root / "imports")
    sizes = done["config"]
    ui.info(f"imported {done['source']} ({done['architecture']}, {done['layout']} layout, L{sizes['num_layers']} "
            f"H{sizes['hidden_size']} A{sizes['num_heads']}, vocab {sizes['vocab_size']:,}) to {done['path']}")
    pooled = done["sentence_transformers"]
    if pooled and pooled.get("not_kept"):
        ui.warn(f"its sentence-transformers pooling was not kept: {pooled['not_kept']}")
    elif pooled:
        ui.info(f"kept its sentence-transformers pooling: {'+'.join(pooled['pooling'])}"
                f"{', normalised' if pooled['normalize'] else ''} (`bertwb embed --model {done['path']}` uses it)")
    if done["initialised"]:
        ui.warn(f"the source has no {', '.join(done['initialised'])}: initialised anew (train before using them)")
    if done["dropped_tensors"]:
        ui.warn(f"left out {len(done['dropped_tensors'])} tensors with no place in {done['architecture']} "
                f"(e.g. {done['dropped_tensors'][0]})")
    ui.info(_after_import(done["path"], done["kind"]))


def _after_import(path: str, kind: str) -> str:
    pretrain_from = (f"set vocab.from_file: {path}/tokenizer.json and model.init_from: {path}")
    if kind != "pretraining":
        return f"next: `bertwb export --checkpoint {path} OUT`; to pre-train further from its encoder {pretrain_from}"
    return (f"next: `bertwb evaluate --checkpoint {path}`, `bertwb fill-mask --checkpoint {path} ...`; "
            f"to continue pre-training {pretrain_from}")


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
    if recipe == "list":
        return click.echo("\n".join(recipes.listing()))
    config = lambda: recipes.config_text(recipe, Path(directory), list(inputs), source, hours,  # noqa: E731
                                         _project_workspace(Path(directory)))
    for path in write_project(Path(directory), list(inputs), force, config):
        ui.info(f"wrote {path}")


@cli.command()
@_config_options
@click.option("--force", is_flag=True, help="Run every chosen stage, fresh or not.")
@click.option("--from", "start", metavar="STAGE", default=None, help="First stage to run.")
@click.option("--until", metavar="STAGE", default=None, help="Last stage to run.")
@click.option("--only", multiple=True, metavar="STAGE", help="Run only this stage (or finetune/TASK); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary table as JSON.")
def run(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, force: bool, start: str | None,
        until: str | None, only: tuple[str, ...], as_json: bool) -> None:
    """Run the pipeline (or part of it), skipping every stage that is fresh; end with a summary table."""
    cfg, ws = _load(config_path, overrides, workdir)
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
    columns, rows = compare_runs([Path(w) for w in workdirs])
    if as_json:
        ui.print_json([dict(zip(columns, row, strict=True)) for row in rows])
    else:  # one column per run, one row per setting or result: sweeps have few runs and many numbers
        ui.table("compare", ["", *(row[0] for row in rows)],
                 [[name, *(ui.cell(row[i]) for row in rows)] for i, name in enumerate(columns) if i])


@cli.command()
@_config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, as_json: bool) -> None:
    """Show each stage: fresh, stale (and why) or missing, with key, size and times."""
    cfg, ws = _load(config_path, overrides, workdir)
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
@_config_options
@click.option("--output", "-o", type=PathArg(file_okay=False), default=None,
              help="Folder for index.html and figures/ (default: WORKSPACE/report).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def report(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, output: str | None,
           as_json: bool) -> None:
    """Draw training curves, data histograms and results as PNGs and one self-contained HTML page."""
    from bertwb import report as report_module  # matplotlib loads for this command only

    cfg, ws = _load(config_path, overrides, workdir)
    written = report_module.write_report(cfg, ws, Path(output) if output else None)
    if as_json:
        ui.print_json(written)
    else:
        report_module.show(written)


@cli.command()
@_config_options
@click.argument("query", required=False)
@click.option("-f", "--file", "sql_file", type=PathArg(dir_okay=False), help="Read the query from a .sql file.")
@click.option("--format", "fmt", type=click.Choice(sql_module.FORMATS), default="table", show_default=True)
@click.option("--output", "-o", type=PathArg(dir_okay=False), help="Write the result to this file.")
@click.option("--write", is_flag=True, help="Open the database read-write (default: read-only).")
@click.option("--max-rows", type=click.IntRange(0), default=100, show_default=True, help="Rows shown in a table.")
def sql(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, query: str | None,
        sql_file: str | None, fmt: str, output: str | None, write: bool, max_rows: int) -> None:
    """Query the workspace database with DuckDB SQL (tables, views: docs/data.md, "SQL")."""
    cfg, ws = _load(config_path, overrides, workdir)
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


def main() -> None:
    memory.reexec_with_malloc_tunables()  # training commands: glibc's tcache off, before torch loads
    cli(prog_name="bertwb")
