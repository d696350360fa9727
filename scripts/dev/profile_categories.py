#!/usr/bin/python3
"""Sorts `perf report --sort dso,sym -t TAB` lines (stdin) into the parts of a training step.

Usage: perf report ... | profile_categories.py TRAIN_LOG FIRST_STEP LAST_STEP [--json]
TRAIN_LOG's "step K/N | ... | X ms/step" lines after FIRST_STEP give the mean ms/step that the shares
are turned into milliseconds with. scripts/dev/profile.sh runs it; tests/cli/test_scripts.cpp feeds it
canned lines.
"""
import json
import re
import sys

# (category, what it is, test on (dso, symbol)); the first match wins, so specific rules come first.
CATEGORIES = [
    ("matrix products", "GEMM kernels: oneDNN's JIT code and library, OpenBLAS, the wrapper",
     lambda d, s: d.startswith("[JIT]") or "libdnnl" in d or "libopenblas" in d
     or re.search(r"tfm::gemm\b|bf16_by_sgemm|bf16_onednn|sgemm_", s)),
    ("bf16 rounding", "operands rounded to bfloat16 at the GEMM, the weights' copy",
     lambda d, s: re.search(r"round_rows?_bf16|bf16_operand|mirrored", s)),
    ("attention kernel", "the fused attention's softmax, masks and row bookkeeping (its GEMMs are above)",
     lambda d, s: "kernels::attention" in s),
    ("GELU, exp, erf", "activation math: erff/expf (libmvec, libm) and the GELU loops",
     lambda d, s: "libmvec" in d or d.startswith("libm.") or "gelu" in s),
    ("norms, elementwise", "LayerNorm, dropout, residual adds, bias gradients, softmax/cross-entropy",
     lambda d, s: re.search(r"layernorm|dropout|binary<|unary<|affine|bias_add|softmax|cross_entropy|"
                            r"embedding|strided::|map_elements|feed_forward|linear_rows", s)),
    ("optimizer, clipping", "AdamW/SGD/Muon update, gradient norm and clipping (Muon's GEMMs are above)",
     lambda d, s: re.search(r"Optimizer::step|grad_norm|clip_grad|adamw_range|sgd_range|muon_step|newton_schulz",
                            s)),
    ("data-parallel gradient sum", "train.data_parallel: the replicas' gradients added once per micro-batch",
     lambda d, s: "sum_replica_grads" in s),
    ("memory: fills, copies, allocation", "zero fills, copies, malloc/free, the tensor pool",
     lambda d, s: re.search(r"Tensor::full|fill_|memset|memmove|memcpy|malloc|_int_free|cfree|free\b|"
                            r"unlink_chunk|consolidate|memory::", s)),
    ("OpenMP runtime", "libgomp: fork/join, barriers, threads spinning or waking",
     lambda d, s: "libgomp" in d),
    ("OS kernel", "system calls, page faults, interrupts, scheduling",
     lambda d, s: d.startswith("[kernel")),
]
OTHER = ("other", "everything else (autograd bookkeeping, the batch sampler, ...)")


def categorize(lines):
    shares = {name: 0.0 for name, _, _ in CATEGORIES}
    shares[OTHER[0]] = 0.0
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) < 3 or not parts[0].strip().endswith("%") or line.startswith("#"):
            continue
        share = float(parts[0].strip().rstrip("%"))
        dso = parts[1].strip()
        sym = parts[2].strip()
        sym = sym[4:] if sym[:4] in ("[.] ", "[k] ") else sym
        for name, _, test in CATEGORIES:
            if test(dso, sym):
                shares[name] += share
                break
        else:
            shares[OTHER[0]] += share
    return shares


def mean_ms_per_step(log_path, first, last):
    values = []
    with open(log_path, encoding="utf-8") as f:
        for line in f:
            m = re.search(r"step (\d+)/\d+ \| loss .*\| ([0-9.]+) ms/step", line)
            if m and first < int(m.group(1)) <= last:
                values.append(float(m.group(2)))
    if not values:
        raise SystemExit(f"profile_categories.py: no 'step K/N | ... ms/step' lines after step {first} in {log_path}")
    return sum(values) / len(values)


def main(argv):
    if len(argv) < 4:
        raise SystemExit(__doc__)
    ms = mean_ms_per_step(argv[1], int(argv[2]), int(argv[3]))
    shares = categorize(sys.stdin)
    total = sum(shares.values()) or 1.0
    rows = [(name, what, shares[name] / total) for name, what, _ in CATEGORIES] + [(OTHER[0], OTHER[1], shares[OTHER[0]] / total)]
    if "--json" in argv:
        print(json.dumps({"ms_per_step": ms, "shares": {name: share for name, _, share in rows}}))
        return
    print(f"steps {int(argv[2]) + 1}-{argv[3]}: {ms:.1f} ms/step (train.log), perf samples of every thread")
    print(f"{'part of the step':<36} {'share':>7} {'ms/step':>9}  what")
    for name, what, share in rows:
        print(f"{name:<36} {100 * share:6.1f}% {ms * share:9.2f}  {what}")


if __name__ == "__main__":
    main(sys.argv)
