"""Pre-training BERT, one module per job, so each reads alone and a light caller loads only what it needs:
`objective` (the MLM + NSP loss and metrics the trainer runs), `plan` (what one run or phase trains; no torch),
`model` (a new preset, or ``model.init_from`` with new heads), `run` (`train`: one run on every rank and the
stage's files), `evaluation` (the same losses over held-out pairs, by replacement kind) and `flops` (a pair's
matmul FLOPs, for budgets and benchmarks; no torch). Nothing is re-exported here: an import names the module
that owns what it takes.
"""
