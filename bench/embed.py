"""Embedding throughput of the bundled all-MiniLM-L6-v2: the numpy forward pass (the default, no
PyTorch) against sentence-transformers on PyTorch (the optional `torch` extra), per call size.

Each series embeds the same texts in calls of `size` texts and reports texts per second; the
ratio says how much faster PyTorch is at that size. Both run on every core BLAS and PyTorch find.
Also the one-off cost of loading each runtime, and how busy the rest of the machine was.

    python bench/embed.py [--texts 512]    # bench/results/embed.md, embed.json, embed_throughput.png
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS_DIR, LoadMonitor, env_line, environment, md_table, pyplot  # noqa: E402

SIZES = (1, 4, 16, 64, 256)
WORDS = ("the deploy key rotates every monday after the release review and the team agreed to cut two "
         "projects from the roadmap because fix timeout bug in session refresh handler alice prefers tabs "
         "over spaces memory fidelity decays along a power law recall reinforces what is used lunch with "
         "bob moved to thursday tokenizer pull request merged database index rebuilt overnight").split()


def corpus(n: int, seed: int = 7) -> list[str]:
    """Sentences of 5 to 60 words: the spread of lengths memories and queries have."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60))) for _ in range(n)]


def throughput(encode, texts: list[str], size: int, budget_texts: int) -> float:
    """Texts per second embedding `texts` in calls of `size` (at most budget_texts texts in all)."""
    chosen = texts[: max(size, min(len(texts), budget_texts))]
    encode(chosen[:size])  # warm caches and thread pools
    start = time.perf_counter()
    for i in range(0, len(chosen), size):
        encode(chosen[i:i + size])
    return len(chosen) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=512)
    args = parser.parse_args()
    from cerememory.embed.local import _bundled_model_path
    from cerememory.embed.minilm import MiniLM

    texts = corpus(args.texts)
    path = Path(_bundled_model_path())
    load = LoadMonitor()
    t0 = time.perf_counter()
    numpy_model = MiniLM(path)
    numpy_load = time.perf_counter() - t0
    torch_model = None
    torch_load = float("nan")
    torch_version = "not installed"
    try:
        t0 = time.perf_counter()
        import torch
        from sentence_transformers import SentenceTransformer

        torch_model = SentenceTransformer(str(path), device="cpu")
        torch_load = time.perf_counter() - t0
        torch_version = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    except ImportError:
        pass

    def numpy_encode(batch: list[str]) -> np.ndarray:
        return numpy_model.encode(batch, batch_size=64)

    def torch_encode(batch: list[str]) -> np.ndarray:
        assert torch_model is not None
        return torch_model.encode(batch, batch_size=64, show_progress_bar=False, normalize_embeddings=True)

    rows, series = [], {"numpy": [], "torch": []}
    for size in SIZES:
        budget = 64 if size == 1 else args.texts  # one text a call is slow: fewer calls
        fast = throughput(numpy_encode, texts, size, budget)
        slow = throughput(torch_encode, texts, size, budget) if torch_model is not None else float("nan")
        series["numpy"].append(fast)
        series["torch"].append(slow)
        rows.append([size, fast, slow, slow / fast])
        print(f"size {size}: numpy {fast:.1f}/s, torch {slow:.1f}/s", file=sys.stderr)
    others = load.others_cores()
    if torch_model is not None:
        a = numpy_encode(texts[:64])
        b = torch_encode(texts[:64])
        cosine_min = float(np.min(np.sum(a * b, axis=1)))
    else:
        cosine_min = float("nan")

    info = environment()
    result = {"sizes": list(SIZES), "texts": args.texts, "numpy_texts_per_s": series["numpy"],
              "torch_texts_per_s": series["torch"], "numpy_load_s": numpy_load, "torch_load_s": torch_load,
              "torch": torch_version, "min_cosine_numpy_vs_torch": cosine_min,
              "other_processes_cores": others, "environment": info}
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "embed.json").write_text(json.dumps(result, indent=2) + "\n")

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(SIZES, series["numpy"], "o-", label="numpy (default)")
    if torch_model is not None:
        ax.plot(SIZES, series["torch"], "s-", label="PyTorch (torch extra)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("texts per call")
    ax.set_ylabel("texts embedded per second")
    ax.set_title("all-MiniLM-L6-v2 throughput")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "embed_throughput.png", dpi=110)

    md = ["# Embedding throughput: numpy against PyTorch", "",
          f"Environment: {env_line(info)}; {torch_version}. Other processes kept {others:.1f} of "
          f"{os.cpu_count()} cores busy on average while this ran, so absolute rates are low; the "
          "ratios compare the two runtimes under the same load.", "",
          f"{args.texts} texts of 5 to 60 words, embedded in calls of the given size (64 texts for "
          "size 1). Ratio > 1: PyTorch is faster.", "",
          md_table(["texts per call", "numpy texts/s", "PyTorch texts/s", "ratio PyTorch/numpy"], rows), "",
          "With the cores shared, OpenBLAS's threads (numpy) and PyTorch's both lose time waiting for a "
          "core on small calls; `OPENBLAS_NUM_THREADS=1` made single-text numpy calls about three times "
          "faster under such load here.", "",
          f"Loading, once per process: numpy {numpy_load:.2f} s, PyTorch with sentence-transformers "
          f"{torch_load:.2f} s. Smallest cosine between the two runtimes' vectors for 64 texts: "
          f"{cosine_min:.6f}.", "",
          "![throughput](embed_throughput.png)", "",
          "Reproduce: `python bench/embed.py` (PyTorch columns need the `torch` extra).", ""]
    (RESULTS_DIR / "embed.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
