#!/usr/bin/env python3
"""Draws attention heat maps from `tfm attention`'s report.

    /usr/bin/python3 scripts/plot_attention.py OUT_DIR/attention.json [--out OUT_DIR]

Writes, for every layer L, OUT_DIR/attention_layer{L}.png: a grid with one heat map per head (query
position down, key position across, tokens on the axes) and, in a column at the right, the
head-similarity matrix rho (cosine of the heads' contributions after Wo: 1 = redundant, 0 =
complementary) with the colour scales. Sized to read at README width (~900 px).
Needs Debian's python3-matplotlib.
"""
import argparse
import json
import math
import os
import sys


def label(tok):
    return {"\n": "\\n", " ": "␣", "\t": "\\t"}.get(tok, tok)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report")
    ap.add_argument("--out", help="directory for the PNGs (default: the report's directory)")
    a = ap.parse_args()
    try:
        with open(a.report, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"plot_attention.py: {a.report}: {e}")
    out_dir = a.out or os.path.dirname(os.path.abspath(a.report))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.gridspec import GridSpec

    tokens = [label(t) for t in report["tokens"]]
    n = len(tokens)
    for layer in report["layers"]:
        probs = layer["probabilities"]
        heads = len(probs)
        # Heads in a grid of up to 2 columns; rho and the colour scale in a narrower column at the right,
        # so the figure reads at README width (~900 px): no empty panels, characters large enough.
        cols = min(heads, 2)
        rows = math.ceil(heads / cols)
        # Characters label the outer sides only, alternating: even positions on the bottom and left
        # sides, odd ones on the top and right. Each label then has two cells of room, which makes it
        # twice as large as one character per cell could be.
        panel = 4.0  # inches per heat map; the figure is ~10 in wide, saved at 120 dpi
        font = min(10.0, 1.8 * panel * 72 / n)
        fig = plt.figure(figsize=(cols * panel + 0.5 * panel + 0.4, rows * panel + 0.9), constrained_layout=True)
        grid = GridSpec(rows, cols + 1, figure=fig, width_ratios=[1] * cols + [0.5])
        even, odd = list(range(0, n, 2)), list(range(1, n, 2))
        for h in range(heads):
            ax = fig.add_subplot(grid[h // cols, h % cols])
            im_p = ax.imshow(probs[h], cmap="viridis", vmin=0.0, vmax=1.0)
            top, bottom = h < cols, h // cols == rows - 1 or h + cols >= heads
            left, right = h % cols == 0, h % cols == cols - 1 or h == heads - 1
            ax.set_xticks(even)
            ax.set_xticklabels([tokens[i] for i in even] if bottom else [], fontsize=font)
            ax.set_yticks(even)
            ax.set_yticklabels([tokens[i] for i in even] if left else [], fontsize=font)
            ax.tick_params(length=2, pad=1)
            if top:
                sx = ax.secondary_xaxis("top")
                sx.set_xticks(odd)
                sx.set_xticklabels([tokens[i] for i in odd], fontsize=font)
                sx.tick_params(length=2, pad=1)
            if right:
                sy = ax.secondary_yaxis("right")
                sy.set_yticks(odd)
                sy.set_yticklabels([tokens[i] for i in odd], fontsize=font)
                sy.tick_params(length=2, pad=1)
            ax.set_title(f"head {h}", fontsize=11, pad=2 if not top else 4)
            if bottom:
                ax.set_xlabel("key", fontsize=10)
            if left:
                ax.set_ylabel("query", fontsize=10)
        side = grid[:, cols].subgridspec(2, 1, height_ratios=[1, 1])
        ax = fig.add_subplot(side[0])
        rho = layer["output_similarity"]
        im = ax.imshow(rho, cmap="coolwarm", vmin=-1.0, vmax=1.0)
        for i in range(heads):
            for j in range(heads):
                ax.text(j, i, f"{rho[i][j]:.1f}", ha="center", va="center", fontsize=9,
                        color="white" if abs(rho[i][j]) > 0.6 else "black")
        ax.set_title(f"head similarity ρ\n(mean {layer['mean_output_similarity']:.2f})", fontsize=10)
        ax.set_xticks(range(heads))
        ax.set_yticks(range(heads))
        ax.tick_params(labelsize=9)
        fig.colorbar(im, ax=ax, orientation="horizontal", fraction=0.08, pad=0.08).ax.tick_params(labelsize=8)
        cax = fig.add_subplot(side[1])
        cax.axis("off")
        cb = fig.colorbar(im_p, ax=cax, orientation="horizontal", fraction=0.25, anchor=(0.5, 1.0))
        cb.set_label("attention probability", fontsize=9)
        cb.ax.tick_params(labelsize=8)
        cax.text(0.5, 0.75, "rows: queries\ncolumns: keys\ncharacters alternate:\neven positions bottom\nand left, odd ones\ntop and right\n␣ space, \\n newline\n\nρ: cosine of the\nheads' outputs\nafter Wo\n1 redundant,\n0 complementary", ha="center", va="top", fontsize=9,
                 transform=cax.transAxes)
        fig.suptitle(f"layer {layer['layer']}: attention probabilities per head", fontsize=13)
        path = os.path.join(out_dir, f"attention_layer{layer['layer']}.png")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main()
