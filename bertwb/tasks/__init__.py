"""Training tasks: what is learned, as objectives the one trainer runs, and what surrounds a run.

* :mod:`bertwb.tasks.pretraining` — masked-LM + next-sentence prediction on the pairs.

A task module owns its objective (loss and metrics, :class:`bertwb.train.objective.Objective`), builds
its model and data for the trainer, and writes what its stage keeps.
"""
