"""``bertwb embed`` (texts to vectors, to a file or a workspace table) and ``bertwb similar`` (a query against
stored vectors): one public function each, calling the parts of :mod:`bertwb.embed`. Torch loads inside the
functions only, when a model is needed.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from bertwb import memory, outputs, ui
from bertwb.config import Config
from bertwb.embed import store
from bertwb.embed.inputs import CHUNK_ROWS, RESERVED, read_inputs
from bertwb.embed.pooling import EmbedSettings, resolve
from bertwb.embed.search import rows_per_batch, top_k
from bertwb.embed.source import find_model
from bertwb.embed.writing import SETTINGS_KEY, TOKEN_COLUMNS, VectorFile, arrow_table, output_format
from bertwb.errors import BertwbError
from bertwb.train import model_choice
from bertwb.workspace import Workspace


@dataclass
class EmbedRequest:
    """What ``bertwb embed`` was asked for: its options, unresolved (``auto`` and None: the model's own)."""

    model: str = "pretrain"
    input_file: str | None = None
    text_column: str = "text"
    id_column: str | None = None
    pooling: str = "auto"
    layers: str = "-1"
    combine: str = "concat"
    normalize: bool | None = None
    max_length: int | None = None
    tokens: str | None = None  # pieces | words: token vectors instead of one per text
    fmt: str = "auto"
    output: str | None = None
    dtype: str = "float32"
    into: str | None = None
    device: str = "auto"
    precision: str = "auto"  # fp32 | bf16 | auto: `choose_precision` decides
    batch_size: int = 256
    force: bool = False
    chunk_rows: int = CHUNK_ROWS  # rows read, embedded and written at once (a hidden option, for tests)


def embed(cfg: Config, ws: Workspace, request: EmbedRequest, stdin: TextIO, stdout: TextIO) -> dict[str, Any]:
    """Embed the request's input and write the vectors where it says; a summary (``skipped`` when ``--into``
    found its table fresh). The input is read, embedded and written `CHUNK_ROWS` rows at a time (texts sorted by
    length within a chunk), so memory holds one chunk however long the input."""
    from bertwb.embed.encoder import Encoder  # noqa: PLC0415 - torch loads for this command only
    from bertwb.model import modeldir  # noqa: PLC0415
    from bertwb.train.device import choose_precision, resolve_device  # noqa: PLC0415

    memory.bound_kernel_cache()  # before the first matmul (the precision check's): shapes here rarely repeat
    started = time.time()
    source = find_model(cfg, ws, request.model)
    path = Path(request.input_file) if request.input_file else None
    if request.output:  # before any work: a refused path costs nothing
        outputs.check_file(request.output, outputs.protected_paths(cfg, ws, [
            *outputs.reading(path, "the input file"), *outputs.reading(source.folder, "the model", True)]))
    tokens = request.tokens is not None
    fmt = output_format(request.fmt, request.output, tokens) if request.output or not request.into else None
    if request.into:
        store.check_name(ws, request.into)
    model_dir = modeldir.open_model_dir(source.folder, "--model")
    inputs = read_inputs(path, stdin, request.text_column, request.id_column,
                         RESERVED + TOKEN_COLUMNS if tokens else RESERVED)
    settings = resolve(source.pooling, request.pooling, request.layers, request.combine, request.normalize,
                       request.max_length, request.dtype, model_dir.config.num_layers,
                       modeldir.max_length(model_dir)[0], request.tokens,
                       choose_precision(request.precision, resolve_device(request.device, "--device"),
                                        model_dir.config.hidden_size, model_dir.config.intermediate_size).name)
    digest = inputs.digest() if request.into or fmt == "parquet" else None  # a read per column: only when kept
    record = {"model": {"choice": source.choice, "identity": source.identity(ws)}, "settings": settings.as_dict(),
              "input": {"where": inputs.where, "digest": digest,
                        "file": store.file_identity(str(path.resolve())) if path else None}}
    # the precision as asked, not as resolved: auto keys the same on a CPU with bf16 units and on one without
    key = store.key_of(record["model"], {**record["settings"], "precision": request.precision}, {"digest": digest})
    if request.into and not request.force and not request.output:
        found = store.state(cfg, ws, request.into, store.labels_of(ws), key)
        if found.state == "fresh":
            ui.stage_line(f"{store.PREFIX}/{request.into}", f"fresh ({found.reason}), skipped")
            return {"skipped": True, "rows": inputs.rows}
    encoder = Encoder.load(model_dir, ws, request.device, request.batch_size, cfg.pretrain.cpu_fast_paths)
    dtype = np.float16 if settings.dtype == "float16" else np.float32
    record["dimension"] = encoder.dimension(settings)
    split = made = 0
    with ExitStack() as stack:  # the file appears under its name when the block ends without error
        file = stack.enter_context(VectorFile(fmt, request.output, stdout, record, inputs.types, inputs.rows,
                                              record["dimension"], dtype)) if fmt is not None else None
        spool = stack.enter_context(store.RowSpool(ws, request.into)) if request.into else None
        with ui.progress("embedding", total=inputs.rows, unit="texts") as bar:
            for chunk in inputs.chunks(request.chunk_rows):
                encoded = encoder.encode(chunk.texts, settings, bar)
                vectors = encoded.vectors.astype(dtype)
                split, made = split + encoded.split, made + len(vectors)
                if file is not None:
                    file.write(chunk, vectors, encoded.tokens)
                if spool is not None:  # DuckDB has no half float
                    spool.write(arrow_table(chunk, vectors.astype(np.float32), tokens=encoded.tokens,
                                            types=inputs.types))
        if split:
            joined = "each token's vector is its window's" if tokens else "whose vectors are averaged"
            ui.info(f"{split:,} of {inputs.rows:,} texts had more than {settings.max_length} tokens: split "
                    f"into windows {joined}")
        summary = {"rows": inputs.rows, "dimension": record["dimension"], "split": split,
                   "pooling": "+".join(settings.pooling), "normalized": settings.normalize, "format": fmt,
                   "tokens": made if tokens else None}
        if spool is not None:
            store.save(ws, request.into, spool, key, {**record, "summary": summary}, started)
    return {"skipped": False, **summary}


def similar(cfg: Config, ws: Workspace, query: str, where: str, k: int, model: str | None = None,
            device: str = "auto") -> list[dict[str, Any]]:
    """The ``k`` rows of table or Parquet file ``where`` nearest to ``query`` by cosine, best first; the query is
    embedded by the model and settings the vectors were made with (``model`` overrides the model)."""
    from bertwb.embed.encoder import Encoder  # noqa: PLC0415 - torch loads for this command only
    from bertwb.model import modeldir  # noqa: PLC0415

    if not query.strip():
        raise BertwbError("the query is empty; give the text to search for")
    record, batches = _stored(cfg, ws, where)
    settings = EmbedSettings.from_dict(record["settings"])
    if settings.tokens:
        raise BertwbError(f"--in {where}: it holds token vectors (`embed --tokens`), and a query is one vector per "
                          "text; search vectors made without --tokens")
    source = find_model(cfg, ws, model or record["model"]["choice"])
    encoder = Encoder.load(modeldir.open_model_dir(source.folder, "--model"), ws, device,
                           fast_paths=cfg.pretrain.cpu_fast_paths)
    vector = encoder.encode([query], settings).vectors[0]
    return top_k(vector, batches(rows_per_batch(len(vector))), k, where)


def _stored(cfg: Config, ws: Workspace, where: str) -> tuple[dict[str, Any], Any]:
    """What ``--in`` names: its record (model and settings) and a function giving its rows in batches."""
    path = model_choice.user_path(cfg, where)
    if path.is_file():
        import pyarrow.parquet as pq  # noqa: PLC0415

        try:
            # pre-buffering reads every row group before the first batch: the whole file in memory
            parquet = pq.ParquetFile(path, pre_buffer=False)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for files that are not Parquet
            raise BertwbError(f"--in {where}: not a Parquet file ({str(exc).splitlines()[0]}); give a table or a file "
                              "that `bertwb embed --format parquet` wrote") from None
        meta = (parquet.schema_arrow.metadata or {}).get(SETTINGS_KEY)
        if meta is None:
            raise BertwbError(f"--in {where}: no bertwb settings in the file; search a Parquet file that "
                              "`bertwb embed --format parquet` wrote")
        return json.loads(meta), lambda rows: parquet.iter_batches(rows)
    manifest = store.manifest_of(ws, where) if store.is_table_name(where) else None
    if manifest is None:
        known = ", ".join(store.tables(ws)) or "none yet"
        raise BertwbError(f"--in {where}: no such embedding table (tables: {known}) or file; make one with "
                          f"`bertwb embed FILE --into {where if store.is_table_name(where) else 'NAME'}`")
    found = store.state(cfg, ws, where, store.labels_of(ws))
    if found.state != "fresh":
        ui.warn(f"table {where} is {found.state} ({found.reason}); searching the vectors it holds")
    return manifest, lambda rows: store.read_batches(ws, where, rows)
