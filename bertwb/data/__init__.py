"""Data between the stages and the trainer: input files, the pairs' on-disk format, masking, batching, tokenizers.

Nothing here knows a stage or a model. What the data stages use (reading files, sentences, tokenizers,
masking, building and storing pairs) never imports torch; only `batching` and `pair_batches`, which serve
the trainer, do. Import the submodules directly: this package imports nothing.
"""
