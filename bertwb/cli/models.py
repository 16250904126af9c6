"""The commands that use a model: ``bertwb predict`` (a fine-tuned task), ``fill-mask`` and ``nsp`` (a
pre-trained checkpoint), ``export`` to and ``import-hf`` from the Hugging Face format. torch loads inside
each command, never when the command line starts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import click

from bertwb import outputs, ui
from bertwb.cli.group import checkpoint_option, cli, complete_tasks, config_options, load
from bertwb.cli.paths import PathArg
from bertwb.config import Config
from bertwb.current import current_run_dir
from bertwb.errors import BertwbError
from bertwb.textinput import input_lines, stdin_lines
from bertwb.train import model_choice
from bertwb.workspace import Workspace


@cli.command()
@config_options
@click.argument("task", shell_complete=complete_tasks)
@click.argument("input_file", required=False, type=PathArg(dir_okay=False))
@click.option("--output", "-o", type=PathArg(dir_okay=False), help="Write the predictions here (default: stdout).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one object per input (--format jsonl).")
@checkpoint_option
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
    cfg, ws = load(config_path, overrides, workdir)
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


def model_of(cfg: Config, ws: Workspace, checkpoint: str | None) -> tuple[Any, Path]:
    """The model directory --checkpoint names (``latest``, steps: of the current pretrain run), opened, and
    its tokenizer's folder."""
    from bertwb.model import modeldir  # torch loads only for the commands that use a model

    model_dir = modeldir.open_model_dir(model_choice.checkpoint_dir(
        cfg, ws, checkpoint, lambda: current_run_dir(cfg, ws, "pretrain")))
    return model_dir, model_choice.tokenizer_dir(ws, model_dir.tokenizer_dir)


def predictor_options(func: Callable) -> Callable:
    func = click.option("--json", "as_json", is_flag=True, help="Print JSON.")(func)
    func = click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")(func)
    func = checkpoint_option(func)
    return config_options(func)


@cli.command("fill-mask")
@predictor_options
@click.argument("texts", nargs=-1)
@click.option("-f", "--file", "text_file", type=PathArg(dir_okay=False), help="One input per line.")
@click.option("--top-k", type=click.IntRange(1, 1000), default=5, show_default=True, help="Predictions per [MASK].")
def fill_mask(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, checkpoint: str | None,
              device: str, as_json: bool, texts: tuple[str, ...], text_file: str | None, top_k: int) -> None:
    """Predict the tokens at every [MASK] of TEXTS (or --file, or stdin lines)."""
    from bertwb.inference import PretrainedModel  # torch loads for this command only

    cfg, ws = load(config_path, overrides, workdir)
    inputs = input_lines(texts, text_file, sys.stdin)
    model = PretrainedModel.load(*model_of(cfg, ws, checkpoint), device, cfg.pretrain.precision,
                                 cfg.pretrain.cpu_fast_paths)
    results = model.fill_mask(inputs, top_k)
    if as_json:
        ui.print_json(results)
        return
    for result in results:
        rows = [[m + 1, rank + 1, p["token"], f"{p['score']:.4f}", p["sequence"]]
                for m, mask in enumerate(result["masks"]) for rank, p in enumerate(mask["predictions"])]
        ui.table(result["text"], ["mask", "rank", "token", "probability", "sequence"], rows)


@cli.command()
@predictor_options
@click.argument("sentence_a")
@click.argument("sentence_b")
def nsp(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, checkpoint: str | None,
        device: str, as_json: bool, sentence_a: str, sentence_b: str) -> None:
    """The probability that SENTENCE_B follows SENTENCE_A (next-sentence prediction)."""
    from bertwb.inference import PretrainedModel  # torch loads for this command only

    cfg, ws = load(config_path, overrides, workdir)
    model = PretrainedModel.load(*model_of(cfg, ws, checkpoint), device, cfg.pretrain.precision,
                                 cfg.pretrain.cpu_fast_paths)
    result = model.next_sentence(sentence_a, sentence_b)
    if as_json:
        ui.print_json(result)
        return
    verdict = "B follows A" if result["is_next"] >= 0.5 else "B looks unrelated to A"
    ui.table(None, ["P(IsNext)", "P(random)", "verdict"],
             [[f"{result['is_next']:.4f}", f"{result['is_random']:.4f}", verdict]])


@cli.command()
@config_options
@click.argument("out", type=PathArg())
@click.option("--format", "fmt", type=click.Choice(["hf", "sentence-transformers"]), default="hf", show_default=True,
              help="hf: a folder transformers' from_pretrained loads; sentence-transformers: that, with the pooling "
              "files SentenceTransformer(OUT) reads (the model's own, else mean).")
@checkpoint_option
@click.option("--force", is_flag=True, help="Replace OUT when it exists.")
def export(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, out: str, fmt: str,
           checkpoint: str | None, force: bool) -> None:
    """Write a checkpoint and its tokenizer to OUT in Hugging Face format (weights, config, tokenizer)."""
    from bertwb.model import hf, modeldir  # torch loads for this command only

    cfg, ws = load(config_path, overrides, workdir)
    model_dir, tokenizer_dir = model_of(cfg, ws, checkpoint)
    written = hf.export_hf(model_dir, modeldir.load_tokenizer(model_dir, tokenizer_dir), Path(out), force,
                           outputs.protected_paths(cfg, ws), fmt == "sentence-transformers")
    ui.info(f"exported {written['source']} to {written['path']} as {written['architecture']}: "
            f"{written['parameters']:,} parameters in {written['tensors']} tensors; {', '.join(written['files'])}")
    if written["feature_layers"]:
        ui.warn(f"its head reads layers {', '.join(map(str, written['feature_layers']))} side by side, which "
                f"transformers' {written['architecture']} cannot: transformers.BertModel loads the encoder from "
                f"{written['path']}, and `bertwb predict TASK --checkpoint {written['path']}` uses all of it")


@cli.command("import-hf")
@config_options
@click.argument("source", type=PathArg(file_okay=False))
@click.option("--out", type=PathArg(), default=None,
              help="Where to write the bertwb model (default: WORKSPACE/imports/<name of SOURCE>).")
@click.option("--force", is_flag=True, help="Replace OUT when it exists.")
def import_hf(config_path: str | None, overrides: tuple[str, ...], workdir: str | None, source: str,
              out: str | None, force: bool) -> None:
    """Convert a Hugging Face BERT folder into a bertwb model: BertModel, BertForPreTraining, BertForMaskedLM, or a
    fine-tuned BertForSequenceClassification, BertForTokenClassification or BertForQuestionAnswering (head kept)."""
    from bertwb.model import hf  # torch loads for this command only

    cfg, ws = load(config_path, overrides, workdir)
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
