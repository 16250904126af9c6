"""The feature-based use of a model: ``bertwb embed`` and ``bertwb similar`` (:mod:`bertwb.embed.run`, one public
function each). The parts: `pooling` (settings as data, sentence-transformers' files), `source` (which model),
`inputs`, `encoder` (the only one with torch), `writing` (files), `store` (tables), `search` (exact cosine).
Nothing is imported here, so ``bertwb status`` and the Hugging Face export reach a part without the others.
"""
