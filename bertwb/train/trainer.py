"""The one trainer of every training stage: the step loop and everything around it, for any objective.

A step: the processes agree on the normalising counts and a stop request (one small collective), every
micro-batch runs forward under autocast and backward (``no_sync`` but the last), then clipping, the schedule
(linear warm-up and decay) and the optimizer; the loss is the objective's (:mod:`bertwb.train.objective`).
Around it: logging, validation, best weights, early stopping, a time budget (:mod:`bertwb.train.budget`),
checkpoints, SIGINT/SIGTERM. `fit` resumes to bit-identical weights on CPU, never re-reading seen data.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, is_dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import safetensors.torch
import torch

from bertwb import faults, ui
from bertwb.artifacts import METRICS_FILE, read_metrics
from bertwb.config import TrainingConfig
from bertwb.data.batching import Batches
from bertwb.fast.linear import onednn_preferred
from bertwb.memory import keep_freed_memory
from bertwb.train import checkpoint, tensorboard
from bertwb.train.budget import TimeBudget
from bertwb.train.device import Precision, choose_precision, model_shapes
from bertwb.train.distributed import Dist
from bertwb.train.objective import Objective, Validation
from bertwb.train.optim import build_optimizer, schedule_for, set_rates
from bertwb.train.runs import checkpoint_path
from bertwb.workspace import building, open_append, write_text_atomic

BEST_DIR = "best"


class Trainer:
    """Trains ``model`` on ``data`` for ``objective`` (see the module docstring).

    ``settings`` is the stage's training section; ``name`` labels the progress view; ``state`` is what
    every checkpoint's state.json carries besides the step (the config, a classifier's labels).
    Without a ``run_dir`` nothing is written (benchmarks, tests of single steps). ``max_hours`` (0: none)
    ends the run at a time budget, ``total_steps`` then a cap, and the schedule follows the budget.
    """

    def __init__(self, settings: TrainingConfig, objective: Objective, model: torch.nn.Module, data: Batches, *,
                 valid: Batches | None = None, dist: Dist | None = None, run_dir: Path | None = None,
                 total_steps: int | None = None, name: str = "train", state: dict[str, Any] | None = None,
                 keep_best: bool = False, patience: int = 0, max_hours: float = 0.0):
        self.settings, self.objective, self.data, self.valid = settings, objective, data, valid
        self.dist = dist or Dist(device=settings.device)
        self.device = self.dist.device
        self.run_dir, self.name, self.state = run_dir, name, state or {}
        self.total_steps = total_steps or settings.steps_wanted(data.steps_per_epoch)
        self.keep_best, self.patience = keep_best, patience
        self.model = model.to(self.device)
        self.precision = self._agree_on_precision()
        self.optimizer = build_optimizer(settings, self.model)
        self.budget = TimeBudget(max_hours)
        self.time_spent = self.time_share = 0.0  # seconds and share of the budget spent, agreed after the last step
        self.stopped_at_budget: int | None = None
        self.schedule = schedule_for(settings, self.total_steps, timed=self.budget.enabled)
        self.stats = (*objective.sums, *objective.counts, "n_tokens")
        self.window = torch.zeros(len(self.stats), dtype=torch.float64, device=self.device)
        self.best: dict[str, Any] = {}  # {"value", "step"} of the best validation so far
        self.stale_evaluations = 0  # validations since the best one
        self.stopped_early_at: int | None = None
        self.resumed_from: dict[str, Any] | None = None  # the checkpoint `fit` resumed from
        self.last: dict[str, Any] = {}
        self.events: tensorboard.EventWriter | None = None  # while `fit` runs, on rank 0, with the extra
        self.lr = self.encoder_lr = 0.0  # the last step's: the schedule's, and the encoder's (0 under heads_first)
        torch.manual_seed(settings.seed + self.dist.rank)  # dropout differs per rank; the model's init does not
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        else:
            keep_freed_memory()
        self.step_model: Any = self.model
        if self.dist.enabled:
            self.step_model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if settings.compile:
            self.step_model = torch.compile(self.step_model, dynamic=True)

    # --- the run ------------------------------------------------------------------------------------

    def fit(self) -> dict[str, Any]:
        """Train from the newest checkpoint (or from scratch) to ``total_steps``; return the last metrics."""
        self.start_step = self._resume()
        if self.budget.enabled and not self._agree_on_time():  # resumed with no time left: nothing to train
            self.stopped_at_budget = self.start_step
        elif self.resumed_from and self.dist.rank == 0:
            ui.stage_line(self.name, f"resuming from {self.resumed_from['path']} "
                          f"(step {self.start_step:,} of {self.total_steps:,})")
        if self.dist.rank == 0:
            ui.detail(f"{self.name}: {self._setup()}")
        events = tensorboard.open_events(self.run_dir, self.start_step) if self.dist.rank == 0 else nullcontext()
        with _stop_on_signals() as stopper, self._view() as view, events as self.events:
            self.model.train()
            self.clock = self.started = time.perf_counter()
            self.budget.start()
            for step in range(self.start_step, self.total_steps if self.stopped_at_budget is None else 0):
                micro, totals, stop = self._prepare(step, stopper.requested)
                if stop:
                    self.checkpoint(step)
                    view.note(f"interrupted: checkpoint at step {step:,} written; the same command resumes from it")
                    raise KeyboardInterrupt
                self._step(step, micro, totals)
                faults.point("step")
                if self._after_step(step + 1, view):
                    break
        if not self.last or self.last.get("step") != self.done:  # nothing left to train: final metrics
            self.last = {"step": self.done, **(self.evaluate() if self.valid is not None else {})}
            if self.run_dir is not None and not checkpoint_path(self.run_dir, self.done).exists():
                self.checkpoint(self.done)
        return self.last

    @property
    def done(self) -> int:
        """The step training ends at: the requested total, or where early stopping or the time budget ended it."""
        for stopped in (self.stopped_early_at, self.stopped_at_budget):
            if stopped is not None:
                return stopped
        return self.total_steps

    def train_step(self, step: int) -> None:
        """One optimizer step on the global batch of ``step`` (no logging, checkpoints or signals)."""
        micro, totals, _ = self._prepare(step, False)
        self._step(step, micro, totals)

    def _prepare(self, step: int, stop_requested: bool) -> tuple[list[Any], list[float], bool]:
        """This rank's micro-batches of ``step``, the step's global counts, and whether any rank must stop."""
        epoch, batch_in_epoch = divmod(step, self.data.steps_per_epoch)
        micro = self.data.micro_batches(epoch, batch_in_epoch)
        local = [sum(column) for column in zip(*(self.objective.count(b) for b in micro), strict=True)] \
            if micro else [0.0] * len(self.objective.counts)
        *totals, stops = self.dist.sum_on_host([*local, float(stop_requested)])
        return micro, totals, stops > 0

    def _step(self, step: int, micro: list[Any], totals: list[float]) -> None:
        """Forward and backward every micro-batch of this rank, then one optimizer step."""
        world = self.dist.world_size
        for k, batch in enumerate(micro):
            batch = batch.to(self.device, non_blocking=True)
            last = k == len(micro) - 1
            sync = nullcontext() if last or not self.dist.enabled else self.step_model.no_sync()
            with sync:
                with self.precision.autocast():
                    out = self.objective.forward(self.step_model, batch)
                loss, sums = self.objective.loss(out, batch, totals)
                self._accumulate(self.window, sums, batch)
                del out  # a fast loss overwrites its inputs with their gradient in backward
                # DDP averages gradients over ranks, hence × world: the sum is the global batch's loss
                (loss * world).backward()
        if self.settings.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.max_grad_norm)
        progress = max(self.time_share, step / self.total_steps) if self.budget.enabled else None
        lr = self.schedule.lr(step, progress)
        heads_only = (step / self.total_steps if progress is None else progress) < self.settings.heads_first
        set_rates(self.optimizer, lr, heads_only)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.lr, self.encoder_lr = lr, 0.0 if heads_only else lr

    def _accumulate(self, window: torch.Tensor, sums: torch.Tensor, batch: Any) -> None:
        """Add one micro-batch's statistics to ``window``, on the device, without waiting for it.

        The counts are known on the host; ``torch.tensor(..., device="cuda")`` would copy them with a
        stream synchronisation, making the host wait for the GPU every step, so they go over as one
        non-blocking copy instead.
        """
        with torch.no_grad():
            n_sums = len(self.objective.sums)
            window[:n_sums] += sums
            counts = torch.tensor([*self.objective.count(batch), batch.n_tokens], dtype=torch.float64)
            window[n_sums:] += counts.to(window.device, non_blocking=True)

    def _after_step(self, done: int, view: Any) -> bool:
        """Validation, logging and checkpoints after step ``done``; True when training should stop early."""
        if self.budget.enabled:
            self.budget.step_done()
            if not self._agree_on_time():
                self.stopped_at_budget = done
                view.note(f"time budget of {self.budget.seconds / 3600:g} h reached: stopping at step {done:,}, "
                          "the learning rate at its end; raise max_hours to train on")
        at_end = done == self.total_steps or self.stopped_at_budget == done
        per_epoch = self.data.steps_per_epoch
        evaluate = self.valid is not None and (
            at_end or (done % self.settings.eval_every == 0 if self.settings.eval_every else done % per_epoch == 0))
        valid_metrics = self.evaluate() if evaluate else {}
        stop = bool(valid_metrics) and self._track_best(done, valid_metrics)
        if evaluate or at_end or stop or done % self.settings.log_every == 0:
            self._log(done, view, valid_metrics)
        if stop:
            self.stopped_early_at = done
            view.note(f"stopping early at step {done:,}: no better {self.objective.main_metric} in "
                      f"{self.patience} validations (best at step {self.best['step']:,})")
        if self.run_dir is not None and (at_end or stop or done % self.settings.checkpoint_every == 0):
            self.checkpoint(done)
        return stop or self.stopped_at_budget == done

    def _agree_on_time(self) -> bool:
        """Rank 0's reading of the budget, on every rank: the schedule's progress; True while a step fits."""
        reading = self.budget.reading() if self.dist.rank == 0 else (0.0, 0.0)
        spent, per_step = self.dist.sum_on_host(list(reading))
        self.time_spent, self.time_share = spent, min(1.0, spent / self.budget.seconds)
        return self.budget.fits(spent, per_step)

    # --- metrics and validation ---------------------------------------------------------------------

    def window_totals(self, window: torch.Tensor | None = None) -> dict[str, float]:
        """The summed statistics of ``window`` (default: the open logging window) over every rank."""
        totals = self.dist.all_reduce((self.window if window is None else window).clone()).tolist()
        return dict(zip(self.stats, totals, strict=True))

    def _log(self, done: int, view: Any, valid_metrics: dict[str, float]) -> None:
        """Reduce the window over ranks; rank 0 appends a metrics.jsonl line and updates the view."""
        totals = self.window_totals()
        self.window.zero_()
        now = time.perf_counter()
        seconds = max(now - self.clock, 1e-9)
        if self.budget.enabled:
            # the hours or the step cap (a small corpus's epochs), whichever ends the run first, is what the
            # ETA and the bar follow; both read by the budget's clock
            spent, step_seconds = self.budget.reading()
            to_cap, to_hours = step_seconds * (self.total_steps - done), max(0.0, self.budget.seconds - spent)
            eta, by_steps = min(to_cap, to_hours), to_cap < to_hours
        else:
            eta, by_steps = (now - self.started) / max(done - self.start_step, 1) * (self.total_steps - done), True
        metrics = {"step": done, **self.objective.rates(totals), "lr": self.lr,
                   **({"encoder_lr": self.encoder_lr} if self.settings.heads_first else {}),
                   "tokens_per_s": round(totals["n_tokens"] / seconds, 1), "eta_s": round(eta, 1),
                   "epoch": round(done / self.data.steps_per_epoch, 4), **valid_metrics}
        self.clock = now
        self.last = metrics
        if self.dist.rank == 0 and self.run_dir is not None:
            with open_append(self.run_dir / METRICS_FILE) as handle:
                handle.write(json.dumps(metrics) + "\n")
            if self.events is not None:
                self.events.write(metrics)
        view.update(done, {**metrics, "budget_share": self.time_share, "by_steps": by_steps}
                    if self.budget.enabled else metrics)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """The objective's validation metrics (``valid_``-prefixed), on every rank; the model stays in train mode."""
        self.model.eval()
        try:
            return self.objective.evaluate(Validation(self.model, self.valid, self.precision, self.dist,
                                                      self.validation_totals))
        finally:
            self.model.train()

    @torch.no_grad()
    def validation_totals(self) -> dict[str, float]:
        """The objective's statistics summed over (the first ``eval_batches`` batches of) the valid split."""
        sums = torch.zeros(len(self.stats), dtype=torch.float64, device=self.device)
        n_batches = self.valid.steps_per_epoch
        if self.settings.eval_batches:
            n_batches = min(n_batches, self.settings.eval_batches)
        for index in range(n_batches):
            micro = self.valid.micro_batches(0, index)
            totals = [sum(column) for column in zip(*(self.objective.count(b) for b in micro), strict=True)]
            for batch in micro:
                batch = batch.to(self.device, non_blocking=True)
                with self.precision.autocast():
                    out = self.objective.forward(self.model, batch)
                self._accumulate(sums, self.objective.loss(out, batch, totals)[1], batch)
        return self.window_totals(sums)

    def _track_best(self, done: int, valid_metrics: dict[str, float]) -> bool:
        """Keep the best validation's weights (``keep_best``); True when ``patience`` has run out."""
        name = self.objective.main_metric
        if not (self.keep_best or self.patience) or name is None:
            return False
        value = valid_metrics[f"valid_{name}"]
        better = not self.best or (value > self.best["value"] if self.objective.higher_is_better
                                   else value < self.best["value"])
        if better:
            self.best, self.stale_evaluations = {"value": value, "step": done}, 0
            if self.keep_best and self.run_dir is not None and self.dist.rank == 0:
                self._save_best()
        else:
            self.stale_evaluations += 1
        return bool(self.patience) and self.stale_evaluations >= self.patience

    def _save_best(self) -> None:
        with building(self.run_dir / BEST_DIR, what="best") as tmp:
            safetensors.torch.save_model(self.model, str(tmp / "model.safetensors"))
            (tmp / "best.json").write_text(json.dumps({**self.best, "metric": self.objective.main_metric}) + "\n")

    # --- checkpoints ----------------------------------------------------------------------------------

    def checkpoint(self, step: int) -> Path:
        """Write checkpoint ``step`` of the run (collective: every rank calls it)."""
        steps_per_epoch = self.data.steps_per_epoch
        epoch, batch_in_epoch = divmod(step, steps_per_epoch)
        window = self.dist.all_reduce(self.window.clone()).cpu()  # the open window, as the next log sees it
        trainer = {"optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(), "window": window,
                   "best": dict(self.best), "stale_evaluations": self.stale_evaluations,
                   "stopped_early_at": self.stopped_early_at, "budget": self.budget.state_dict()}
        model_config = getattr(self.model, "config", None)
        state = {"epoch": epoch, "batch_in_epoch": batch_in_epoch, "steps_per_epoch": steps_per_epoch,
                 "model": asdict(model_config) if is_dataclass(model_config) else None, **self.state}
        return checkpoint.save(self.run_dir, step, self.model, self.dist, self.settings.keep_checkpoints, trainer,
                               state)

    def _agree_on_precision(self) -> Precision:
        """``settings.precision`` as `choose_precision` resolves it for this model, the same on every rank: bf16
        only where every process chose it (machines of a cluster may differ), rank 0 saying why with -v."""
        choice = choose_precision(self.settings.precision, self.device, *model_shapes(self.model),
                                  announce=self.dist.rank == 0)
        if not self.dist.enabled:
            return choice
        agreed = self.dist.sum_on_host([float(choice.bf16)])[0] == self.dist.world_size
        if agreed != choice.bf16:
            choice = replace(choice, bf16=False, why=f"{choice.why}, but not on every process")
            if self.dist.rank == 0:
                ui.detail(choice.line())
        return choice

    def _setup(self) -> str:
        """What this run computes on and how, in words (for -v): the device, precision, threads and the rest."""
        parts = [f"device {self.device}", "bf16 autocast" if self.precision.bf16 else "fp32",
                 f"{torch.get_num_threads()} CPU threads"]
        if self.objective.fast:
            parts.append("fast CPU paths" + ("" if self.precision.bf16 else
                                             f" (fp32 products: {'oneDNN' if onednn_preferred() else 'MKL'})"))
        if self.settings.compile:
            parts.append("torch.compile")
        if self.dist.enabled:
            parts.append(f"DDP over {self.dist.world_size} processes")
        return ", ".join(parts)

    def _resume(self) -> int:
        """Restore the newest checkpoint at or below ``total_steps``; the step to start from."""
        if self.run_dir is None:
            return 0
        resumed = checkpoint.resume(self.run_dir, self.total_steps, self.dist, self._restore)
        start = resumed["step"] if resumed else 0
        if self.dist.rank == 0:
            _trim_metrics(self.run_dir / METRICS_FILE, start)
            if not resumed:
                shutil.rmtree(self.run_dir / BEST_DIR, ignore_errors=True)
        self.resumed_from = resumed
        return start

    def _restore(self, path: Path) -> dict[str, Any]:
        trainer, state = checkpoint.load(path, self.model, self.dist)
        self.optimizer.load_state_dict(trainer["optimizer"])
        self.window.copy_(trainer["window"].to(self.device) if self.dist.rank == 0 else torch.zeros_like(self.window))
        self.best = dict(trainer.get("best") or {})
        self.stale_evaluations = trainer.get("stale_evaluations", 0)
        self.budget.load_state_dict(trainer.get("budget"))
        stopped = trainer.get("stopped_early_at")
        self.stopped_early_at = stopped if stopped is not None and stopped <= self.total_steps else None
        return state

    @contextmanager
    def _view(self) -> Iterator[Any]:
        """The live training view on rank 0; silence on the others."""
        if self.dist.rank != 0:
            yield _Silent()
            return
        with ui.training(self.name, self.total_steps, self.start_step, self.objective.progress,
                         self.budget.seconds / 3600) as view:
            yield view


class _Silent:
    def update(self, step: int, stats: dict[str, Any]) -> None:
        pass

    def note(self, message: str) -> None:
        pass


def _trim_metrics(path: Path, step: int) -> None:
    """Drop metric lines past ``step``: a resumed run logs them again. A line torn by a kill during its
    append is dropped too (`read_metrics` skips it), rather than stopping the resume."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        return
    kept = [line for line in read_metrics(path) if line["step"] <= step]
    write_text_atomic(path, "".join(json.dumps(line) + "\n" for line in kept))


# --- signals -------------------------------------------------------------------------------------------

class _Stopper:
    """Set by the first SIGINT/SIGTERM; a second SIGINT aborts at once (the last checkpoint stays)."""

    def __init__(self) -> None:
        self.requested = False
        self.first: int | None = None

    def handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT and self.first == signal.SIGINT:
            raise KeyboardInterrupt
        # torchrun answers a terminal's Ctrl-C with SIGTERM to its workers: one stop request, not two
        self.requested, self.first = True, self.first or signum


@contextmanager
def _stop_on_signals() -> Iterator[_Stopper]:
    """Turn Ctrl-C and SIGTERM into a stop request for the duration of training (main thread only)."""
    stopper = _Stopper()
    if threading.current_thread() is not threading.main_thread():
        yield stopper
        return
    previous = {sig: signal.signal(sig, stopper.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopper
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
