"""Fine-tuning throughput on CPU: bertwb's classifier against a plain transformers loop, side by side.

Usage: ``python benchmarks/finetune_cpu.py [--epochs 2] [--preset mini] [--threads N] [--no-append]``

* Data: ``sample_corpus/finetune/sentiment_{train,dev}.csv`` (2,000 reviews of 8-60 tokens, 300 dev).
* Model (both sides): the preset's BERT with a 2-label classification head, the same initial weights
  (bertwb's init, copied into ``transformers.BertForSequenceClassification`` under Hugging Face names),
  dropout 0.1, vocabulary 30522 (sizes as a published BERT's), the same tokenizer (trained on the
  sample corpus and padded to 30522 so that both sides pay for a real embedding matrix).
* bertwb: the trainer's own steps (``Trainer.train_step``) with the classify objective: length-bucketed
  batches padded to their longest row, the fused AdamW of ``build_optimizer``, clipping, the CPU fast
  paths (``bertwb.fast``) — what ``bertwb finetune`` runs.
* transformers: the loop a user writes from its docs: random batches padded to the batch's longest
  (``DataCollatorWithPadding``'s behaviour), ``BertForSequenceClassification`` (sdpa attention),
  ``torch.optim.AdamW``, clipping to 1.0, its own loss.
* Both: the same learning rate schedule (linear warm-up over 10%, linear decay), batch 32, the same
  number of epochs; examples/s is training examples over training time (dev evaluation excluded);
  then both models' dev accuracy, so the speed is compared at equal accuracy. The two sides' steps
  alternate one by one in one process, so load from other processes on a shared host slows both alike.

Results go to the benchmark log (benchmarks/log/) with the machine, and a row to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertwb import fast  # noqa: E402
from bertwb.data.batching import Batches  # noqa: E402
from bertwb.data.tokenizer import build_tokenizer  # noqa: E402
from bertwb.memory import bound_kernel_cache, reexec_with_malloc_tunables  # noqa: E402
from bertwb.model.bert import BertConfig  # noqa: E402
from bertwb.model.heads import BertForSequenceClassification  # noqa: E402
from bertwb.model.hf_names import hf_config_of, to_hf_state_dict  # noqa: E402
from bertwb.tasks.finetune.classify import ClassifySettings, ClassifyTask  # noqa: E402
from bertwb.tasks.finetune.batches import TaskExamples, collate  # noqa: E402
from bertwb.tasks.finetune.objectives import objective_for  # noqa: E402
from bertwb.train.distributed import Dist  # noqa: E402
from bertwb.train.optim import schedule_for  # noqa: E402
from bertwb.train.trainer import Trainer  # noqa: E402
from _common import append_report, cpu_model  # noqa: E402

DATA = REPO / "sample_corpus" / "finetune"
VOCAB, BATCH, LR = 30522, 32, 1e-4


def tokenizer_for(texts: list[str]):
    """A WordPiece tokenizer trained on the data, its vocabulary padded with [unusedN] to 30522 tokens."""
    from tokenizers import models, trainers

    tokenizer = build_tokenizer(None, lowercase=True)
    trainer = trainers.WordPieceTrainer(vocab_size=4000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        continuing_subword_prefix="##", show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    vocab = tokenizer.get_vocab()
    vocab.update({f"[unused{i}]": len(vocab) + i for i in range(VOCAB - len(vocab))})
    tokenizer.model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##")
    from bertwb.data.tokenizer import add_bert_template

    add_bert_template(tokenizer)
    return tokenizer


def settings(epochs: int) -> ClassifySettings:
    s = ClassifySettings(type="classify", train=str(DATA / "sentiment_train.csv"),
                         dev=str(DATA / "sentiment_dev.csv"))
    s.epochs, s.batch_size, s.lr, s.device, s.log_every = epochs, BATCH, LR, "cpu", 10_000
    return s


class OurSide:
    """bertwb's fine-tuning step: the trainer with the classify objective, as `bertwb finetune` runs it."""

    def __init__(self, model: BertForSequenceClassification, task: ClassifyTask, train, epochs: int):
        s = settings(epochs)
        self.batches = Batches(TaskExamples(train), BATCH, s.seed, bucket_batches=s.bucket_batches)
        self.model = model
        objective = objective_for(task, model.label_names,
                                  fast=fast.choose(model, torch.device("cpu"), s.cpu_fast_paths))  # as bertwb finetune
        self.trainer = Trainer(s, objective, model, self.batches, dist=Dist(device="cpu"))
        self.steps, self.pad = self.trainer.total_steps, self.batches.padding_fraction(0)

    def step(self, step: int) -> None:
        self.trainer.train_step(step)

    def logits(self, batch) -> torch.Tensor:
        return self.model(batch.input_ids, batch.token_type_ids, batch.attention_mask).logits


class TheirSide:
    """The plain transformers loop: random batches padded to their longest row, AdamW, its own loss."""

    def __init__(self, model, train, epochs: int):
        self.model, self.train = model, train
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01, eps=1e-6)
        self.batches = Batches(train, BATCH, 1234, bucket_batches=1)  # random batches
        self.steps = epochs * self.batches.steps_per_epoch
        self.schedule = schedule_for(settings(epochs), self.steps)
        self.padded = self.real = 0
        model.train()

    def step(self, step: int) -> None:
        epoch, index = divmod(step, self.batches.steps_per_epoch)
        batch = collate(self.train, self.batches.epoch_order(epoch)[index])
        self.model(**self.inputs(batch), labels=batch.labels).loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        for group in self.optimizer.param_groups:
            group["lr"] = self.schedule.lr(step)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.padded, self.real = self.padded + batch.n_padded, self.real + batch.n_tokens

    @staticmethod
    def inputs(batch) -> dict[str, torch.Tensor]:
        mask = batch.attention_mask if batch.attention_mask is not None else torch.ones_like(batch.input_ids)
        return {"input_ids": batch.input_ids, "token_type_ids": batch.token_type_ids, "attention_mask": mask}

    def logits(self, batch) -> torch.Tensor:
        return self.model(**self.inputs(batch)).logits


def side_by_side(sides: dict, steps: int) -> dict[str, float]:
    """Each side's training seconds, their steps interleaved one by one so that a busy host slows both alike."""
    seconds = dict.fromkeys(sides, 0.0)
    for step in range(steps):
        for name, side in sides.items():
            started = time.perf_counter()
            side.step(step)
            seconds[name] += time.perf_counter() - started
    return seconds


@torch.no_grad()
def accuracy(side, dev) -> float:
    side.model.eval()
    right = 0
    for start in range(0, len(dev), 64):
        batch = collate(dev, np.arange(start, min(start + 64, len(dev))))
        right += int((side.logits(batch).argmax(-1) == batch.labels).sum())
    side.model.train()
    return right / len(dev)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    reexec_with_malloc_tunables([sys.executable, __file__, *sys.argv[1:]])  # as `bertwb finetune`, both sides
    bound_kernel_cache()  # torch's CPU kernel caches bounded as every bertwb command bounds them; both sides
    import transformers

    torch.set_num_threads(args.threads)
    task = ClassifyTask(settings(args.epochs), "benchmark", {})
    train_examples, dev_examples = task.read(DATA / "sentiment_train.csv"), task.read(DATA / "sentiment_dev.csv")
    labels = task.label_names(train_examples, DATA / "sentiment_train.csv")
    tokenizer = tokenizer_for([e.text for e in train_examples])
    train, dev = (task.featurize(examples, tokenizer, labels) for examples in (train_examples, dev_examples))

    torch.manual_seed(0)
    ours = BertForSequenceClassification(BertConfig.from_preset(args.preset, VOCAB), labels)
    theirs = transformers.BertForSequenceClassification(transformers.BertConfig(
        **hf_config_of(ours), attn_implementation="sdpa"))
    theirs.load_state_dict(to_hf_state_dict(ours.state_dict()))
    sides = {"bertwb": OurSide(ours, task, train, args.epochs),
             f"transformers {transformers.__version__}": TheirSide(theirs, train, args.epochs)}
    steps = min(side.steps for side in sides.values())
    seconds = side_by_side(sides, steps)
    their_side = list(sides.values())[1]
    pads = {"bertwb": sides["bertwb"].pad, list(sides)[1]: 1 - their_side.real / their_side.padded}
    results = {name: {"seconds": seconds[name], "examples": steps * BATCH, "pad": pads[name],
                      "accuracy": accuracy(side, dev)} for name, side in sides.items()}
    rates = {name: r["examples"] / r["seconds"] for name, r in results.items()}
    (name_ours, ours_rate), (name_theirs, theirs_rate) = rates.items()
    speedup = ours_rate / theirs_rate
    config = ours.config
    rows = "\n".join(f"| {name} | {rates[name]:,.1f} | {r['seconds']:.1f} | {100 * r['pad']:.1f}% | "
                     f"{100 * r['accuracy']:.1f}% |" for name, r in results.items())
    report = f"""
## Fine-tuning throughput, CPU — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/finetune_cpu.py --epochs {args.epochs} --preset {args.preset} --threads {args.threads}`.
Machine: {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__} with {torch.get_num_threads()} threads.
Task: sentiment_train.csv (2,000 reviews) → sentiment_dev.csv (300), L{config.num_layers} H{config.hidden_size}
A{config.num_heads}, vocab {VOCAB}, dropout 0.1, batch {BATCH}, lr {LR}, {args.epochs} epochs, the same initial weights.

| | examples/s | training s | pad share | dev accuracy |
|---|---|---|---|---|
{rows}

* Speed-up: **{speedup:.2f}×** the plain transformers loop's examples/s (target ≥ 1.5×:
  {'met' if speedup >= 1.5 else 'NOT met'}), at dev accuracy {100 * results[name_ours]['accuracy']:.1f}% against
  {100 * results[name_theirs]['accuracy']:.1f}%.
"""
    print(report)
    if not args.no_append:
        ours_acc, theirs_acc = results[name_ours]["accuracy"], results[name_theirs]["accuracy"]
        append_report(report, f"**{speedup:.2f}×** a plain transformers loop's examples/s (target 1.5×); dev "
                              f"accuracy {100 * ours_acc:.1f}% vs {100 * theirs_acc:.1f}%")


if __name__ == "__main__":
    main()
