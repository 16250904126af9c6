"""``bertwb report``: PNG figures of a workspace and one self-contained HTML page, during training or after.

Draws only what exists (the pairs, vocabulary fertility, pre-training curves, evaluate's accuracies, each
task's curves and confusion matrix) into ``<workspace>/report/`` or ``--output``, a folder built anew and
swapped in (:mod:`.folder`). It takes no lock and writes nothing in the stages: it reads the metrics files
and the database read-only (:mod:`.sources`) and the stages' states as `bertwb.engine.status` gives them,
so a run in progress shows as far as it got. docs/reports.md, "Reports and TensorBoard", lists the figures.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import duckdb

from bertwb import engine, outputs, ui
from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.report import figures, sources
from bertwb.report.folder import FIGURES_DIR, PAGE, check_replaceable, write_marker
from bertwb.report.page import Shown, ShownTable, render
from bertwb.workspace import Workspace, building


@dataclass
class _Planned:
    name: str
    section: str
    title: str
    caption: str
    draw: Callable[[], Any]


def write_report(cfg: Config, ws: Workspace, output: Path | None = None) -> dict[str, Any]:
    """Draw every figure the workspace has data for and write the page; return what was written."""
    if not ws.root.is_dir():
        raise BertwbError(f"no workspace at {ws.root}: nothing to report; run `bertwb run` first "
                          "(or point --workdir / --config at the workspace)")
    own = ws.root / "report"
    out = output or own
    outputs.check_folder(out, outputs.protected_paths(cfg, ws), "--output", own)
    check_replaceable(out, legacy_ok=out.resolve() == own.resolve())
    found = _Findings(cfg, ws)
    if not found.planned and not found.headline:
        raise BertwbError(f"nothing to report in {ws.root} yet: no stage has finished or logged metrics; "
                          "run `bertwb run` (or at least `bertwb pairs`) first")
    states = found.states()
    with building(out.resolve(), what="report") as tmp:
        shown = [_draw(plan, tmp) for plan in found.planned]
        (tmp / PAGE).write_text(render(f"bertwb report: {ws.root}", f"written {time.strftime('%Y-%m-%d %H:%M:%S')}",
                                       found.headline, list(states.items()), found.notes, shown, found.tables),
                                encoding="utf-8")
        write_marker(tmp, [PAGE, *(f"{FIGURES_DIR}/{figure.path.name}" for figure in shown)])
    return {"page": str(out / PAGE), "figures": [{"name": f.name, "path": str(out / FIGURES_DIR / f.path.name),
                                                  "section": f.section, "title": f.title} for f in shown],
            "stages": states, "notes": found.notes}


def _draw(plan: _Planned, folder: Path) -> Shown:
    """Draw one planned figure into ``folder``'s figures/."""
    path = folder / FIGURES_DIR / f"{plan.name}.png"
    path.parent.mkdir(exist_ok=True)
    figures.save(plan.draw(), path)
    return Shown(plan.name, plan.section, plan.title, plan.caption, path)


def show(report: dict[str, Any]) -> None:
    """What ``bertwb report`` prints: the page, every figure, and what could not be drawn."""
    ui.info(f"wrote {report['page']} with {len(report['figures'])} figures:")
    for figure in report["figures"]:
        ui.info(f"  {figure['path']}: {figure['title']}")
    for note in report["notes"]:
        ui.warn(note)


class _Findings:
    """What the workspace holds, part by part of the pipeline: figures to draw, headline rows, notes."""

    def __init__(self, cfg: Config, ws: Workspace):
        self.cfg, self.ws = cfg, ws
        self.planned: list[_Planned] = []
        self.headline: list[tuple[str, str, str]] = []
        self.notes: list[str] = []
        self.tables: list[ShownTable] = []
        self.logs: dict[str, sources.TrainingLog] = {}
        self.data()
        self.pretraining()
        self.evaluation()
        self.finetuning()

    def states(self) -> dict[str, str]:
        """Every stage as `bertwb status` sees it (not run yet, stale and why, fresh), and any run in progress."""
        rows = {row["stage"]: row for row in engine.status(self.cfg, self.ws)}
        names = list(rows) + [name for name in self.logs if name not in rows]
        return {name: _state(rows.get(name), self.logs.get(name)) for name in names}

    def data(self) -> None:
        ws = self.ws
        vocab = (ws.read_manifest("vocab") or {}).get("summary") or {}
        if vocab:
            self.headline.append(("vocab", f"{vocab.get('vocab_size', 0):,} tokens, "
                                  f"{vocab.get('tokens_per_word', 0):.3f} WordPieces per word",
                                  f"[UNK] {100 * vocab.get('unk_rate', 0):.3f}% of tokens, "
                                  f"{100 * vocab.get('coverage', 0):.1f}% of the vocabulary used"))
        self._scripts(vocab)
        pairs = (ws.read_manifest("pairs") or {}).get("summary") or {}
        if pairs:
            mask_rate = f", mask rate {100 * pairs['mask_rate']:.2f}%" if pairs.get("mask_rate") is not None else ""
            self.headline.append(("pairs", f"{pairs.get('instances_train', 0):,} train, "
                                  f"{pairs.get('instances_valid', 0):,} valid",
                                  f"mean {pairs.get('mean_length', 0)} tokens, "
                                  f"{pairs.get('percent_random_next', 0)}% random next{mask_rate}"))
        stats = sources.pair_stats(ws)
        if stats is not None:
            self.planned.append(_Planned(
                "pairs_length", "Data", "Pairs by length", "Share of each split's pairs with each length in tokens, "
                "[CLS] A [SEP] B [SEP] included, from the pairs stage's arrays (the pairs_length_hist view in SQL).",
                lambda: figures.pair_lengths(stats)))
            if stats.kinds:
                self.planned.append(_Planned(
                    "pairs_mask_kinds", "Data", "Masked positions by kind", "What the input holds at each masked "
                    "position: [MASK], a random token or the original one kept (the pairs_mask_kinds view in SQL).",
                    lambda: figures.mask_kinds(stats)))
            else:
                self.notes.append("pairs: no mask-kind figure; with pairs.masking dynamic the masks are drawn "
                                  "while training")
        try:
            fertility = sources.fertility(ws)
        except (BertwbError, duckdb.Error) as exc:
            fertility = None
            fix = "" if isinstance(exc, BertwbError) else "; rerun `bertwb report` once it can be read"  # ours has one
            self.notes.append(f"vocab: no fertility figure, the database could not be read: "
                              f"{str(exc).splitlines()[0]}{fix}")
        if fertility is not None:
            unk = vocab.get("unk_rate")
            self.planned.append(_Planned(
                "vocab_fertility", "Data", "Vocabulary fertility", "Words by the number of WordPieces they were cut "
                "into, over a fixed sample of tokenised sentences spread over the corpus. A word is what BERT's "
                "pre-tokeniser yields (text split at whitespace and punctuation), so one starts at every piece "
                "without the ## prefix; fertility is the mean number of pieces per word.",
                lambda: figures.fertility(fertility, unk)))

    def _scripts(self, vocab: dict[str, Any]) -> None:
        """The vocab stage's per-script coverage as a table (when the text has more than one script), and each
        script's warning as a note."""
        scripts = vocab.get("scripts") or []
        if len(scripts) > 1:
            self.tables.append(ShownTable(
                "Scripts", "Each Unicode script of the corpus: its share of the characters (spaces left out), the "
                "WordPieces per word and the share of [UNK] among its words' tokens, and its share of the vocabulary; "
                "counted on a fixed sample of sentences (the vocab_scripts view in SQL).",
                ["script", "of text", "tokens per word", "[UNK]", "of vocabulary"],
                [(row["script"], f"{100 * row['share']:.2f}%", f"{row['tokens_per_word']:.2f}",
                  f"{100 * row['unk_rate']:.3f}%", f"{100 * row['vocab_share']:.2f}%") for row in scripts]))
        self.notes += [f"vocab: {warning}" for warning in vocab.get("warnings") or []]

    def pretraining(self) -> None:
        log = sources.training_log(self.cfg, self.ws, "pretrain")
        if log is None:
            return
        self.logs["pretrain"] = log
        self.notes += _skipped_lines("pretrain", log)
        state = "finished" if log.finished else "running or interrupted"
        title = f"pretrain, step {log.last_step:,} ({state})"
        shown = {"loss": "loss {:.4f}", "mlm_acc": "MLM acc {:.2%}", "nsp_acc": "NSP acc {:.2%}",
                 "valid_loss": "valid loss {:.4f}"}
        self.headline.append(("pretrain", f"step {log.last_step:,}, {state}", ", ".join(
            text.format(log.last(name)) for name, text in shown.items() if log.last(name) is not None)))
        source = f"From {log.path}: one point per logged step (pretrain.log_every); dots are validations."
        self.planned += [
            _Planned("pretrain_loss", "Pre-training", "Pre-training loss", source
                     + " The loss is MLM + NSP (MLM alone with pretrain.nsp false).",
                     lambda: figures.curves(log, {"loss": "loss", "mlm_loss": "MLM loss", "nsp_loss": "NSP loss"},
                                            f"loss: {title}", "cross-entropy")),
            _Planned("pretrain_accuracy", "Pre-training", "MLM and NSP accuracy", source,
                     lambda: figures.curves(log, {"mlm_acc": "MLM accuracy", "nsp_acc": "NSP accuracy"},
                                            f"accuracy: {title}", "accuracy", percent=True)),
            _Planned("pretrain_lr", "Pre-training", "Learning rate", source + " Linear warm-up, then linear decay.",
                     lambda: figures.curves(log, {"lr": "learning rate"}, f"learning rate: {title}", "learning rate")),
            _Planned("pretrain_tokens_per_s", "Pre-training", "Throughput", source + " Tokens per second of each "
                     "logging window (a window with a validation includes its time).",
                     lambda: figures.curves(log, {"tokens_per_s": "tokens/s"}, f"throughput: {title}",
                                            "tokens per second")),
        ]

    def evaluation(self) -> None:
        metrics = sources.evaluate_metrics(self.ws)
        if metrics is None:
            return
        step = f"step {metrics['step']:,}" if metrics.get("step") is not None else metrics.get("checkpoint", "")
        nsp = f", NSP acc {100 * metrics['nsp_acc']:.2f}%" if "nsp_acc" in metrics else ""
        self.headline.append(("evaluate", f"MLM acc {100 * metrics['mlm_acc']:.2f}%, perplexity "
                              f"{metrics['perplexity']:,.2f}{nsp}", f"{step}, {metrics['pairs']:,} valid pairs"))
        self.planned.append(_Planned(
            "evaluate", "Evaluation", "Held-out accuracy", f"evaluate on the valid pairs with "
            f"{metrics.get('checkpoint')}: MLM accuracy overall and by what the input held at the masked position"
            + (", and NSP accuracy." if "nsp_acc" in metrics else " (NSP was not trained)."),
            lambda: figures.evaluate_bars(metrics)))

    def finetuning(self) -> None:
        for task in sources.task_names(self.cfg, self.ws):
            self._task(task)

    def _task(self, task: str) -> None:
        stage, section = f"finetune/{task}", f"Fine-tuning: {task}"
        file_name = _file_name(task)
        log = sources.training_log(self.cfg, self.ws, stage)
        if log is not None:
            self.logs[stage] = log
            self.notes += _skipped_lines(stage, log)
            title = f"{stage}, step {log.last_step:,} ({'finished' if log.finished else 'running or interrupted'})"
            self.planned.append(_Planned(
                f"finetune_{file_name}_curves", section, f"{task}: training", f"From {log.path}: training loss and "
                "accuracy per logged step; dots are the dev evaluations.", lambda: figures.task_curves(log, title)))
        results = sources.task_results(self.ws, task)
        if results is None:
            return
        split = "dev" if "dev" in results else "test"
        scores = results.get(split) or {}
        shown = [name for name in (results.get("main_metric"), "loss") if isinstance(scores.get(name), (int, float))]
        labels = results.get("labels") or []
        per_type = scores.get("per_type") if isinstance(scores.get("per_type"), dict) else {}
        by_type = ", ".join(f"{kind} {row.get('f1', 0):.4f}" for kind, row in per_type.items() if isinstance(row, dict))
        self.headline.append((stage, ", ".join(f"{split} {name} {scores[name]:.4f}" for name in shown)
                              + (f"; {split} F1 by type: {by_type}" if by_type else ""),
                              f"{results.get('type')}" + (f", labels {', '.join(labels)}" if labels else "")))
        if scores.get("confusion_matrix") and labels:
            chart = f"{stage}: {split} accuracy {100 * scores.get('accuracy', 0):.2f}%"
            self.planned.append(_Planned(
                f"finetune_{file_name}_confusion", section, f"{task}: {split} confusion matrix",
                f"Gold labels (rows) against the final model's predictions (columns) on {split}; the colour is the "
                "share of the row, so the diagonal is each label's recall.",
                lambda: figures.confusion(labels, scores["confusion_matrix"], chart)))


def _skipped_lines(stage: str, log: sources.TrainingLog) -> list[str]:
    """One note per metrics file of the run with lines that did not read: which file, which lines, how many."""
    notes = []
    for damaged in log.damaged:
        count, numbers = len(damaged.skipped), ", ".join(map(str, damaged.skipped[:5]))
        one = count == 1
        where = f"line {numbers}" if one else f"lines {numbers}{', ...' if count > 5 else ''}"
        notes.append(f"{stage}: skipped {count} damaged {'line' if one else 'lines'} of {damaged.path} ({where}: "
                     f"not a JSON object with a step); the figures leave {'it' if one else 'them'} out")
    return notes


def _file_name(task: str) -> str:
    """The part of a figure's file name that names ``task``: the name itself when it is lower-case ASCII,
    else its ASCII letters with a hash of the whole name, so that two tasks never share a figure (``café``
    and ``cafè`` both gave ``caf_``; ``NER`` and ``ner`` are one file on a case-insensitive disk)."""
    plain = re.sub(r"[^a-z0-9_-]", "_", task.lower())
    if plain == task:
        return task
    return f"{plain}-{hashlib.sha256(task.encode()).hexdigest()[:8]}"


def _state(row: dict[str, Any] | None, log: sources.TrainingLog | None) -> str:
    if row is None or row["state"] == "missing":
        text = "not run yet"
    elif row["state"] == "stale":
        text = f"stale: {row['reason']}"
    else:
        text = f"fresh, finished {row['finished_at']}"
    if log is not None and not log.finished:
        text += f"; a run is going or was interrupted at step {log.last_step:,}"
    return text
