"""The transformers side of benchmarks/finetune_parity.py: the script a user writes from transformers' docs
to fine-tune ``BertForTokenClassification`` on CoNLL or ``BertForQuestionAnswering`` on SQuAD, and to predict.

    python benchmarks/_hf_finetune.py train tag|qa --model INIT_DIR --train FILE --out DIR [hyper-parameters]
    python benchmarks/_hf_finetune.py predict tag|qa --model DIR --input FILE --out PREDICTIONS.jsonl [...]

It uses only transformers' own feature code, as its token-classification and question-answering guides
do: ``word_ids()`` to give each word's tag to its first piece (-100 on the others and on special tokens);
``BertTokenizerFast(question, context, truncation="only_second", stride=..., return_overflowing_tokens=True,
return_offsets_mapping=True)`` for QA windows, an answer's start and end tokens found through the offsets
and ``sequence_ids()`` (the [CLS] position when the window does not hold the whole answer). Training is the
guides' "native PyTorch" loop: shuffled batches padded to their longest (``DataCollatorForTokenClassification``,
``DataCollatorWithPadding``; the QA guide pads every window to max_length, which is slower, so this is the
stronger baseline), AdamW without decay on biases and LayerNorm (the Trainer's grouping), a linear
schedule with warm-up, gradient clipping to 1.0 (the Trainer's default). QA predictions are decoded as
the guide's post-processing does: the n-best start and end logits of each window, spans inside the
context of at most max_answer_length tokens scored by start + end logit, the best over the windows;
for SQuAD v2.0 the null score is the least [CLS] start + end logit over the windows, and the answer is
empty when it beats the best span (threshold 0). Each prediction is one JSON line, in input order.
``--precision bf16`` runs every forward under ``torch.autocast("cpu", torch.bfloat16)``, as the PyTorch docs
show it (the backward follows the forward's dtypes), for a side-by-side with bertwb's ``precision: bf16``.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch
from transformers import (BertForQuestionAnswering, BertForTokenClassification, BertTokenizerFast,
                          DataCollatorForTokenClassification, DataCollatorWithPadding, get_scheduler)


def read_conll(path: str) -> list[tuple[list[str], list[str]]]:
    sentences, words, tags = [], [], []
    for line in open(path, encoding="utf-8").read().splitlines() + [""]:
        fields = line.split()
        if not fields:
            if words:
                sentences.append((words, tags))
            words, tags = [], []
        else:
            words.append(fields[0])
            tags.append(fields[-1])
    return sentences


def read_squad(path: str) -> list[dict]:
    return [{"id": qa["id"], "question": qa["question"].strip(), "context": paragraph["context"],
             "answers": qa.get("answers", [])}
            for article in json.load(open(path, encoding="utf-8"))["data"]
            for paragraph in article["paragraphs"] for qa in paragraph["qas"]]


def tag_features(tokenizer, sentences, label2id, max_length: int) -> list[dict]:
    encoded = tokenizer([words for words, _ in sentences], is_split_into_words=True, truncation=True,
                        max_length=max_length)
    features = []
    for i, (_, tags) in enumerate(sentences):
        labels, previous = [], None
        for word in encoded.word_ids(i):
            labels.append(-100 if word is None or word == previous else label2id.get(tags[word], 0))
            previous = word
        features.append({"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i],
                         "attention_mask": encoded["attention_mask"][i], "labels": labels})
    return features


def qa_windows(tokenizer, questions, max_length: int, stride: int, doc_stride: int = 0,
               max_answer_length: int = 30, max_query_length: int = 64) -> list[dict]:
    """Every question's windows, in question order: ids, offsets, ``sequence_ids`` and the question's index.

    transformers' ``stride`` is the tokens two windows share. With ``doc_stride`` (bertwb's meaning: tokens
    between two windows' starts, at most; bertwb/tasks/finetune/qa.py's ``_window_starts``) each question
    gets the stride that starts its windows where bertwb starts them: a window of ``room = max_length - 3 -
    its length`` tokens steps ``min(doc_stride, room - min(max_answer_length, room // 2))`` (at least 1),
    so the stride is ``room - step``. The same windows as bertwb's for every question, not only for one of
    the median's length; a question over ``max_query_length`` tokens is cut to them, as bertwb (and the
    original BERT) cut it, else its room would be negative (or too small for any stride) and the tokenizer
    refuses it."""
    texts = [q["question"] for q in questions]
    if doc_stride:
        asked = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
        texts = [text if len(ids) <= max_query_length else text[:offsets[max_query_length - 1][1]]
                 for text, ids, offsets in zip(texts, asked["input_ids"], asked["offset_mapping"], strict=True)]
        rooms = [max_length - 3 - min(len(ids), max_query_length) for ids in asked["input_ids"]]
        strides = [room - max(1, min(doc_stride, room - min(max_answer_length, room // 2))) for room in rooms]
    else:
        strides = [stride] * len(questions)
    windows: list[dict] = []
    for value in sorted(set(strides)):  # one call per stride, then back in question order
        group = [i for i, s in enumerate(strides) if s == value]
        encoded = tokenizer([texts[i] for i in group], [questions[i]["context"] for i in group],
                            truncation="only_second", max_length=max_length, stride=value,
                            return_overflowing_tokens=True, return_offsets_mapping=True)
        for w, owner in enumerate(encoded["overflow_to_sample_mapping"]):
            windows.append({"owner": group[owner], "input_ids": encoded["input_ids"][w],
                            "token_type_ids": encoded["token_type_ids"][w],
                            "attention_mask": encoded["attention_mask"][w],
                            "offsets": encoded["offset_mapping"][w], "sequence_ids": encoded.sequence_ids(w)})
    return sorted(windows, key=lambda window: window["owner"])  # stable: a question's windows keep their order


def qa_train_features(tokenizer, questions, max_length: int, stride: int, doc_stride: int = 0,
                      max_answer_length: int = 30, max_query_length: int = 64) -> list[dict]:
    features = []
    for window in qa_windows(tokenizer, questions, max_length, stride, doc_stride, max_answer_length,
                             max_query_length):
        question, offsets, sequence_ids = questions[window["owner"]], window["offsets"], window["sequence_ids"]
        start_position = end_position = 0  # [CLS]: no answer in this window
        if question["answers"]:
            start_char = question["answers"][0]["answer_start"]
            end_char = start_char + len(question["answers"][0]["text"])
            first = sequence_ids.index(1)
            last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
            if offsets[first][0] <= start_char and offsets[last][1] >= end_char:
                start_position = first
                while start_position <= last and offsets[start_position][0] <= start_char:
                    start_position += 1
                start_position -= 1
                end_position = last
                while end_position >= first and offsets[end_position][1] >= end_char:
                    end_position -= 1
                end_position += 1
        features.append({"input_ids": window["input_ids"], "token_type_ids": window["token_type_ids"],
                         "attention_mask": window["attention_mask"], "start_positions": start_position,
                         "end_positions": end_position})
    return features


def train(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    tokenizer = BertTokenizerFast.from_pretrained(args.model)
    if args.task == "tag":
        sentences = read_conll(args.train)
        labels = sorted({tag for _, tags in sentences for tag in tags})
        model = BertForTokenClassification.from_pretrained(args.model, attn_implementation="sdpa")
        assert [model.config.id2label[i] for i in range(len(labels))] == labels, "the init's labels are the data's"
        features = tag_features(tokenizer, sentences, model.config.label2id, args.max_seq_length)
        collator = DataCollatorForTokenClassification(tokenizer)
    else:
        model = BertForQuestionAnswering.from_pretrained(args.model, attn_implementation="sdpa")
        features = qa_train_features(tokenizer, read_squad(args.train), args.max_seq_length, args.stride,
                                     args.doc_stride, args.max_answer_length, args.max_query_length)
        collator = DataCollatorWithPadding(tokenizer)
    loader = torch.utils.data.DataLoader(features, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                         collate_fn=collator)
    no_decay = [p for name, p in model.named_parameters() if name.endswith("bias") or "LayerNorm" in name]
    decay = [p for name, p in model.named_parameters() if not (name.endswith("bias") or "LayerNorm" in name)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, eps=1e-6)
    steps = args.epochs * len(loader)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=round(0.1 * steps), num_training_steps=steps)
    model.train()
    started = time.perf_counter()
    for _ in range(args.epochs):
        for batch in loader:
            with autocast(args.precision):
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    seconds = time.perf_counter() - started
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    json.dump({"features": len(features), "steps": steps, "loop_seconds": seconds},
              open(f"{args.out}/training.json", "w"))


def autocast(precision: str):
    """bf16 autocast on the CPU when asked for, else nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


@torch.no_grad()
def logits_of(model, tokenizer, features: list[dict], batch_size: int, precision: str,
              ) -> list[tuple[np.ndarray, ...]]:
    collator = DataCollatorWithPadding(tokenizer)
    outputs = []
    for start in range(0, len(features), batch_size):
        rows = features[start:start + batch_size]
        batch = collator(rows)
        with autocast(precision):
            out = model(**batch)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            if hasattr(out, "start_logits"):
                outputs.append((out.start_logits[i, :n].float().numpy(), out.end_logits[i, :n].float().numpy()))
            else:
                outputs.append((out.logits[i, :n].float().numpy(),))
    return outputs


def predict(args: argparse.Namespace) -> None:
    tokenizer = BertTokenizerFast.from_pretrained(args.model)
    lines = []
    if args.task == "tag":
        model = BertForTokenClassification.from_pretrained(args.model, attn_implementation="sdpa").eval()
        sentences = read_conll(args.input)
        encoded = tokenizer([words for words, _ in sentences], is_split_into_words=True, truncation=True,
                            max_length=args.max_seq_length)
        features = [{"input_ids": ids, "token_type_ids": types, "attention_mask": mask} for ids, types, mask
                    in zip(encoded["input_ids"], encoded["token_type_ids"], encoded["attention_mask"], strict=True)]
        for i, (logits,) in enumerate(logits_of(model, tokenizer, features, args.batch_size, args.precision)):
            tags, previous = ["O"] * len(sentences[i][0]), None
            for position, word in enumerate(encoded.word_ids(i)):
                if word is not None and word != previous:
                    tags[word] = model.config.id2label[int(logits[position].argmax())]
                previous = word
            lines.append({"tags": tags})
    else:
        model = BertForQuestionAnswering.from_pretrained(args.model, attn_implementation="sdpa").eval()
        questions = read_squad(args.input)
        windows = qa_windows(tokenizer, questions, args.max_seq_length, args.stride, args.doc_stride,
                             args.max_answer_length, args.max_query_length)
        features = [{name: window[name] for name in ("input_ids", "token_type_ids", "attention_mask")}
                    for window in windows]
        outputs = logits_of(model, tokenizer, features, args.batch_size, args.precision)
        owned: list[list[int]] = [[] for _ in questions]
        for i, window in enumerate(windows):
            owned[window["owner"]].append(i)
        for question, rows in zip(questions, owned, strict=True):
            best, null = {"text": "", "score": -math.inf}, math.inf
            for i in rows:
                start_logits, end_logits = outputs[i]
                sequence_ids, offsets = windows[i]["sequence_ids"], windows[i]["offsets"]
                null = min(null, float(start_logits[0] + end_logits[0]))
                for s in np.argsort(start_logits)[-1:-args.n_best - 1:-1]:
                    for e in np.argsort(end_logits)[-1:-args.n_best - 1:-1]:
                        if sequence_ids[s] != 1 or sequence_ids[e] != 1 or e < s or e - s + 1 > args.max_answer_length:
                            continue
                        score = float(start_logits[s] + end_logits[e])
                        if score > best["score"]:
                            best = {"text": question["context"][offsets[s][0]:offsets[e][1]], "score": score}
            answer = best["text"]
            if args.version_2 and null > best["score"]:
                answer = ""
            lines.append({"id": question["id"], "answer": answer, "best_span": best["text"],
                          "no_answer_score": null - best["score"] if best["score"] > -math.inf else math.inf})
    with open(args.out, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["train", "predict"])
    parser.add_argument("task", choices=["tag", "qa"])
    parser.add_argument("--model", required=True)
    parser.add_argument("--train")
    parser.add_argument("--input")
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--stride", type=int, default=32, help="tokens two QA windows share (transformers' stride)")
    parser.add_argument("--doc-stride", type=int, default=0, help="instead: tokens between two QA windows' starts, "
                        "at most, per question (bertwb's doc_stride): the same windows as bertwb's")
    parser.add_argument("--max-query-length", type=int, default=64, help="with --doc-stride: a longer question "
                        "is cut to this many tokens, as bertwb cuts it")
    parser.add_argument("--n-best", type=int, default=20)
    parser.add_argument("--max-answer-length", type=int, default=30)
    parser.add_argument("--version-2", action="store_true", help="SQuAD v2.0: an empty answer may win")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    train(args) if args.command == "train" else predict(args)


if __name__ == "__main__":
    main()
