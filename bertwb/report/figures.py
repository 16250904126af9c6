"""The report's figures: one function per figure, each drawing data it is given into a new `Figure`.

Every figure is `SIZE` inches at `DPI` (800 × 450 pixels), saved without tight cropping, so its pixel size
never depends on its content. ``matplotlib.figure.Figure`` is used directly, not pyplot: no global state, no
display. Training metrics are lines, validation points dots of the same colour; accuracies are in percent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from bertwb.report.sources import Fertility, PairStats, TrainingLog

SIZE = (8.0, 4.5)
DPI = 100
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
_TASK_COUNTS = ("examples", "sentences", "questions")  # task metrics that count things rather than score them


def new_figure(columns: int = 1) -> tuple[Figure, Any]:
    figure = Figure(figsize=SIZE, dpi=DPI, layout="constrained")
    return figure, figure.subplots(1, columns, squeeze=False)[0]


def save(figure: Figure, path: Path) -> None:
    """Write a PNG of exactly `SIZE` × `DPI` pixels."""
    figure.savefig(path, format="png", dpi=DPI)


def curves(log: TrainingLog, names: dict[str, str], title: str, ylabel: str, percent: bool = False) -> Figure:
    """The training metrics ``names`` ({key: label}) as lines over steps, each with its ``valid_`` points."""
    figure, (axes,) = new_figure()
    _draw_curves(axes, log, names, percent)
    axes.set(title=title, xlabel="step", ylabel=ylabel)
    return figure


def _draw_curves(axes: Any, log: TrainingLog, names: dict[str, str], percent: bool) -> None:
    scale = 100.0 if percent else 1.0
    for index, (name, label) in enumerate(names.items()):
        colour = COLOURS[index % len(COLOURS)]
        steps, values = log.series(name)
        if steps:
            axes.plot(steps, np.asarray(values) * scale, color=colour, label=label,
                      marker="." if len(steps) < 40 else None)
        steps, values = log.series(f"valid_{name}")
        if steps:
            axes.plot(steps, np.asarray(values) * scale, color=colour, linestyle="none", marker="o",
                      markeredgecolor="black", label=f"valid {label}")
    if percent:
        axes.yaxis.set_major_formatter(PercentFormatter())
    axes.grid(alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")


def task_curves(log: TrainingLog, title: str) -> Figure:
    """A fine-tuning run: loss on the left; the training accuracy and the dev metrics on the right."""
    figure, (loss_axes, metric_axes) = new_figure(columns=2)
    _draw_curves(loss_axes, log, {"loss": "loss"}, percent=False)
    loss_axes.set(title="loss", xlabel="step")
    dev = sorted({name[len("valid_"):] for line in log.lines for name in line
                  if name.startswith("valid_") and name != "valid_loss" and name[len("valid_"):] not in _TASK_COUNTS})
    scores = {name: name.replace("_", " ") for name in dev}
    # beside SQuAD's percents or a regression's squared error the training accuracy (a fraction) would be a flat line
    fractions = all(max(log.series(f"valid_{name}")[1], default=0.0) <= 1.0 for name in dev)
    _draw_curves(metric_axes, log, ({"acc": "train acc"} if fractions else {}) | scores, percent=False)
    metric_axes.set(title="training accuracy and dev metrics" if fractions else "dev metrics", xlabel="step")
    figure.suptitle(title)
    return figure


def confusion(labels: list[str], matrix: list[list[int]], title: str) -> Figure:
    """Counts of gold (rows) × predicted (columns); colour is the share of the gold row."""
    counts = np.asarray(matrix, dtype=np.int64)
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    figure, (axes,) = new_figure()
    image = axes.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    ticks = range(len(labels))
    small = len(labels) <= 20
    axes.set_xticks(ticks, labels if small else [], rotation=45 if len(labels) > 4 else 0, ha="right"
                    if len(labels) > 4 else "center", fontsize="small")
    axes.set_yticks(ticks, labels if small else [], fontsize="small")
    axes.set(xlabel="predicted", ylabel="gold", title=title)
    if small:
        for (row, column), count in np.ndenumerate(counts):
            axes.text(column, row, f"{count:,}", ha="center", va="center", fontsize="small",
                      color="white" if shares[row, column] > 0.5 else "black")
    figure.colorbar(image, ax=axes, label="share of the gold label", format=PercentFormatter(1.0))
    return figure


def evaluate_bars(metrics: dict[str, Any]) -> Figure:
    """evaluate's accuracies: MLM overall and by what the input held at the position, and NSP."""
    labels = {"mask": "MLM at [MASK]", "random": "MLM at a random token", "keep": "MLM at the kept token"}
    rows = [("MLM", metrics["mlm_acc"])]
    rows += [(labels.get(kind, kind), values["mlm_acc"]) for kind, values in (metrics.get("by_kind") or {}).items()
             if values.get("mlm_acc") is not None]
    if "nsp_acc" in metrics:  # not with pretrain.nsp false
        rows.append(("NSP", metrics["nsp_acc"]))
    figure, (axes,) = new_figure()
    names, values = [name for name, _ in rows][::-1], [100.0 * value for _, value in rows][::-1]
    bars = axes.barh(names, values, color=[COLOURS[1]] + [COLOURS[0]] * (len(rows) - 1))
    axes.bar_label(bars, labels=[f"{value:.2f}%" for value in values], padding=3, fontsize="small")
    axes.set_xlim(0, 110)
    axes.xaxis.set_major_formatter(PercentFormatter())
    step = f"step {metrics['step']:,}, " if metrics.get("step") is not None else ""
    nsp = f", NSP loss {metrics['nsp_loss']:.3f}" if "nsp_loss" in metrics else ""
    axes.set(title=f"evaluate ({step}{metrics['pairs']:,} valid pairs): MLM perplexity {metrics['perplexity']:,.2f}"
                   f"{nsp}", xlabel="accuracy")
    axes.grid(axis="x", alpha=0.3)
    return figure


def pair_lengths(stats: PairStats) -> Figure:
    """Pairs by length in tokens ([CLS] A [SEP] B [SEP]), as a share of each split."""
    figure, (axes,) = new_figure()
    for index, (split, counts) in enumerate(stats.lengths.items()):
        colour = COLOURS[index % len(COLOURS)]
        total = int(counts.sum())
        if total:
            lengths = np.arange(len(counts))
            axes.step(lengths, 100.0 * counts / total, where="mid", color=colour,
                      label=f"{split}: {total:,} pairs, mean {float((lengths * counts).sum()) / total:.1f} tokens")
    axes.yaxis.set_major_formatter(PercentFormatter())
    axes.set(title="pairs by length", xlabel="tokens per pair", ylabel="share of the split's pairs")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def mask_kinds(stats: PairStats) -> Figure:
    """What each masked position holds in the input ([MASK], a random token, the original one), per split."""
    figure, (axes,) = new_figure()
    kinds = ["mask", "random", "keep"]
    width = 0.8 / max(len(stats.kinds), 1)
    for index, (split, counts) in enumerate(stats.kinds.items()):
        colour = COLOURS[index % len(COLOURS)]
        total = max(sum(counts.values()), 1)
        shares = [100.0 * counts.get(kind, 0) / total for kind in kinds]
        bars = axes.bar(np.arange(len(kinds)) + index * width, shares, width, color=colour,
                        label=f"{split}: {total:,} masked positions")
        axes.bar_label(bars, labels=[f"{share:.1f}%" for share in shares], padding=2, fontsize="small")
    axes.set_xticks(np.arange(len(kinds)) + width * (len(stats.kinds) - 1) / 2, ["[MASK]", "random token", "kept"])
    axes.yaxis.set_major_formatter(PercentFormatter())
    axes.set_ylim(0, 100)
    axes.set(title="masked positions by what the input holds (BERT's rule: 80% / 10% / 10%)",
             ylabel="share of masked positions")
    axes.legend(fontsize="small")
    return figure


def fertility(stats: Fertility, unk_rate: float | None) -> Figure:
    """Words by the number of WordPieces they took (the last bar gathers the longer ones)."""
    most = 10
    counts = stats.words_by_pieces[1:most + 1].astype(np.float64)
    counts = np.pad(counts, (0, most - len(counts)))
    counts[-1] += stats.words_by_pieces[most + 1:].sum()
    shares = 100.0 * counts / max(stats.words, 1)
    figure, (axes,) = new_figure()
    bars = axes.bar([str(k) for k in range(1, most)] + [f"{most}+"], shares, color=COLOURS[2])
    axes.bar_label(bars, labels=[f"{share:.1f}%" if share >= 0.05 else "" for share in shares], padding=2,
                   fontsize="small")
    axes.yaxis.set_major_formatter(PercentFormatter())
    axes.set(title=f"vocabulary fertility: {stats.mean:.3f} WordPieces per word", xlabel="WordPieces in the word",
             ylabel="share of words")
    unk = f"\n[UNK]: {100 * unk_rate:.2f}% of all tokens" if unk_rate is not None else ""
    axes.text(0.98, 0.95, f"{stats.words:,} words in {stats.sentences:,} of {stats.of_sentences:,} sentences{unk}",
              transform=axes.transAxes, ha="right", va="top", fontsize="small")
    axes.grid(axis="y", alpha=0.3)
    return figure
