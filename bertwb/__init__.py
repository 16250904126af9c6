"""bertwb: a command-line workbench that turns a raw text corpus into a trained BERT."""

__version__ = "0.1.0"
