"""Fine-tuning: a pre-trained BERT taught one task, on the one trainer.

* `tasktypes` — what a task type provides and the table of them by name; `classify`, `tag`, `qa` — the
  types, each reading its files into examples, examples into features, outputs back into predictions;
* `features` and `batches` — features as flat arrays, and micro-batches of them as padded tensors;
* `objectives` (the loss of each model kind) and `evaluation` (a split's predictions and metrics);
* `training` — one task's run and the model directory it leaves.

The task type modules and `features` import no torch: the config loader reads the table of types.
"""
