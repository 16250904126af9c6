"""Fine-tuning: a pre-trained BERT taught one task, on the one trainer.

`tasktypes` holds the `TaskType` protocol and `TASK_TYPES`, the table of types by name; `classify`, `tag` and
`qa` are the types (files into examples into features, outputs back into predictions); `features` and
`batches` hold features as flat arrays and micro-batches of them as padded tensors; `objectives` the objective
of each model kind (its loss: `bertwb.tasks.losses`); `evaluation` a split's predictions and metrics;
`training` one task's run and its model directory. Type modules and `features` import no torch.
"""
