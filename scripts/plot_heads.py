#!/usr/bin/env python3
"""Draws `tfm heads`' report: each head's importance and the pruning curve.

    /usr/bin/python3 scripts/plot_heads.py RUN/heads/heads.json

Writes heads.png beside the report: left, the loss change when each head alone is masked (layer x head,
numbers in the cells); middle, the normalized gradient score |dL/dxi| (Michel et al. 2019); right, the
validation loss as the least important heads are masked. Needs Debian's python3-matplotlib.
"""
import os
import sys

import tfm_plot


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    r = tfm_plot.load_json(path, "plot_heads.py")
    plt = tfm_plot.pyplot()

    delta = [l["loss_change_when_masked"] for l in r["layer"]]
    score = [l["normalized_score"] for l in r["layer"]]
    L, H = len(delta), len(delta[0])
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(12, 3.8), constrained_layout=True,
                                  gridspec_kw={"width_ratios": [1, 1, 1.3]})
    for ax, m, title, fmt in ((a, delta, "val loss change, head masked alone", "{:+.3f}"),
                              (b, score, "gradient score |dL/dξ| (per-layer l2 = 1)", "{:.2f}")):
        im = ax.imshow(m, cmap="viridis", aspect="auto")
        lo, hi = min(map(min, m)), max(map(max, m))
        for i in range(L):
            for j in range(H):
                bright = hi > lo and (m[i][j] - lo) / (hi - lo) > 0.6  # light cells of viridis: dark text
                ax.text(j, i, fmt.format(m[i][j]), ha="center", va="center", fontsize=8,
                        color="black" if bright else "white")
        ax.set_xticks(range(H))
        ax.set_yticks(range(L))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(title, fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.05)
    p = r["pruning"]
    c.plot([x["masked"] for x in p], [x["val_loss"] for x in p], "o-")
    c.axhline(r["val_loss"] + 0.05, color="gray", ls="--", lw=1, label="+0.05")
    c.set_xlabel(f"heads masked, least important first (of {L * H})")
    c.set_ylabel("val loss")
    c.set_title("pruning curve", fontsize=10)
    c.legend(fontsize=9)
    fig.suptitle(f"{r['run']}: {r['batches']} validation batches, val loss {r['val_loss']:.4f} with every head",
                 fontsize=11)
    out = os.path.join(os.path.dirname(os.path.abspath(path)), "heads.png")
    tfm_plot.save_figure(fig, out, "plot_heads.py", 110)
    print(out)


if __name__ == "__main__":
    main()
