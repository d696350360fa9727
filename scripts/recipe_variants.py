#!/usr/bin/env python3
"""Writes the ablation variants of a modern-recipe config: each option taken out one at a time, and
all of them at once (the default recipe at the same shape and parameter count).

    python3 scripts/recipe_variants.py FULL.json OUTDIR [--only NAME,...]

FULL.json is a resolved config (`tfm config --config C > FULL.json`: every key present). Writes
OUTDIR/<variant>.json for each variant the config has an option for, and OUTDIR/order (full first,
then the variants, the default recipe last). Keys that belong to what a variant removes go with it:
tfm refuses Muon's keys under AdamW and WSD's under cosine. Used by scripts/ablate.sh and
scripts/speedrun.sh --figure.

Variants (those whose option the config uses):
  no_rope       sinusoidal positions instead of RoPE
  no_rmsnorm    LayerNorm instead of RMSNorm
  no_swiglu     GELU with d_ff x 1.5 instead of SwiGLU (two C x 1.5 d_ff matrices = SwiGLU's three)
  no_qk_norm    QK-norm off
  tied_head     the output head tied to the token embedding
  biases        biases back in every linear map and norm
  adamw         AdamW for every parameter, at the config's lr
  adamw_lr1e-3  AdamW for every parameter, at lr 1e-3 (nanoGPT's)
  cosine        the cosine schedule instead of warmup-stable-decay
  default       all of the above at once (AdamW 1e-3, cosine): the 2019 recipe
"""
import argparse
import copy
import json
import os
import sys

WHAT = {
    "full": "the recipe as configured",
    "no_rope": "sinusoidal positions instead of RoPE",
    "no_rmsnorm": "LayerNorm instead of RMSNorm",
    "no_swiglu": "GELU (d_ff x 1.5) instead of SwiGLU",
    "no_qk_norm": "no QK-norm",
    "tied_head": "output head tied to the embedding",
    "biases": "biases back",
    "adamw": "AdamW for every parameter (the config's lr)",
    "adamw_lr1e-3": "AdamW for every parameter, lr 1e-3",
    "cosine": "cosine schedule instead of WSD",
    "default": "all of the above removed (AdamW 1e-3, cosine)",
}


def adamw(c, lr=None):
    o = c["train"]["optimizer"]
    for k in ("muon_lr", "muon_momentum", "muon_weight_decay", "momentum"):
        o.pop(k, None)
    o["name"] = "adamw"
    if lr:
        o["lr"] = lr


def cosine(c):
    s = c["train"]["lr_schedule"]
    s.pop("decay_fraction", None)
    s["name"] = "cosine"


def gelu(c):
    c["model"]["activation"] = "gelu"
    c["model"]["d_ff"] = c["model"]["d_ff"] * 3 // 2


# variant: (model key, its modern value, the edit that removes it)
MODEL_EDITS = {
    "no_rope": ("positional_encoding", "rope", lambda c: c["model"].update(positional_encoding="sinusoidal")),
    "no_rmsnorm": ("norm", "rmsnorm", lambda c: c["model"].update(norm="layernorm")),
    "no_swiglu": ("activation", "swiglu", gelu),
    "no_qk_norm": ("qk_norm", True, lambda c: c["model"].update(qk_norm=False)),
    "tied_head": ("tie_embeddings", False, lambda c: c["model"].update(tie_embeddings=True)),
    "biases": ("bias", False, lambda c: c["model"].update(bias=True)),
}


def variants_of(full):
    """{name: config} of every variant the config has an option for, the default recipe last."""
    m, t = full["model"], full["train"]
    out = {}
    default = copy.deepcopy(full)
    for name, (key, modern, edit) in MODEL_EDITS.items():
        if m.get(key) == modern:
            c = copy.deepcopy(full)
            edit(c)
            out[name] = c
            edit(default)
    if t["optimizer"]["name"] == "muon":
        for name, lr in (("adamw", None), ("adamw_lr1e-3", 1e-3)):
            c = copy.deepcopy(full)
            adamw(c, lr)
            out[name] = c
        adamw(default, 1e-3)
    if t["lr_schedule"]["name"] == "wsd":
        c = copy.deepcopy(full)
        cosine(c)
        out["cosine"] = c
        cosine(default)
    out["default"] = default
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("full", help="a resolved config (tfm config --config C)")
    ap.add_argument("outdir")
    ap.add_argument("--only", default="", help="comma-separated variants to list in OUTDIR/order (full always)")
    a = ap.parse_args()
    try:
        with open(a.full, encoding="utf-8") as f:
            full = json.load(f)
        full["model"]["activation"], full["train"]["optimizer"]["name"], full["train"]["lr_schedule"]["name"]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"recipe_variants.py: {a.full}: {e}")
    except KeyError as e:
        sys.exit(f"recipe_variants.py: {a.full}: no key {e}: give a resolved config (tfm config --config C)")
    variants = variants_of(full)
    only = [n for n in a.only.split(",") if n]
    unknown = [n for n in only if n not in variants and n != "full"]
    if unknown:
        sys.exit("recipe_variants.py: --only: no variant %s (this config has: full, %s)"
                 % (", ".join(unknown), ", ".join(variants)))
    os.makedirs(a.outdir, exist_ok=True)
    for name, c in variants.items():
        c.pop("_comment", None)
        with open(os.path.join(a.outdir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(c, f, indent=1)
    names = ["full"] + [n for n in variants if not only or n in only]
    with open(os.path.join(a.outdir, "order"), "w", encoding="utf-8") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
