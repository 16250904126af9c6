"""Data between the stages and the trainer: input text files, the pairs' on-disk format, masking, batching, tokenizers.

Nothing here knows about a stage or a model: :mod:`bertwb.data.text_files` reads one input file
into documents and :mod:`bertwb.data.sentences` cleans and splits their text for the ingest stage,
:mod:`bertwb.data.corpus_pieces` cuts large files into byte ranges for its worker processes,
the pairs stage writes what :mod:`bertwb.data.pairs` reads, :mod:`bertwb.data.masking` is the one
masking function static and dynamic masks share, :mod:`bertwb.data.batching` turns any examples of
known lengths into length-bucketed, sharded, resumable batches, and :mod:`bertwb.data.tokenizer`
builds, loads and writes BERT tokenizers.
"""
