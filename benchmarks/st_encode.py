"""The sentence-transformers side of ``benchmarks/embed.py``: a published model's vectors as a user gets them
from the sentence-transformers docs, one process from start to file.

Usage: ``python benchmarks/st_encode.py MODEL TEXTS.txt OUT.npy [--batch-size 32]``

``SentenceTransformer(MODEL, device="cpu").encode(texts, batch_size=...)`` over the lines of TEXTS.txt (one
text per line), saved as a float32 matrix in input order. Prints one JSON line of phase timings at the end.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("texts")
    parser.add_argument("out")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    import numpy as np
    from sentence_transformers import SentenceTransformer

    with open(args.texts, encoding="utf-8") as handle:
        texts = [line.rstrip("\n") for line in handle if line.strip()]
    model = SentenceTransformer(args.model, device="cpu")
    loaded = time.perf_counter()
    vectors = model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)
    encoded = time.perf_counter()
    np.save(args.out, vectors.astype(np.float32))
    print(json.dumps({"load_s": round(loaded - started, 3), "encode_s": round(encoded - loaded, 3),
                      "texts": len(texts)}))


if __name__ == "__main__":
    main()
