"""The feature-based commands: ``bertwb embed`` (texts into vectors, from any model bertwb holds) and
``bertwb similar`` (the stored texts nearest to a query).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from bertwb import ui
from bertwb.cli.group import cli, config_options, load
from bertwb.cli.paths import PathArg
from bertwb.embed import inputs as embed_inputs
from bertwb.embed import pooling as embed_pooling
from bertwb.embed import writing as embed_writing
from bertwb.embed.run import EmbedRequest, similar as search
from bertwb.embed.run import embed as embed_texts


@cli.command()
@config_options
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

    cfg, ws = load(config_path, overrides, workdir)
    done = embed_texts(cfg, ws, EmbedRequest(**options), sys.stdin, sys.stdout)
    if not done["skipped"]:
        where = f"table {options['into']}" if options["into"] else options["output"]
        made = f"{done['tokens']:,} token vectors" if done["tokens"] is not None else f"{done['pooling']} pooling"
        ui.info(f"embedded {done['rows']:,} texts as {done['dimension']}-dimensional vectors "
                f"({made}{', normalised' if done['normalized'] else ''})" + (f" into {where}" if where else ""))


@cli.command()
@config_options
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

    cfg, ws = load(config_path, overrides, workdir)
    found = search(cfg, ws, query, where, top_k, model, device)
    if as_json:
        return ui.print_json(found)
    columns = list(dict.fromkeys(name for row in found for name in row if name not in ("score", "id")))
    ui.table(f"nearest to {query!r} in {where}", ["rank", "score", "id", *columns],
             [[rank, f"{row['score']:.4f}", row.get("id"), *(ui.cell(row.get(c)) for c in columns)]
              for rank, row in enumerate(found, 1)])
