"""``bert-base`` and ``bert-large``: pre-training as Devlin et al. (2019) did it, the values of
pipelines/bert-base.yaml (a test keeps the two the same), for a BooksCorpus-and-Wikipedia-sized corpus on GPUs.
"""

from __future__ import annotations

from bertwb.recipes.base import Recipe

_PHASES = {
    "seq128": {"steps": 900000, "warmup_steps": 10000, "max_seq_length": 128, "max_predictions_per_seq": 20},
    "seq512": {"steps": 100000, "lr": 1e-5, "warmup_steps": 0, "warmup_fraction": 0.0, "max_seq_length": 512,
               "max_predictions_per_seq": 80},
}


def paper_recipe(size: str) -> Recipe:
    """The paper's recipe for the ``base`` or ``large`` preset."""
    recipe = Recipe([
        "# Section 3.1 and appendix A.2 of the paper, for both sizes: a 30,522-piece uncased WordPiece vocabulary,",
        "# 15% masking (80/10/10), MLM + NSP, batches of 256, Adam lr 1e-4 (beta2 0.999, weight decay 0.01),",
        "# 10,000 warm-up steps then linear decay, dropout 0.1, 1,000,000 steps: 90% at 128 tokens, the last",
        "# 10% at 512. The two lengths are two phases; the second starts from the first one's weights at the",
        "# rate the single schedule has reached by then (1e-4 x 100k / 990k = 1e-5), decaying to 0.",
        "#   bertwb run --until pairs                              # data, on any machine",
        "#   torchrun --nproc-per-node 8 -m bertwb pretrain        # the model, on GPUs",
    ])
    recipe.set("ingest.valid_fraction", 0.001, "a corpus of billions of words needs only a small share held out")
    recipe.set("vocab.vocab_size", 30522, "BERT's uncased vocabulary size")
    recipe.set("vocab.train_sentences", 10000000, "WordPiece trains on a 10M-sentence sample; all are tokenised")
    recipe.set("pairs.masking", "dynamic", "masks drawn anew each epoch from one stored copy (RoBERTa)")
    recipe.set("pairs.dupe_factor", 1, "one copy of the pairs: static masks x10 would take ten times the disk")
    recipe.set("model.preset", size, "L12 H768 A12, 110M parameters" if size == "base" else
               "L24 H1024 A16, 340M parameters")
    recipe.set("model.hidden_dropout", 0.1, "the paper's dropout")
    recipe.set("model.attention_dropout", 0.1, "the paper's dropout")
    recipe.set("pretrain.batch_size", 256, "the paper's 256 sequences a step, over all GPUs")
    recipe.set("pretrain.lr", 1e-4, "the paper's peak rate")
    recipe.set("pretrain.device", "cuda", "GPUs: 16 TPU chips took 4 days for base")
    recipe.set("pretrain.log_every", 100)
    recipe.set("pretrain.eval_every", 10000)
    recipe.set("pretrain.eval_batches", 100)
    recipe.set("pretrain.checkpoint_every", 10000)
    recipe.set("pretrain.keep_checkpoints", 3)
    recipe.set("pretrain.phases", {name: dict(values) for name, values in _PHASES.items()},
               "90% of the steps at 128 tokens, then 10% at 512 to learn the long positions")
    recipe.set("evaluate.batch_size", 256)
    return recipe
