#!/usr/bin/env python3
"""Draws attention heat maps from `tfm attention`'s report.

    /usr/bin/python3 scripts/plot_attention.py OUT_DIR/attention.json [--out OUT_DIR]

Writes, for every layer L, OUT_DIR/attention_layer{L}.png: a grid with one heat map per head (query
position down, key position across, tokens on the axes) and, in a column at the right, the
head-similarity matrix rho (cosine of the heads' contributions after Wo: 1 = redundant, 0 =
complementary) with the colour scales. Sized to read at README width (~900 px).

A seq2seq report (a sentence pair) gives OUT_DIR/attention_seq2seq_layer{L}.png instead: one row per
kind of attention (encoder self-attention, decoder self-attention, cross-attention) and one column per
head; cross-attention has the target tokens down (the token each row predicts) and the source across.
Needs Debian's python3-matplotlib.
"""
import argparse
import json
import math
import os
import sys

import tfm_plot


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

    if report.get("kind") == "seq2seq":
        plot_pair(report, out_dir, plt)
        return
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
        tfm_plot.save_figure(fig, path, "plot_attention.py", 120)
        plt.close(fig)
        print(path)


def plot_pair(report, out_dir, plt):
    src = [label(t) for t in report["source_tokens"]]
    tgt = [label(t) for t in report["target_tokens"]]
    tgt_in = ["<bos>"] + tgt[:-1]  # what the decoder reads at each row
    kinds = [("encoder", "encoder self-attention", src, src),
             ("decoder_self", "decoder self-attention (causal)", tgt, tgt_in),
             ("cross", "cross-attention: target queries x source keys", tgt, src)]
    for layer in range(max(len(report[k]) for k, *_ in kinds)):
        present = [(k, title, rows, cols) for k, title, rows, cols in kinds if layer < len(report[k])]
        heads = len(report[present[0][0]][layer]["probabilities"])
        n = max(len(src), len(tgt))
        panel = min(2.4, 9.6 / heads)
        font = max(6.0, min(10.0, 1.1 * panel * 72 / n))
        fig, axes = plt.subplots(len(present), heads, figsize=(heads * panel + 1.2, len(present) * (panel + 0.5) + 0.6),
                                 constrained_layout=True, squeeze=False)
        for r, (kind, title, rows, cols) in enumerate(present):
            entry = report[kind][layer]
            for h in range(heads):
                ax = axes[r][h]
                im = ax.imshow(entry["probabilities"][h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
                ax.set_xticks(range(len(cols)))
                ax.set_xticklabels(cols, fontsize=font, rotation=90)
                ax.set_yticks(range(len(rows)))
                ax.set_yticklabels(rows if h == 0 else [], fontsize=font)
                ax.tick_params(length=2, pad=1)
                ax.set_title(f"head {h}" if r == 0 else "", fontsize=10)
            axes[r][0].set_ylabel(f"{title}\n(similarity {entry['mean_pattern_similarity']:.2f})", fontsize=9)
        fig.colorbar(im, ax=axes, fraction=0.02, pad=0.01).set_label("attention probability", fontsize=9)
        fig.suptitle(f"layer {layer}: {' '.join(src)}  =>  {' '.join(tgt)}", fontsize=11)
        path = os.path.join(out_dir, f"attention_seq2seq_layer{layer}.png")
        tfm_plot.save_figure(fig, path, "plot_attention.py", 110)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main()
