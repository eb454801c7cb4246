"""Draw docs/decay.png: predicted fidelity over a year for every store, neutral and intense."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from cerememory.dynamics import decay  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "decay.png"


def main() -> None:
    t = np.logspace(np.log10(60), np.log10(365 * decay.DAY), 400)
    fig, ax = plt.subplots(figsize=(9, 5))
    for store, p in decay.DEFAULT_PARAMS.items():
        line, = ax.plot(t / decay.DAY, decay.fidelity(1.0, t, p.stability, p.exponent, 0.0), label=f"{store.value}")
        ax.plot(t / decay.DAY, decay.fidelity(1.0, t, p.stability, p.exponent, 1.0), linestyle="--",
                color=line.get_color())
        ax.axhline(p.prune, color=line.get_color(), linewidth=0.5, linestyle=":")
    for days, label in ((1 / 24, "1 h"), (1, "1 d"), (7, "7 d"), (30, "30 d"), (365, "365 d")):
        ax.axvline(days, color="grey", linewidth=0.4)
        ax.text(days, 1.02, label, ha="center", fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("days since the memory was stored or last recalled")
    ax.set_ylabel("fidelity")
    ax.set_title("Forgetting curves: solid neutral, dashed intense (intensity 1), dotted prune thresholds")
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)


if __name__ == "__main__":
    main()
