"""Training, for every stage that trains: one loop, its pieces, and where its runs live.

* :mod:`bertwb.train.trainer` — `Trainer`: the step loop (accumulation, clipping, warm-up and
  decay), the evaluation cadence, metrics, checkpoints, resume and Ctrl-C, for any `Objective`;
* :mod:`bertwb.train.objective` — what a training task hands the trainer: its forward, loss and metrics;
* :mod:`bertwb.train.distributed` — one process or many under torchrun, and launching a training stage;
* :mod:`bertwb.train.checkpoint` — checkpoints with optimizer, schedule and RNG state, written atomically;
* :mod:`bertwb.train.optim` — AdamW or LAMB, and the learning-rate schedule;
* :mod:`bertwb.train.device` — which device and which precision;
* :mod:`bertwb.train.runs` — where runs and checkpoints live, without importing torch.

Import the submodules directly; this package imports nothing, so `runs` stays torch-free.
"""
