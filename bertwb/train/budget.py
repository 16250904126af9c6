"""A run's time budget (``max_hours``): the training time spent, carried across resumes, and when to stop.

Training time is the time inside the step loop (steps, validation, checkpoints), summed over the sessions
of a run: a checkpoint saves it, so a resume goes on from it and time lost after the last checkpoint is
not counted twice. Rank 0's clock alone decides; the trainer shares its readings with every rank in one
collective, so all ranks see the same progress and learning rate and stop at the same step. The steps
that fit in a budget depend on the machine and its load: a timed run is not repeatable step for step.
"""

from __future__ import annotations

import time
from typing import Any

clock = time.monotonic  # the one place a budget reads time (a test puts a fake clock here)


class TimeBudget:
    """``hours`` of training (0: none): time spent, the time a step takes, and whether the next one fits."""

    def __init__(self, hours: float):
        self.seconds = hours * 3600.0
        self.spent_before = 0.0  # training seconds of the sessions before this one (from the checkpoint)
        self.step_seconds = 0.0  # a step's time, validation and checkpoints included (this session's mean)
        self.started: float | None = None  # the clock when this session's steps began
        self.steps = 0  # steps done in this session

    @property
    def enabled(self) -> bool:
        return self.seconds > 0

    def start(self) -> None:
        self.started, self.steps = clock(), 0

    def reading(self) -> tuple[float, float]:
        """(seconds spent, seconds a step takes) by this process's clock; rank 0's is the one that counts."""
        if self.started is None:
            return self.spent_before, self.step_seconds
        session = clock() - self.started
        per_step = session / self.steps if self.steps else self.step_seconds
        return self.spent_before + session, per_step

    def step_done(self) -> None:
        self.steps += 1

    def fits(self, spent: float, per_step: float) -> bool:
        """Whether another step ends within the budget, given the agreed ``spent`` and ``per_step``."""
        return spent + per_step <= self.seconds

    def state_dict(self) -> dict[str, Any]:
        spent, per_step = self.reading()
        return {"spent_seconds": spent, "step_seconds": per_step}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.spent_before = float(state.get("spent_seconds", 0.0))
        self.step_seconds = float(state.get("step_seconds", 0.0))
        self.started = None
