#!/usr/bin/env python3
"""Draws attention heat maps from `tfm attention`'s report.

    /usr/bin/python3 scripts/plot_attention.py OUT_DIR/attention.json [--out OUT_DIR]

Writes, for every layer L, OUT_DIR/attention_layer{L}.png: a grid with one heat map per head (query
position down, key position across, tokens on the axes) and, in the last panel, the head-similarity
matrix rho (cosine of the heads' contributions after Wo: 1 = redundant, 0 = complementary).
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

    tokens = [label(t) for t in report["tokens"]]
    n = len(tokens)
    for layer in report["layers"]:
        probs = layer["probabilities"]
        heads = len(probs)
        panels = heads + 1
        cols = min(panels, 4)
        rows = math.ceil(panels / cols)
        size = max(3.0, 0.22 * n)
        fig, axes = plt.subplots(rows, cols, figsize=(cols * size, rows * size), squeeze=False)
        for h in range(heads):
            ax = axes[h // cols][h % cols]
            ax.imshow(probs[h], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_title(f"head {h}", fontsize=10)
            ax.set_xticks(range(n))
            ax.set_yticks(range(n))
            ax.set_xticklabels(tokens, fontsize=7)
            ax.set_yticklabels(tokens, fontsize=7)
            ax.set_xlabel("key", fontsize=8)
            ax.set_ylabel("query", fontsize=8)
        ax = axes[heads // cols][heads % cols]
        im = ax.imshow(layer["output_similarity"], cmap="coolwarm", vmin=-1.0, vmax=1.0)
        ax.set_title(f"head similarity ρ (mean {layer['mean_output_similarity']:.2f})", fontsize=10)
        ax.set_xticks(range(heads))
        ax.set_yticks(range(heads))
        fig.colorbar(im, ax=ax, fraction=0.046)
        for k in range(panels, rows * cols):
            axes[k // cols][k % cols].axis("off")
        fig.suptitle(f"layer {layer['layer']}: attention probabilities per head", fontsize=12)
        fig.tight_layout(rect=(0, 0, 1, 0.96))  # leave the top strip to the title
        path = os.path.join(out_dir, f"attention_layer{layer['layer']}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main()
