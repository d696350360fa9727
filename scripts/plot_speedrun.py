#!/usr/bin/env python3
"""Draws validation loss against wall-clock minutes for runs of tfm and of scripts/torch_lm.py.

    /usr/bin/python3 scripts/plot_speedrun.py OUT.png [--target X] [--title T] LABEL=FILE [LABEL=FILE ...]

Each FILE is either a tfm run's metrics.jsonl (its evaluations: "training_s" and "val_loss", the
clock train.target_loss uses) or the output of `scripts/torch_lm.py --target-loss` (one line per
evaluation with "seconds" and "val_loss"); a tfm run directory stands for its metrics.jsonl. Both
clocks start at the first training step and include the evaluations. --target draws the target as
a dashed line. scripts/speedrun.sh and scripts/ablate.sh call this; needs Debian's python3-matplotlib.
"""
import json
import os
import sys

import tfm_plot


def curve(path):
    """[(minutes, val_loss)] of one run's evaluations, in order."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    points = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_speedrun.py: {path}:{n}: not JSON ({e})")
            if "val_loss" not in r:
                continue
            seconds = r.get("training_s", r.get("seconds"))  # tfm's metrics, torch_lm.py's evaluations
            if seconds is None or "impl" in r:  # torch_lm.py's summary line repeats the last val
                continue
            points.append((seconds / 60.0, r["val_loss"]))
    if not points:
        sys.exit(f"plot_speedrun.py: {path}: no evaluations with a time (tfm metrics.jsonl or "
                 "torch_lm.py --target-loss output)")
    return points


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="the PNG to write")
    ap.add_argument("runs", nargs="+", metavar="LABEL=FILE", help="a curve's legend and its file")
    ap.add_argument("--target", type=float, help="draw this val loss as a dashed line")
    ap.add_argument("--title")
    a = ap.parse_args()
    target, title, out = a.target, a.title, a.out
    runs = []
    for spec in a.runs:
        if "=" not in spec:
            ap.error(f"{spec}: expected LABEL=FILE")
        label, path = spec.split("=", 1)
        try:
            runs.append((label, curve(path)))
        except OSError as e:
            sys.exit(f"plot_speedrun.py: {path}: {e.strerror}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5), constrained_layout=True)
    # matplotlib's default cycle has 10 colours: past that (an ablation's 11 runs) the first run's
    # colour would come back, so take them from a 20-colour map instead.
    colours = plt.get_cmap("tab20").colors if len(runs) > 10 else [None] * len(runs)
    for (label, pts), colour in zip(runs, colours):
        ax.plot([m for m, _ in pts], [v for _, v in pts], "o-", markersize=3, label=label, color=colour)
    if target is not None:
        ax.axhline(target, color="gray", linestyle="--", linewidth=1)
        ax.annotate(f"target {target:g}", (0, target), textcoords="offset points", xytext=(4, 4), fontsize=8,
                    color="gray")
    lows = [v for _, pts in runs for _, v in pts]
    ax.set_ylim(min(lows + ([target] if target else [])) - 0.05, max(lows) + 0.05)
    ax.set_xlabel("wall-clock minutes from the first step (evaluations included)")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title(title or "time to quality", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    tfm_plot.save_figure(fig, out, "plot_speedrun.py", 110)
    print(out)


if __name__ == "__main__":
    main()
