"""The plain transformers side of ``benchmarks/finetune_published.py``: fine-tune a published BERT on a
labelled CSV and predict a second one, as a user writes it from the transformers docs.

Usage: ``python benchmarks/hf_finetune_classify.py MODEL TRAIN.csv DEV.csv OUT.jsonl [--epochs 2]
[--batch 32] [--lr 5e-5] [--max-seq-length 128] [--warmup-fraction 0.1] [--seed 1234] [--precision fp32|bf16]``

* ``BertTokenizerFast`` and ``BertForSequenceClassification.from_pretrained(MODEL, num_labels=...)``
  (a new head on the published encoder, sdpa attention);
* each text cut to ``--max-seq-length`` (``truncation=True``), random batches padded to their longest
  (``DataCollatorWithPadding``), the last partial batch dropped (as ``bertwb finetune`` does);
* ``torch.optim.AdamW`` (weight decay 0.01, not on biases and LayerNorms), linear warm-up over
  ``--warmup-fraction`` of the steps then linear decay (``get_linear_schedule_with_warmup``), gradient
  clipping to 1.0, the model's own loss;
* then the dev texts in batches of 64, one JSON line per text: ``{"label": ..., "score": ...}``;
* ``--precision bf16``: the forward and its loss, in training and in prediction, under
  ``torch.autocast("cpu", dtype=torch.bfloat16)`` as the PyTorch docs show it (the backward follows the
  forward's dtypes, the weights and AdamW's state stay fp32); the logits are made fp32 before the softmax.

The CSVs have ``text`` and ``label`` columns. Prints one JSON line of phase timings at the end.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import time

import torch


def read_csv(path: str) -> tuple[list[str], list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [row["text"] for row in rows], [row["label"] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("train")
    parser.add_argument("dev")
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--warmup-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    started = time.perf_counter()
    import transformers

    torch.manual_seed(args.seed)
    texts, labels = read_csv(args.train)
    names = sorted(set(labels))
    tokenizer = transformers.BertTokenizerFast.from_pretrained(args.model)
    model = transformers.BertForSequenceClassification.from_pretrained(
        args.model, num_labels=len(names), id2label=dict(enumerate(names)),
        label2id={name: i for i, name in enumerate(names)}, attn_implementation="sdpa")
    encoded = tokenizer(texts, truncation=True, max_length=args.max_seq_length)
    targets = [names.index(label) for label in labels]
    collator = transformers.DataCollatorWithPadding(tokenizer)
    steps_per_epoch = len(texts) // args.batch
    total = steps_per_epoch * args.epochs
    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.lr, eps=1e-6)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(args.warmup_fraction * total), total)
    loaded = time.perf_counter()

    model.train()
    rng = random.Random(args.seed)
    for _ in range(args.epochs):
        order = list(range(len(texts)))
        rng.shuffle(order)
        for step in range(steps_per_epoch):
            rows = order[step * args.batch:(step + 1) * args.batch]
            batch = collator([{"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i],
                               "attention_mask": encoded["attention_mask"][i]} for i in rows])
            with autocast(args.precision):
                loss = model(**batch, labels=torch.tensor([targets[i] for i in rows])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
    trained = time.perf_counter()

    model.eval()
    dev_texts, _ = read_csv(args.dev)
    with open(args.out, "w", encoding="utf-8") as out, torch.no_grad():
        for start in range(0, len(dev_texts), 64):
            batch = tokenizer(dev_texts[start:start + 64], truncation=True, max_length=args.max_seq_length,
                              padding=True, return_tensors="pt")
            with autocast(args.precision):
                logits = model(**batch).logits
            probs = logits.float().softmax(-1)
            for score, index in zip(*probs.max(-1), strict=True):
                out.write(json.dumps({"label": names[int(index)], "score": round(float(score), 6)}) + "\n")
    done = time.perf_counter()
    print(json.dumps({"load_s": round(loaded - started, 3), "train_s": round(trained - loaded, 3),
                      "predict_s": round(done - trained, 3), "steps": total, "precision": args.precision}))


def autocast(precision: str):
    """bf16 autocast on the CPU for ``bf16``, else nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


if __name__ == "__main__":
    main()
