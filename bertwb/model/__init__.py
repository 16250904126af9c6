"""The model: BERT in plain PyTorch (`bert`, and the task models in `heads`) and what moves it between
folders and formats (Hugging Face names, model directories, export and import).

Import the submodules directly; this package imports nothing, so torch-free code can use its siblings.
"""
