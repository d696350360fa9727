#!/usr/bin/env python3
"""Draws `tfm sweep`'s results: val loss and ms/step against the swept key.

    /usr/bin/python3 scripts/plot_sweep.py OUT/sweep.jsonl KEY

Writes sweep.png beside sweep.jsonl: left, the val loss of each point against KEY (one line per
combination of the other swept keys); right, ms per training step. Needs Debian's python3-matplotlib.
"""
import json
import os
import sys

import tfm_plot


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, key = sys.argv[1], sys.argv[2]
    try:
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"plot_sweep.py: {path}: {e}")
    if not rows or key not in rows[0]:
        sys.exit(f"plot_sweep.py: {path}: no points with the key {key}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fixed = {"parameters", "train_flops_per_token", "kv_cache_bytes_per_token", "val_loss", "best_val_loss",
             "ms_per_step", "tokens_per_s", "step", "training_s", "stopped", "seconds_to_target", "dir", key}
    others = [k for k in rows[0] if k not in fixed]
    xs = []
    for r in rows:
        if r[key] not in xs:
            xs.append(r[key])
    groups = {}
    for r in rows:
        groups.setdefault(tuple((k, json.dumps(r[k])) for k in others), []).append(r)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    for g, rs in groups.items():
        label = ", ".join(f"{k}={v}" for k, v in g) or None
        pos = [xs.index(r[key]) for r in rs]
        a.plot(pos, [r["val_loss"] for r in rs], "o-", label=label)
        b.plot(pos, [r["ms_per_step"] for r in rs], "o-", label=label)
    for ax, y in ((a, "val loss"), (b, "ms per training step")):
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel(key)
        ax.set_ylabel(y)
        if len(groups) > 1:
            ax.legend(fontsize=8)
    fig.suptitle(f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}: {len(rows)} points", fontsize=10)
    out = os.path.join(os.path.dirname(os.path.abspath(path)), "sweep.png")
    tfm_plot.save_figure(fig, out, "plot_sweep.py", 110)
    print(out)


if __name__ == "__main__":
    main()
