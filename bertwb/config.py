"""Typed configuration: one dataclass per section of ``bertwb.yaml``, each field with a one-line doc.

A field declares its range (``min``/``max``) and whether it changes a stage's outputs: ``in_key=False`` keeps
how-to-compute knobs (devices, threads) out of every stage key, and an ``added`` option enters one only off its
default (workspaces built before it stay fresh). A ``dict[str, Section]`` field holds named sub-sections
(``finetune.tasks.<name>``); with ``inherit=True`` each starts from its parent's values for the fields they
share, so `TrainingConfig` is declared once. Reading the file and ``--set`` into it is :mod:`bertwb.configfile`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

DEFAULT_CONFIG_NAME = "bertwb.yaml"
SEED_MAX = 2**32 - 1  # what every seed reaches (numpy, torch with a rank added, DuckDB's hashes) takes


def option(default: Any, doc: str, *, min: float | None = None, max: float | None = None,
           in_key: bool = True, inherit: bool = False, added: bool = False) -> Any:
    """A config field with its doc, range and whether it belongs in the stage key (``added``: only off its default)."""
    meta = {"doc": doc, "min": min, "max": max, "in_key": in_key, "inherit": inherit, "added": added}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def _redefault(section: type, name: str, default: Any) -> Any:
    """``section``'s field ``name`` (doc, range, in_key) with another default, for a section that shares it."""
    meta = next(f for f in dataclasses.fields(section) if f.name == name).metadata
    return option(default, meta["doc"], min=meta["min"], max=meta["max"], in_key=meta["in_key"])


@dataclass
class WorkspaceConfig:
    dir: str = option(".bertwb", "Where every artifact goes, relative to the config file.")
    memory_limit: str = option("256MB", "DuckDB's memory cap; past it, DuckDB spills to disk under the workspace.",
                               in_key=False)
    executor: Literal["local", "ray"] = option(
        "local", "Who runs the data stages' shards: local (this machine's processes) or ray (the Ray cluster "
        "ray.init() finds: RAY_ADDRESS, else a local one; pip install 'bertwb[ray]'); never changes the output.",
        in_key=False)


@dataclass
class IngestConfig:
    inputs: list[str] = option([], "Files, directories or globs to read, relative to the config file.")
    format: Literal["auto", "bert", "paragraphs", "jsonl", "csv", "parquet"] = option(
        "auto", "Input format; auto picks by extension (.jsonl, .csv/.tsv, .parquet, else bert).")
    text_field: str = option("text", "The JSONL key or CSV/Parquet column that holds the text.")
    valid_fraction: float = option(0.05, "Share of documents held out for validation.", min=0.0, max=0.5)
    seed: int = option(12345, "Seed of the deterministic train/valid split.", min=0, max=SEED_MAX)
    min_sentence_chars: int = option(1, "Drop sentences shorter than this after clean-up.", min=1)
    max_sentence_chars: int = option(2000, "Split longer sentences at whitespace (about 512 tokens, the most of "
                                     "one segment BERT sees), so memory stays bounded on pathological lines.",
                                     min=100, max=10_000_000)
    dedupe: bool = option(True, "Remove exact duplicate documents.")
    content_hash: bool = option(False, "Fingerprint inputs by content hash instead of modification time.")
    workers: int = option(0, "Processes reading files and byte ranges of large files (1 = in the main process; "
                          "0 = one per core, in the main process for a corpus under range_bytes); never changes "
                          "the output.", min=0, in_key=False)
    range_bytes: int = option(16 * 2**20, "A plain BERT, paragraphs or JSONL file larger than this is read by several "
                              "workers, in byte ranges of about this size cut on document boundaries; never changes "
                              "the output.", min=1, in_key=False)


@dataclass
class VocabConfig:
    vocab_size: int = option(8192, "Target WordPiece vocabulary size (padded to pad_to_multiple).",
                             min=64, max=1_000_000)
    min_frequency: int = option(2, "Minimum count for a merge to enter the vocabulary.", min=1)
    limit_alphabet: int | Literal["auto"] = option(
        "auto", "The initial alphabet: auto keeps the most frequent characters that make up 99.99% of the training "
        "text, at least 1,000 (all of a text with fewer) and, with their ## pieces, at most half of vocab_size; a "
        "number keeps that many of the most frequent.", min=1)
    lowercase: bool = option(True, "Uncased model: lowercase the text (strip_accents says what happens to accents).")
    strip_accents: Literal["auto", True, False] = option(
        "auto", "auto: strip accents as BERT does when lowercasing, unless the training text has a script that BERT's "
        "stripping damages (Hangul, kana, Indic, Thai, Arabic, Hebrew ...), then keep them; true or false: always.",
        added=True)
    language_sampling: bool = option(
        False, "Train the vocabulary on text reweighted per script as multilingual BERT did (a script with share p of "
        "the letters weighs as p^0.7, normalised): small languages get more of the vocabulary than their size would.",
        added=True)
    pad_to_multiple: int = option(64, "Pad a trained vocabulary with [unusedN] tokens to a multiple of this "
                                  "(a from_file vocabulary is kept as it is).",
                                  min=1, max=1024)
    from_file: str | None = option(None, "Use an existing vocab.txt or tokenizer.json instead of training.")
    max_unk_rate: float = option(0.05, "Stop when more of the corpus's tokens than this are [UNK]: the vocabulary "
                                 "does not fit the text (1 accepts any rate).", min=0.0, max=1.0, in_key=False)
    batch_size: int = option(8192, "Sentences per tokenisation batch (DuckDB reads 16 batches at a time).",
                             min=1, in_key=False)
    train_sentences: int | None = option(10_000_000, "Train on a deterministic sample of about this many training "
                                         "sentences (0 or null: all of them); every sentence is still tokenised.",
                                         min=0)
    seed: int = option(12345, "Seed of the training sample; same corpus and seed, same vocabulary.", min=0,
                       max=SEED_MAX)


@dataclass
class PairsConfig:
    max_seq_length: int = option(128, "Longest instance in tokens, [CLS] and both [SEP] included.",
                                 min=5, max=32767)
    max_predictions_per_seq: int = option(20, "Most masked positions per instance.", min=1, max=32767)
    masked_lm_prob: float = option(0.15, "Share of an instance's tokens to mask.", min=0.0, max=1.0)
    short_seq_prob: float = option(0.1, "Chance that a document aims for a random shorter length.",
                                   min=0.0, max=1.0)
    dupe_factor: int = option(5, "Passes over the corpus, each with new pairs and masks.", min=1, max=1000)
    one_sentence_chunk: Literal["split", "random_next"] = option(
        "split", "A chunk of one sentence: split (A and B are its two parts when the coin says actual next, "
        "so NSP stays 50/50) or random_next (always a random B, as the original script).")
    random_next_prob: float = option(0.5, "Chance that B is a random segment of another document (NSP's "
                                     "negatives); 0: B always continues A, for training without NSP.",
                                     min=0.0, max=1.0)
    whole_word_mask: bool = option(False, "Mask whole words (all their ## pieces) together.")
    masking: Literal["static", "dynamic"] = option(
        "static", "static: masks stored with the pairs; dynamic: the loader masks anew each epoch.")
    seed: int = option(12345, "Seed of pairs and masks; same seed, same instances.", min=0, max=SEED_MAX)
    shard_tokens: int = option(1_000_000, "Tokens per shard: memory per worker, and the window a random "
                               "next is drawn from.", min=1000)
    workers: int = option(0, "Processes building shards (1 = in the main process; 0 = all cores but the "
                          "two that read and write); never changes the output.", min=0, in_key=False)


@dataclass
class ModelConfig:
    preset: Literal["tiny", "mini", "small", "medium", "base", "large"] = option(
        "tiny", "Model size: tiny/mini/small/medium (Turc et al. 2019) or base/large (Devlin et al. 2019).")
    num_layers: int | None = option(None, "Override the preset's number of encoder blocks (L).", min=1, max=128)
    hidden_size: int | None = option(None, "Override the preset's hidden width (H).", min=8, max=16384)
    num_heads: int | None = option(None, "Override the preset's attention heads (A); must divide hidden_size.",
                                   min=1, max=256)
    intermediate_size: int | None = option(None, "Override the feed-forward width (default 4H).", min=8)
    hidden_dropout: float | None = option(None, "Override dropout on embeddings and residual branches (0.1).",
                                          min=0.0, max=0.9)
    attention_dropout: float | None = option(None, "Override dropout on attention probabilities (0.1).",
                                             min=0.0, max=0.9)
    init_from: str | None = option(None, "Start pre-training from this model directory (a Hugging Face BERT, an "
                                   "import-hf or export result, a checkpoint); its config.json sets the sizes.")


@dataclass
class TrainingConfig:
    """What every training stage shares: the loop, the optimizer and schedule, batching, checkpoints."""

    steps: int = option(300, "Optimizer steps to train; 0 = `epochs` passes over the training data. "
                        "Raising it continues a finished run.", min=0, in_key=False)
    epochs: int = option(1, "Passes over the training data when steps is 0.", min=1, in_key=False)
    batch_size: int = option(32, "Examples per optimizer step, over all GPUs and accumulation steps (and per "
                             "validation batch); batch_tokens, when set, sizes training steps instead.",
                             min=1, max=1_000_000)
    batch_tokens: int = option(0, "Token budget of a step instead of a fixed example count: as many examples of "
                               "about the same length as fit in this many padded tokens (short ones make bigger "
                               "batches, so every step does about the same work); 0 = batch_size examples.",
                               min=0, max=100_000_000)
    grad_accum: int = option(1, "Micro-batches per optimizer step on each process (saves memory).",
                             min=1, max=4096)
    optimizer: Literal["adamw", "lamb"] = option("adamw", "adamw (decoupled decay) or lamb (You et al. 2019).")
    lr: float = option(1e-3, "Peak learning rate, reached at the end of the warm-up.", min=0.0, max=1.0)
    warmup_steps: int = option(30, "Steps of linear warm-up from 0 to lr (0: warmup_fraction decides).", min=0)
    warmup_fraction: float = option(0.0, "Warm-up as a share of all steps, when warmup_steps is 0.",
                                    min=0.0, max=1.0)
    weight_decay: float = option(0.01, "Decoupled weight decay; never on biases and LayerNorm.", min=0.0, max=1.0)
    adam_beta1: float = option(0.9, "First-moment decay of AdamW/LAMB.", min=0.0, max=0.99999)
    adam_beta2: float = option(0.999, "Second-moment decay of AdamW/LAMB.", min=0.0, max=0.99999)
    adam_eps: float = option(1e-6, "Epsilon of AdamW/LAMB.", min=0.0, max=1.0)
    max_grad_norm: float = option(1.0, "Clip the global gradient norm to this; 0 disables clipping.",
                                  min=0.0, max=1e6)
    bucket_batches: int = option(50, "Length bucketing: sort this many batches' worth of examples by length, "
                                 "so each batch pads little; 1 = no bucketing.", min=1, max=100_000)
    seed: int = option(1234, "Seed of the model init, data order, dropout and dynamic masks.", min=0, max=SEED_MAX)
    device: str = option("auto", "auto (CUDA when present, else CPU), cpu, cuda or cuda:N.", in_key=False)
    precision: Literal["auto", "fp32", "bf16"] = option(
        "auto", "Matmul precision: auto (bf16 autocast on CUDA, and on a CPU with bf16 matrix instructions where a "
        "quick matmul check finds bf16 faster; fp32 elsewhere), fp32, or bf16 autocast on any device. Also the "
        "precision of evaluate, fill-mask and nsp (pretrain's) and of predict (the task's).", in_key=False)
    compile: bool = option(False, "torch.compile the model (slower start, faster steps on CUDA; measured "
                           "slower on CPU).", in_key=False)
    cpu_fast_paths: bool = option(True, "On CPU, train with bertwb/fast's dropout, Linear, attention and MLM "
                                  "loss, and infer with its Linear (the same math, faster; BENCHMARKS.md); false: "
                                  "plain PyTorch. Also evaluate's, fill-mask's, nsp's and embed's (pretrain's) and "
                                  "predict's (the task's).", in_key=False)
    log_every: int = option(10, "Steps between progress lines and metrics.jsonl lines.", min=1, in_key=False)
    eval_every: int = option(100, "Steps between validation passes; 0 = at the end of every epoch and of the run.",
                             min=0, in_key=False)
    eval_batches: int = option(20, "Validation batches per pass (0 = the whole validation split).", min=0,
                               in_key=False)
    checkpoint_every: int = option(100, "Steps between checkpoints; one is also written at the end and "
                                   "on Ctrl-C/SIGTERM.", min=1, in_key=False)
    keep_checkpoints: int = option(2, "How many of the newest checkpoints to keep.", min=1, in_key=False)
    heads_first: float = option(0.0, "Share of the run (its steps, or its hours under max_hours) in which only the "
                                "heads train, the encoder's learning rate held at 0: a head made anew fits the "
                                "published encoder before its gradients reach it (LP-FT, Kumar et al. 2022).",
                                min=0.0, max=1.0, added=True)
    heads_lr_scale: float = option(1.0, "The heads' learning rate as a multiple of lr (the encoder's), for heads "
                                   "made anew; the tied word embeddings are the encoder's.", min=0.0, max=1000.0,
                                   added=True)

    def steps_wanted(self, steps_per_epoch: int) -> int:
        """The optimizer steps these settings ask for: ``steps``, or ``epochs`` passes of ``steps_per_epoch``."""
        return self.steps or self.epochs * steps_per_epoch


@dataclass
class BudgetedTraining(TrainingConfig):
    """Training that may stop at a time budget: pre-training and each of its phases."""

    max_hours: float = option(0.0, "Stop at this many hours of training (0: no limit), at a checkpoint, with the "
                              "learning rate at its end: the schedule follows the share of the hours spent. "
                              "steps/epochs still cap the run; raising it continues a finished run.",
                              min=0.0, max=100_000.0, in_key=False)


@dataclass
class PretrainPhase(BudgetedTraining):
    """One phase of a phased pre-training (``pretrain.phases.<name>``): the pretrain section's settings
    where it says nothing, and pairs of its own length (BERT trained 90% of its steps at 128 tokens,
    then 10% at 512, to learn the long positions cheaply)."""

    max_seq_length: int | None = option(None, "This phase's pairs: longest instance in tokens (default: "
                                        "pairs.max_seq_length).", min=5, max=32767)
    max_predictions_per_seq: int | None = option(None, "This phase's pairs: most masked positions per instance "
                                                 "(default: pairs.max_predictions_per_seq).", min=1, max=32767)


@dataclass
class PretrainConfig(BudgetedTraining):
    """pretrain: the shared training settings at their pre-training defaults, and optional phases."""

    nsp: bool = option(True, "Train next-sentence prediction beside the masked LM; false: MLM only (RoBERTa, "
                       "Cramming), best with pairs.random_next_prob 0.")

    phases: dict[str, PretrainPhase] = option(
        {}, "Named phases trained in order, each from the previous one's weights with its own pairs and "
        "schedule; each starts from this section's settings. None: one run.", inherit=True)


@dataclass
class FinetuneTraining(TrainingConfig):
    """What the finetune section and every task share: training at BERT's fine-tuning defaults, where a
    task starts from, and how long its inputs may be."""

    steps: int = _redefault(TrainingConfig, "steps", 0)
    epochs: int = _redefault(TrainingConfig, "epochs", 3)
    lr: float = _redefault(TrainingConfig, "lr", 5e-5)
    warmup_steps: int = _redefault(TrainingConfig, "warmup_steps", 0)
    warmup_fraction: float = _redefault(TrainingConfig, "warmup_fraction", 0.1)
    eval_every: int = _redefault(TrainingConfig, "eval_every", 0)
    eval_batches: int = _redefault(TrainingConfig, "eval_batches", 0)
    checkpoint_every: int = _redefault(TrainingConfig, "checkpoint_every", 500)
    init_from: str = option("pretrain", "pretrain (this workspace's pre-trained model) or a model directory: "
                            "a checkpoint, an export, an import-hf result or a Hugging Face BERT folder.")
    max_seq_length: int = option(128, "Longest input in tokens, [CLS] and [SEP] included.", min=8, max=32767)
    keep_best: bool = option(True, "Keep the weights of the best dev evaluation (the task's main metric), "
                             "not the last.", in_key=False)
    patience: int = option(0, "Stop after this many dev evaluations without a better main metric; 0 = never.",
                           min=0, in_key=False)


@dataclass
class FinetuneTaskConfig(FinetuneTraining):
    """One fine-tuning task: its type and data and, where it differs from the finetune section, its training.

    Each task type adds its own options in a subclass (`bertwb.tasks.finetune.tasktypes.TaskType`'s
    ``settings_class``); the loader builds a task as its type's class, so a key of another type is unknown.
    """

    type: str | None = option(None, "The task type, a name of bertwb/tasks/finetune/tasktypes.py's TASK_TYPES: "
                              "classify (a text or a text pair -> a label, or a number with regression), tag "
                              "(CoNLL tokens -> BIO tags), qa (SQuAD v1.1/v2.0 answer spans).")
    train: str | None = option(None, "Training file: CSV, TSV, JSONL or Parquet (classify), CoNLL (tag), "
                               "SQuAD JSON (qa).")
    dev: str | None = option(None, "Dev file in the same format: evaluated every epoch (or eval_every steps).")
    test: str | None = option(None, "Optional test file, evaluated once with the final model.")


@dataclass
class FeatureTaskConfig(FinetuneTaskConfig):
    """The options of the task types whose head may read the encoder's features as they are (classify, tag):
    the BERT paper's feature-based approach (section 5.3). Both are in the task's key once set."""

    freeze_encoder: bool = option(False, "Train the head alone: the encoder keeps its weights (no gradient, no "
                                  "optimizer state, no dropout), as the BERT paper's feature-based approach.",
                                  added=True)
    feature_layers: list[int] | None = option(
        None, "Hidden states the head reads, side by side, e.g. [-4, -3, -2, -1] (-1 the last layer, 0 the "
        "embeddings): a tag head reads each token's, a classify head their mean over the text. Unset: the "
        "usual head (the pooled [CLS], or the last layer's tokens).", added=True)


@dataclass
class FinetuneConfig(FinetuneTraining):
    """finetune: the settings every task shares, and the tasks."""

    tasks: dict[str, FinetuneTaskConfig] = option(
        {}, "Named tasks; each starts from this section's settings and overrides what it needs.", inherit=True)


@dataclass
class EvaluateConfig:
    checkpoint: str = option("latest", "latest (newest checkpoint of the current run), a step number, or a model "
                             "directory (checkpoint, export, Hugging Face folder).")
    batch_size: int = option(64, "Pairs per evaluation batch.", min=1, max=1_000_000, in_key=False)
    device: str = option("auto", "auto (CUDA when present, else CPU), cpu, cuda or cuda:N.", in_key=False)


PHASE_PAIRS_KEYS = ("max_seq_length", "max_predictions_per_seq")  # what a phase may change in its pairs

SECTIONS: dict[str, type] = {
    "workspace": WorkspaceConfig,
    "ingest": IngestConfig,
    "vocab": VocabConfig,
    "pairs": PairsConfig,
    "model": ModelConfig,
    "pretrain": PretrainConfig,
    "evaluate": EvaluateConfig,
    "finetune": FinetuneConfig,
}


@dataclass(frozen=True)
class Origin:
    """Where a config value was given, for an error that blames it: ``key``, the dotted key that gave it (a
    named sub-section's own, or its section's that the sub-section inherited), and ``place``, the file and
    line or ``--set``, None for a default. It prints as a load error begins: ``bertwb.yaml line 4:
    finetune.lr``, ``--set finetune.lr`` or ``finetune.lr``."""

    key: str
    place: str | None = None

    def __str__(self) -> str:
        if self.place is None:
            return self.key
        return f"--set {self.key}" if self.place == "--set" else f"{self.place}: {self.key}"


class Provenance:
    """Where every value of a loaded config came from (`Config.origin`); filled by the loader."""

    def __init__(self, where: str = "config", lines: dict[tuple[str, ...], int] | None = None,
                 inherited: dict[tuple[str, ...], tuple[str, ...]] | None = None):
        self.where = where  # the config file as named in messages
        self.lines = lines or {}  # key path -> its line in the file; 0 = given by --set
        self.inherited = inherited or {}  # a named sub-section's key path -> its section's, where it gave the value

    def of(self, key: str) -> Origin:
        source = self.inherited.get(tuple(key.split(".")), tuple(key.split(".")))
        line = self.lines.get(source)
        place = None if line is None else "--set" if line == 0 else f"{self.where} line {line}"
        return Origin(".".join(source), place)


@dataclass
class Config:
    """The whole validated configuration plus where it came from."""

    workspace: WorkspaceConfig = field(default_factory=WorkspaceConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    pairs: PairsConfig = field(default_factory=PairsConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    path: Path | None = None  # the YAML file read, or None for built-in defaults
    base_dir: Path = field(default_factory=Path.cwd)  # relative paths resolve against this
    provenance: Provenance = field(default_factory=Provenance)  # where each value was given

    def origin(self, key: str) -> Origin:
        """Where the value at dotted ``key`` was given: ``finetune.tasks.sst.lr`` is ``finetune.lr``'s line
        when the task inherited it. What an error about a value names."""
        return self.provenance.of(key)

    def given(self, key: str) -> bool:
        """Whether the value at dotted ``key`` was given for that key itself (a line of the file, or a --set), not
        inherited from its section nor a default."""
        return tuple(key.split(".")) in self.provenance.lines

    def section(self, path: str) -> Any:
        """The section at a dotted path: ``"pairs"``, or a named sub-section ``"finetune.tasks.sst"``."""
        node: Any = self
        for part in path.split("."):
            node = node[part] if isinstance(node, dict) else getattr(node, part)
        return node

    def resolve(self, relative: str) -> Path:
        """A path from the config, resolved against the config file's directory."""
        path = Path(relative).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    def pretrain_phases(self) -> list[tuple[str | None, TrainingConfig, PairsConfig]]:
        """Pre-training as phases, in order: (name, training settings, pairs settings). Without
        ``pretrain.phases``, one unnamed phase: the pretrain and pairs sections themselves."""
        if not self.pretrain.phases:
            return [(None, self.pretrain, self.pairs)]
        phases = []
        for name, phase in self.pretrain.phases.items():
            pairs = dataclasses.replace(self.pairs, **{key: getattr(phase, key) for key in PHASE_PAIRS_KEYS
                                                       if getattr(phase, key) is not None})
            phases.append((name, phase, pairs))
        return phases

    def key_params(self, path: str) -> dict[str, Any]:
        """The values of the section at ``path`` that change a stage's outputs, for the stage key.

        Named sub-sections are left out: each is the key of a stage instance of its own, and so is an
        ``added`` option at its default: the key of a workspace built before it existed stays the same.
        """
        sec = self.section(path)
        hints = typing.get_type_hints(type(sec))
        return {f.name: getattr(sec, f.name) for f in dataclasses.fields(sec)
                if f.metadata.get("in_key", True) and not is_subsections(hints[f.name])
                and not (f.metadata.get("added") and getattr(sec, f.name) == f.default)}


def is_subsections(hint: Any) -> bool:
    """Whether a field's type is ``dict[str, <section dataclass>]`` (named sub-sections)."""
    return typing.get_origin(hint) is dict and dataclasses.is_dataclass(typing.get_args(hint)[1])


def union_words(hint: Any) -> list[Any]:
    """The words a field of a union type takes beside its other type (``int | Literal["auto"]``: auto); none else."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return []
    return [word for arg in typing.get_args(hint) if typing.get_origin(arg) is Literal for word in typing.get_args(arg)]
