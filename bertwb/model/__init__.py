"""The model: BERT in plain PyTorch and everything that moves it between folders and formats.

* :mod:`bertwb.model.bert` — the config, presets, encoder and pre-training model;
* :mod:`bertwb.model.heads` — the fine-tuning models (sequence, token, question answering);
* :mod:`bertwb.model.hf_names` — Hugging Face parameter names and ``config.json`` fields;
* :mod:`bertwb.model.modeldir` — model directories: open one, load its weights in either layout, save one;
* :mod:`bertwb.model.hf` — ``bertwb export`` and ``bertwb import-hf``.

Import the submodules directly; this package imports nothing, so torch-free code can use its siblings.
"""
