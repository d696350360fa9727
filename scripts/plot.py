#!/usr/bin/env python3
"""Draws a run's loss curves and learning rate into RUN_DIR/loss.png.

    /usr/bin/python3 scripts/plot.py runs/shakespeare_char [--out FILE]

Reads RUN_DIR/metrics.jsonl (one JSON object per log interval, written by `tfm train`): train_loss
and lr at every logged step, val_loss where the run evaluated. Needs Debian's python3-matplotlib.
"""
import argparse
import json
import os
import sys

import tfm_plot


def read_metrics(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"plot.py: {path}:{n}: not JSON ({e.msg})")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--out", help="output PNG (default RUN_DIR/loss.png)")
    a = ap.parse_args()
    path = os.path.join(a.run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"plot.py: {path} not found: is {a.run_dir} a tfm run directory?")
    rows = read_metrics(path)
    train = [(r["step"], r["train_loss"]) for r in rows if r.get("train_loss") is not None]
    val = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    lr = [(r["step"], r["lr"]) for r in rows if r.get("lr") is not None]
    if not train and not val:
        sys.exit(f"plot.py: {path} has no train_loss or val_loss entries yet")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_lr) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    if train:
        ax.plot(*zip(*train), label="train", linewidth=1.2)
    if val:
        ax.plot(*zip(*val), "o-", label="validation", linewidth=1.5, markersize=4)
        best = min(val, key=lambda p: p[1])
        ax.annotate(f"best val {best[1]:.4f} @ {best[0]}", best, textcoords="offset points", xytext=(0, 14), ha="right")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    ax.set_title(f"tfm run {os.path.basename(os.path.normpath(a.run_dir))}")
    ax.grid(alpha=0.3)
    ax.legend()
    if lr:
        ax_lr.plot(*zip(*lr), color="tab:green", linewidth=1.2)
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.grid(alpha=0.3)
    fig.tight_layout()
    out = a.out or os.path.join(a.run_dir, "loss.png")
    tfm_plot.save_figure(fig, out, "plot.py", 110)
    print(out)


if __name__ == "__main__":
    main()
