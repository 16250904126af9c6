"""``continue --from DIR``: continued masked-LM pre-training of a published BERT on the user's corpus.

DIR is any model directory `model.init_from` reads (an ``import-hf`` folder, a Hugging Face BERT folder, an
export) with its own tokenizer, which becomes ``vocab.from_file``: its weights know those ids only. NSP is
trained only when the weights hold an NSP head that was trained (an import's import.json names the heads
it made anew). Settings follow domain-adaptive pre-training (Gururangan et al. 2020); a new MLM head (a
model that ships none) learns alone for the first part of the run, then with the encoder (LP-FT).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from bertwb.artifacts import IMPORT_FILE, read_json
from bertwb.data.tokenizer import load_tokenizer, lowercases
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.recipes.base import Recipe
from bertwb.recipes.corpus import CorpusSize, corpus_size
from bertwb.workspace import Workspace

_HEADS = {"MLM head": ("cls.predictions.", "mlm_head."), "NSP head": ("cls.seq_relationship.", "nsp_head.")}
SEQ_LENGTH = 128
BATCH = 64  # sequences a step
TAPT_EPOCHS = 100  # Gururangan et al. 2020's task-adaptive passes over a task's own (small) corpus
DAPT_SEQUENCES = 12_500 * 2_048  # their domain-adaptive run: 12.5K steps of 2,048 sequences
ENOUGH_STEPS = 4_000  # the steps a corpus between the two gets at least (see `passes`)
HEADS_FIRST = 0.2  # of the run: the new MLM head alone, then everything
HEADS_LR_SCALE = 10.0  # the new head's rate over the encoder's 5e-5: 5e-4, a from-scratch BERT's order


def continue_recipe(directory: Path, source: Path, inputs: list[str], workspace: Workspace) -> Recipe:
    """The recipe for continuing the pre-training of the model in ``source`` on the corpus under ``inputs`` (or
    as ingested into ``workspace``)."""
    if not source.is_dir():
        raise BertwbError(f"--from {source}: no such folder; give an import-hf folder or a Hugging Face BERT folder")
    model = modeldir.open_model_dir(source, "--from")
    if model.tokenizer_dir is None:
        raise BertwbError(f"--from {source}: no vocab.txt or tokenizer.json in it; continuing needs the model's own "
                          "vocabulary (copy it beside the weights)")
    vocab_file = next(model.tokenizer_dir / name for name in ("tokenizer.json", "vocab.txt")
                      if (model.tokenizer_dir / name).is_file())
    lowercase = lowercases(load_tokenizer(vocab_file))
    heads = trained_heads(model)
    nsp = "NSP head" in heads
    length = min(SEQ_LENGTH, modeldir.max_length(model)[0])
    where = _as_written(source, directory)
    c = model.config
    made_anew = [head for head in _HEADS if head not in heads]
    recipe = Recipe([
        f"# Started from: {source.resolve()} ({model.description}, L{c.num_layers} H{c.hidden_size} "
        f"A{c.num_heads}, vocab {c.vocab_size:,}, {c.max_position_embeddings} positions).",
        f"# Its trained heads: {', '.join(heads) or 'none'}" + (f"; {' and '.join(made_anew)} start anew here"
                                                               if made_anew else "") + ".",
        "# Domain-adaptive pre-training (Gururangan et al. 2020, \"Don't Stop Pretraining\"): the masked LM on your",
        "# text from the published weights; then fine-tune from this workspace's model (finetune.init_from: pretrain).",
        "#   bertwb run            # ingest, tokenise with the model's vocabulary, pairs, continue pre-training",
    ])
    epochs, steps, why = passes(corpus_size(workspace, directory, inputs), length)
    recipe.about.append(f"# Passes: {why}.")
    recipe.set("vocab.from_file", _as_written(vocab_file, directory), "the model's own vocabulary: its weights "
               "know these ids")
    recipe.set("vocab.lowercase", lowercase, "as the model's tokenizer cases its input")
    recipe.set("pairs.max_seq_length", length, "short sequences are cheap, and the model keeps its long positions")
    recipe.set("pairs.masking", "dynamic", "new masks every epoch (RoBERTa; Gururangan et al. continued RoBERTa so)")
    recipe.set("pairs.dupe_factor", 1, "one stored copy; dynamic masking draws each epoch's masks")
    recipe.set("pairs.random_next_prob", 0.5 if nsp else 0.0,
               "NSP's random B half the time" if nsp else "no NSP head to train: B always continues A")
    recipe.set("model.init_from", where, "the published model this run continues (its sizes come with it)")
    recipe.set("pretrain.nsp", nsp, "the model's NSP head was trained: keep it trained" if nsp else
               "the model has no trained NSP head: the masked LM alone, as DAPT (RoBERTa has no NSP)")
    if steps:
        recipe.set("pretrain.steps", steps, "less than a pass over your corpus: DAPT's sequences (see the head)")
    else:
        recipe.set("pretrain.steps", 0, "0: `epochs` passes over your corpus (or set max_hours)")
    recipe.set("pretrain.epochs", epochs, "passes over your corpus, sized to it (see the head): TAPT made 100 over "
               "a small task corpus, DAPT about one over a large domain corpus")
    recipe.set("pretrain.batch_size", BATCH, "sequences a step")
    recipe.set("pretrain.lr", 5e-5, "TAPT's 1e-4 at batch 256 (Gururangan et al. 2020, appendix B) halved for a "
               "quarter of its batch; far below from-scratch rates, so the published weights are adapted, not lost")
    recipe.set("pretrain.warmup_steps", 0, "0: warmup_fraction decides")
    recipe.set("pretrain.warmup_fraction", 0.06, "DAPT's and TAPT's warm-up: 6% of the steps")
    recipe.set("pretrain.adam_beta2", 0.98, "DAPT's Adam beta2 (RoBERTa's), steadier with large updates early")
    if "MLM head" in made_anew:
        recipe.set("pretrain.heads_first", HEADS_FIRST, "the new MLM head learns alone first, so its random "
                   "predictions' gradients do not move the published encoder (LP-FT, Kumar et al. 2022)")
        recipe.set("pretrain.heads_lr_scale", HEADS_LR_SCALE, "a new head learns at a from-scratch rate; the "
                   "encoder keeps the gentle one")
    return recipe


def passes(corpus: CorpusSize, length: int) -> tuple[int, int, str]:
    """Epochs (and steps, 0 where epochs decide) for ``corpus`` in pairs of ``length`` tokens, and why, in words.

    Gururangan et al. 2020 ran TAPT 100 epochs over task corpora of about a megabyte and DAPT 12.5K steps of
    2,048 sequences (about one pass) over domain corpora of gigabytes. Between the two, a corpus gets passes
    until the run has about `ENOUGH_STEPS` steps (a fixed two passes made 72 steps of a 1 MB corpus, and the
    encoder barely moved), at most TAPT's 100; a corpus larger than DAPT's sequences gets those, as steps."""
    sequences = corpus.tokens / (length - 3)  # a pair fills its length less [CLS] and two [SEP]s
    measured = f"{corpus.lines:,} {corpus.line_word} ≈ {_megabytes(corpus.size)}"
    if corpus.size == 0:
        return 1, 0, ("1 epoch: no corpus found at init, so nothing to size the passes to; put the text in place "
                      "and run `bertwb init --recipe continue --force` again")
    per_epoch = max(1, math.ceil(sequences / BATCH))
    if sequences >= DAPT_SEQUENCES:
        steps = DAPT_SEQUENCES // BATCH
        return 1, steps, (f"{steps:,} steps of {BATCH} ({steps / per_epoch:.2f} of a pass): {measured}, domain-sized; "
                          f"DAPT's 12.5K steps of 2,048 sequences")
    epochs = min(TAPT_EPOCHS, math.ceil(ENOUGH_STEPS / per_epoch))
    about = f"about {epochs * per_epoch:,} steps of {BATCH}"
    if epochs == TAPT_EPOCHS:
        return epochs, 0, f"{epochs} epochs ({about}): {measured}, task-sized (TAPT ran 100 over corpora this size)"
    if epochs == 1:
        return 1, 0, f"1 epoch ({about}): {measured}, domain-sized (DAPT made about one pass)"
    return epochs, 0, (f"{epochs} epochs ({about}): {measured}, between a task's corpus (TAPT: 100 epochs) and a "
                       f"domain's (DAPT: one pass), so passes until about {ENOUGH_STEPS:,} steps")


def _megabytes(size: int) -> str:
    if size >= 1e9:
        return f"{size / 1e9:,.1f} GB"
    return f"{size / 1e6:,.1f} MB" if size >= 1e5 else f"{size / 1e3:,.0f} kB"


def trained_heads(model: modeldir.ModelDir) -> list[str]:
    """The pre-training heads (MLM, NSP) the weights hold and that were trained, not made anew by an import."""
    names = modeldir.tensor_names(model.weights)
    held = [head for head, prefixes in _HEADS.items() if any(name.startswith(prefixes) for name in names)]
    imported = model.path / IMPORT_FILE
    if imported.is_file():
        made = read_json(imported, "import the model again with `bertwb import-hf`",
                         {"initialised": list[str]}).get("initialised") or []
        held = [head for head in held if head not in made]
    return held


def _as_written(path: Path, directory: Path) -> str:
    """``path`` as the config names it: relative to the config's folder when inside it, else absolute."""
    resolved, base = path.resolve(), directory.resolve()
    return os.path.relpath(resolved, base) if resolved.is_relative_to(base) else str(resolved)
