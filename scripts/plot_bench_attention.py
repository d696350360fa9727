#!/usr/bin/env python3
"""Draws `tfm bench attention --out DIR`'s report: time and memory of one attention layer against n.

    /usr/bin/python3 scripts/plot_bench_attention.py DIR/bench_attention.json

Writes DIR/bench_attention.png: left, forward + backward time (log-log) with the formula's FLOPs
(scores O(n^2 d) + projections O(n d^2)) scaled to meet the measurement at the largest n; right, the
step's tensor memory beside the B*H*n^2 floats an unfused layer keeps for its attention matrices.
Needs Debian's python3-matplotlib.
"""
import os
import sys

import tfm_plot


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    r = tfm_plot.load_json(path, "plot_bench_attention.py")
    plt = tfm_plot.pyplot()

    rows = r["lengths"]
    n = [x["n"] for x in rows]
    ms = [x["ms"] for x in rows]
    flops = [x["flops"] for x in rows]
    peak = [x["peak_bytes"] / 2**20 for x in rows]
    matrix = [x["attention_matrix_bytes"] / 2**20 for x in rows]
    scale = ms[-1] / flops[-1]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2), constrained_layout=True)
    a.loglog(n, ms, "o-", label=f"measured (fit n^{r['time_exponent']:.2f})")
    a.loglog(n, [f * scale for f in flops], "--", label=f"formula O(n²d + nd²) (n^{r['flops_exponent']:.2f})")
    a.set_xlabel("sequence length n")
    a.set_ylabel("ms per forward + backward")
    a.set_title("time")
    a.legend(fontsize=9)
    b.loglog(n, peak, "o-", label=f"tfm, fused (fit n^{r['memory_exponent']:.2f})")
    b.loglog(n, matrix, "--", label="B·H·n² attention matrices (n^2)")
    b.set_xlabel("sequence length n")
    b.set_ylabel("MiB")
    b.set_title("memory of the step")
    b.legend(fontsize=9)
    kind = "causal" if r["causal"] else "bidirectional"
    fig.suptitle(f"one attention layer: d_model {r['d_model']}, {r['heads']} heads, batch {r['batch']}, {kind}, "
                 f"{r['threads']} thread(s)", fontsize=11)
    out = os.path.join(os.path.dirname(os.path.abspath(path)), "bench_attention.png")
    tfm_plot.save_figure(fig, out, "plot_bench_attention.py", 110)
    print(out)


if __name__ == "__main__":
    main()
