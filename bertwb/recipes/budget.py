"""``budget --hours H``: from-scratch pre-training sized to this machine, this corpus and the hours.

The machine is measured with torch (the GPU and its memory, else the CPU threads), the corpus by `corpus_size`
(an empty one sizes nothing and is refused). Presets are timed smallest first on a real training step (`step_timing`;
pairs as long as the documents ingested into the project's workspace will give, else 128 tokens); the largest that
the hours can train on 20 tokens per parameter (Hoffmann et al. 2022), counting at most 4 passes over the corpus
(Muennighoff et al. 2023), wins, and a size the corpus cannot feed is never timed. Training is Cramming's (Geiping
& Goldstein 2022) to max_hours but for a CPU's batch (see `_batch`)."""

from __future__ import annotations

import itertools
import math
import os
import time
from pathlib import Path
from typing import Callable

import duckdb
import torch

from bertwb import ui
from bertwb.config import Config, ModelConfig
from bertwb.errors import BertwbError
from bertwb.model.bert import BertForPreTraining
from bertwb.recipes.base import Recipe
from bertwb.recipes.corpus import BYTES_PER_TOKEN, corpus_size
from bertwb.recipes.step_timing import TimedShape, Timing, time_training_step
from bertwb.tasks.pretraining.flops import useful_flops_per_pair
from bertwb.tasks.pretraining.model import build_model_config
from bertwb.workspace import Workspace

CANDIDATES = ("tiny", "mini", "small", "medium", "base", "large")
SEQ_LENGTH = 128  # Cramming trains at 128 tokens only
MASK_RATE = 0.25  # Cramming's final recipe (bert-o4): 25% of the tokens
TOKENS_PER_PARAMETER = 20  # Hoffmann et al. 2022's compute-optimal ratio
USEFUL_PASSES = 4  # Muennighoff et al. 2023: up to ~4 passes over the data are about as good as new data
TRAINING_SHARE = 0.9  # of the hours, the steps' (validation and checkpoints take the rest)
MIN_STEPS = 2000  # a batch no larger than leaves this many optimizer steps in the budget
MAX_BATCH = 8192  # Cramming's batch


def budget_recipe(directory: Path, inputs: list[str], hours: float, workspace: Workspace) -> Recipe:
    """The recipe for ``hours`` of pre-training on this machine, sized to the corpus under ``inputs`` (or as
    ingested into ``workspace``); one line when there is no corpus to size to."""
    corpus = corpus_size(workspace, directory, inputs)
    if corpus.size == 0:
        raise BertwbError(f"--recipe budget: no text in {', '.join(inputs)} (under {directory}), and the recipe sizes "
                          "the model to the corpus; put the text there first, then run init again")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    machine = _machine(device)
    usable = USEFUL_PASSES * corpus.tokens
    shape = TimedShape(positions=SEQ_LENGTH, length=pair_length(workspace), mask_rate=MASK_RATE)
    length = shape.length
    seconds = hours * 3600 * TRAINING_SHARE

    def fits(parameters: int, tokens_per_s: float) -> bool:
        return TOKENS_PER_PARAMETER * parameters <= min(tokens_per_s * seconds, usable)

    timings, chosen, smallest_fits = _time_presets(device, hours, shape, fits, usable)
    micro = _micro_batch(chosen, device)
    sequences = chosen.tokens_per_s * seconds / length
    batch, batch_why = _batch(micro, sequences, device)
    steps = max(1, int(sequences / batch))
    if smallest_fits:
        why = f"the largest whose {TOKENS_PER_PARAMETER} tokens per parameter the {hours:g} h and the corpus give"
    elif TOKENS_PER_PARAMETER * chosen.parameters > usable:
        why = (f"the smallest: {USEFUL_PASSES} passes over the corpus give fewer than {TOKENS_PER_PARAMETER} tokens "
               "per parameter of any")
    else:
        why = f"the smallest: the {hours:g} h buy fewer than {TOKENS_PER_PARAMETER} tokens per parameter of any"
    return _recipe(hours, machine, (corpus.size, corpus.what), timings, chosen, micro, (batch, batch_why), steps, why)


def _time_presets(device: str, hours: float, shape: TimedShape, fits: Callable[[int, float], bool],
                  usable: float) -> tuple[list[Timing], Timing, bool]:
    """Time presets' training steps smallest first, with progress: the smallest whatever the hours, each larger
    one only while its speed, predicted from the last one's by their FLOPs, may fit, and never a size the
    ``usable`` tokens cannot feed. The timings, the largest that fits (else the smallest), whether that fits."""
    # a size the corpus cannot feed its tokens per parameter is never timed, however many hours there are
    candidates = list(itertools.takewhile(lambda p: p == CANDIDATES[0] or TOKENS_PER_PARAMETER * _size(p)[0] <= usable,
                                          CANDIDATES))
    ui.info(f"init: timing a training step of {', '.join(candidates)} on this {device.upper()}, a second or so "
            f"each, the larger ones only while the {hours:g} h can train them")
    with ui.progress("init: timing", total=len(candidates), unit="presets") as bar:
        chosen = time_training_step(candidates[0], _vocab_size(candidates[0]), device, shape)  # whatever the hours
        bar.advance()
        timings, smallest_fits = [chosen], fits(chosen.parameters, chosen.tokens_per_s)
        for preset in candidates[1:]:
            # the next size's speed predicted from this one's by their FLOPs: timed only when it may fit
            parameters, flops = _size(preset)
            if not fits(parameters, chosen.tokens_per_s * _size(chosen.preset)[1] / flops):
                break
            try:
                timing = time_training_step(preset, _vocab_size(preset), device, shape)
            except torch.cuda.OutOfMemoryError:
                break
            bar.advance()
            timings.append(timing)
            if not fits(timing.parameters, timing.tokens_per_s):
                break
            chosen = timing
    return timings, chosen, smallest_fits


def _batch(micro: int, sequences: float, device: str) -> tuple[int, str]:
    """Sequences an optimizer step, and why. On a GPU, Cramming's large batch by accumulation: as large as
    leaves about `MIN_STEPS` steps of the ``sequences`` the hours train, at most `MAX_BATCH`. On a CPU, one
    micro-batch: a CPU's tokens/s do not grow with the batch, so accumulating only cuts the updates (measured
    in BENCHMARKS.md, "Pre-training in a time budget", 2026-11-27 02:04)."""
    if device != "cuda":
        return micro, "sequences a step: one micro-batch; accumulating buys a CPU no speed, only fewer updates"
    return (max(micro, min(MAX_BATCH, 2 ** int(math.log2(max(1.0, sequences / MIN_STEPS))))),
            f"sequences a step: as large as leaves about {MIN_STEPS:,} steps, at most Cramming's {MAX_BATCH:,}")


def _recipe(hours: float, machine: str, corpus: tuple[int, str], timings: list[Timing], chosen: Timing, micro: int,
            batch_and_why: tuple[int, str], steps: int, why: str) -> Recipe:
    size, what = corpus
    batch, batch_why = batch_and_why
    measured = "; ".join(f"{t.preset} {t.step_seconds:.3f} s ({t.tokens_per_s:,.0f} tokens/s, "
                         f"{t.parameters / 1e6:.1f}M parameters)" for t in timings)
    recipe = Recipe([
        f"# Measured by bertwb init on {time.strftime('%Y-%m-%d %H:%M')} (the steps that fit depend on the machine",
        "# and its load: a time budget makes the step count, not the hours, differ between runs):",
        f"#   machine: {machine}",
        f"#   corpus: {size:,} {what}, about {size / BYTES_PER_TOKEN / 1e6:,.1f}M tokens",
        f"#   a training step of {chosen.micro_batch} pairs of {chosen.length} tokens"
        + (" (the mean pair of the ingested documents)" if chosen.length < SEQ_LENGTH else "") + f": {measured}",
        f"#   chosen: {chosen.preset}, {why}; about {steps:,} steps of {batch} sequences fit",
        "# Cramming's choices (Geiping & Goldstein 2022): MLM only, 128 tokens, a large batch by accumulation",
        "# (on a GPU), a one-cycle rate that ends with the hours, no dropout, dynamic masks, 25% masking; the MLM",
        "# head runs at masked positions only. Its batch ramp is left out: the trainer's steps have one batch size.",
        "#   bertwb run            # ingest, vocab, pairs, pretrain until the hours are spent, evaluate",
    ])
    recipe.set("vocab.vocab_size", chosen.vocab_size, "Cramming's 32,768 for a large model; 8,192 keeps a small "
               "one's embeddings from outweighing its layers" if chosen.vocab_size < 32768 else "Cramming's size")
    recipe.set("pairs.max_seq_length", SEQ_LENGTH, "Cramming trains at 128 tokens only")
    recipe.set("pairs.max_predictions_per_seq", round(MASK_RATE * SEQ_LENGTH), "25% of 128")
    recipe.set("pairs.masked_lm_prob", MASK_RATE, "Cramming's final recipe masks 25% (its bert-o4 config)")
    recipe.set("pairs.masking", "dynamic", "new masks every epoch")
    recipe.set("pairs.dupe_factor", 1, "one stored copy; dynamic masking draws each epoch's masks")
    recipe.set("pairs.random_next_prob", 0.0, "no NSP: B always continues A")
    recipe.set("model.preset", chosen.preset, f"{chosen.parameters / 1e6:.1f}M parameters (see the head)")
    recipe.set("model.hidden_dropout", 0.0, "no dropout: one pass over little data does not overfit (Cramming)")
    recipe.set("model.attention_dropout", 0.0, "no dropout (Cramming)")
    recipe.set("pretrain.nsp", False, "MLM only (RoBERTa, Cramming)")
    recipe.set("pretrain.max_hours", hours, "the budget: training stops here, the learning rate at its end")
    recipe.set("pretrain.steps", 3 * steps, f"a cap three times the {steps:,} steps measured to fit; the hours end "
               "the run first")
    recipe.set("pretrain.batch_size", batch, batch_why)
    recipe.set("pretrain.grad_accum", max(1, batch // micro), f"micro-batches of {micro} a step")
    recipe.set("pretrain.lr", 1e-3, "Cramming's peak rate")
    recipe.set("pretrain.warmup_steps", 0, "0: warmup_fraction decides, of the hours")
    recipe.set("pretrain.warmup_fraction", 0.06, "6% of the hours up, then linearly down to 0 as they end (the "
               "budget-tied one-cycle of Izsak et al. 2021)")
    recipe.set("pretrain.adam_beta2", 0.98, "Cramming's Adam betas (0.9, 0.98)")
    recipe.set("pretrain.adam_eps", 1e-12, "Cramming's Adam epsilon")
    recipe.set("pretrain.max_grad_norm", 0.5, "Cramming's clipping")
    recipe.set("pretrain.log_every", max(1, min(10, steps // 10)))
    recipe.set("pretrain.eval_every", max(1, steps // 5), "five validations in the budget")
    recipe.set("pretrain.checkpoint_every", max(1, steps // 10), "ten checkpoints in the budget")
    return recipe


def _vocab_size(preset: str) -> int:
    return 8192 if preset in ("tiny", "mini") else 32768


def _size(preset: str) -> tuple[int, float]:
    """``preset``'s parameters and training FLOPs per 128-token pair, from its shapes alone (no weights)."""
    config = build_model_config(Config(model=ModelConfig(preset=preset)), _vocab_size(preset), SEQ_LENGTH)
    with torch.device("meta"):
        parameters = sum(t.numel() for t in BertForPreTraining(config).parameters())
    return parameters, useful_flops_per_pair(config, SEQ_LENGTH, round(MASK_RATE * SEQ_LENGTH))


def pair_length(workspace: Workspace) -> int:
    """The tokens of the mean pair that the corpus ingested into ``workspace`` will give, as the pair builder
    fills them: a train document of T tokens (its characters / `BYTES_PER_TOKEN`) makes ceil(T / 125) pairs
    of at most 128 with their [CLS] and two [SEP]s. Short documents make short pairs and fast steps (2.3× as
    many as 128-token pairs on the Debian manuals). 128 when ingest has not run there."""
    if workspace.read_manifest("ingest") is None or not workspace.db_path.is_file():
        return SEQ_LENGTH
    room = SEQ_LENGTH - 3
    try:
        with duckdb.connect(str(workspace.db_path), read_only=True) as con:
            pairs, tokens = con.execute(
                f"select sum(ceil(t / {room})), sum(t) from (select greatest(1, n_chars / {BYTES_PER_TOKEN}) as t "
                "from documents where split = 'train')").fetchone()
    except duckdb.Error:  # locked by a running stage, or an older layout: size as for full pairs
        return SEQ_LENGTH
    if not pairs:
        return SEQ_LENGTH
    return int(min(SEQ_LENGTH, max(16, 8 * math.ceil((tokens / pairs + 3) / 8))))


def _micro_batch(timing: Timing, device: str) -> int:
    """Sequences a micro-batch: 32 on a CPU; on a GPU the most (a power of two, up to 256) that fill 80% of
    its memory, from the timed step's peak (weights, gradients and Adam's two moments are 16 bytes a parameter)."""
    if device != "cuda":
        return timing.micro_batch
    fixed = 16 * timing.parameters
    per_sequence = max(1.0, (timing.peak_bytes - fixed) / timing.micro_batch)
    fits = (0.8 * torch.cuda.get_device_properties(0).total_memory - fixed) / per_sequence
    return int(min(256, max(1, 2 ** int(math.log2(max(1.0, fits))))))


def _machine(device: str) -> str:
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        return (f"{torch.cuda.device_count()} x {props.name}, {props.total_memory / 2**30:.1f} GiB each "
                "(the recipe is sized for one; torchrun over more trains proportionally more)")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cores = len(os.sched_getaffinity(0))
    return f"CPU, {cores} cores, {torch.get_num_threads()} torch threads, {memory:.1f} GiB memory"

