"""Training tasks: what is learned, as objectives the one trainer runs, and what serves them.

* :mod:`bertwb.tasks.pretraining` — masked-LM + next-sentence prediction on the pairs, one module per job;
* :mod:`bertwb.tasks.losses` — every task's loss, written once, which training, evaluation and tests call;
* :mod:`bertwb.tasks.finetune` — fine-tuning: the task types, their objectives, evaluation and a task's run;
* :mod:`bertwb.tasks.prediction` — a fine-tuned model's answers to new inputs (``bertwb predict``);
* `readers`, `metrics` and `squad_eval` — the files the fine-tuning types read and the metrics they report.
"""
