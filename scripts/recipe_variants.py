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
  default       all of the above at once (AdamW 1e-3, cosine, and none of the tricks below): the 2019
                recipe
The speedrun tricks, each taken out alone:
  no_value_residual   model.value_residual off
  no_bigram           model.bigram_buckets 0
  no_x0_skip          model.x0_skip off
  no_softcap          model.logit_softcap 0
  no_mtp              model.mtp_heads 0 (multi-token prediction)
  no_momentum_schedule  Muon momentum warmup and cooldown off (constant muon_momentum)
  no_cautious_wd      Muon's weight decay off
  no_ema              train.ema_decay 0 (evaluate the weights themselves)
  with_dropout        model.dropout 0.1 (where the config has none)
  with_mtp            model.mtp_heads 1, train.mtp_weight 0.3 (where the config has no extra heads; run only
                      when --only names it)
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
    "no_value_residual": "no value residual",
    "no_bigram": "no bigram embedding",
    "no_x0_skip": "no x0 skip",
    "no_softcap": "no logit softcap",
    "no_mtp": "no multi-token prediction",
    "no_momentum_schedule": "constant Muon momentum (no warmup/cooldown)",
    "no_cautious_wd": "no Muon weight decay",
    "no_ema": "no EMA of the weights",
    "with_dropout": "dropout 0.1",
    "with_mtp": "multi-token prediction, 1 extra head (weight 0.3)",
}


def adamw(c, lr=None):
    o = c["train"]["optimizer"]
    for k in [k for k in o if k.startswith("muon_")] + ["momentum"]:
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


def no_momentum_schedule(c):
    c["train"]["optimizer"].update(muon_momentum_warmup_steps=0, muon_momentum_cooldown_steps=0)


def no_cautious_wd(c):
    c["train"]["optimizer"].update(muon_weight_decay=0.0, muon_cautious_weight_decay=False)


# variant: (is the trick on in this resolved config, the edit that takes it out)
TRICK_EDITS = {
    "no_value_residual": (lambda c: c["model"].get("value_residual"),
                          lambda c: c["model"].update(value_residual=False)),
    "no_bigram": (lambda c: c["model"].get("bigram_buckets"), lambda c: c["model"].update(bigram_buckets=0)),
    "no_x0_skip": (lambda c: c["model"].get("x0_skip"), lambda c: c["model"].update(x0_skip=False)),
    "no_softcap": (lambda c: c["model"].get("logit_softcap"), lambda c: c["model"].update(logit_softcap=0.0)),
    "no_mtp": (lambda c: c["model"].get("mtp_heads"), lambda c: c["model"].update(mtp_heads=0)),
    "no_momentum_schedule": (lambda c: c["train"]["optimizer"].get("name") == "muon" and (
        c["train"]["optimizer"].get("muon_momentum_warmup_steps")
        or c["train"]["optimizer"].get("muon_momentum_cooldown_steps")), no_momentum_schedule),
    "no_cautious_wd": (lambda c: c["train"]["optimizer"].get("name") == "muon"
                       and c["train"]["optimizer"].get("muon_weight_decay"), no_cautious_wd),
    "no_ema": (lambda c: c["train"].get("ema_decay"), lambda c: c["train"].update(ema_decay=0.0)),
    "with_dropout": (lambda c: c["model"].get("dropout") == 0, lambda c: c["model"].update(dropout=0.1)),
    "with_mtp": (lambda c: c["train"].get("objective") == "causal_lm" and not c["model"].get("mtp_heads"),
                 lambda c: (c["model"].update(mtp_heads=1), c["train"].update(mtp_weight=0.3))),
}


# Variants written for every config that has them but listed in OUTDIR/order only when --only names them.
OPT_IN = ("with_mtp",)


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
    for name, (on, edit) in TRICK_EDITS.items():
        if on(full) and not name.startswith("with_"):
            edit(default)
    out["default"] = default
    for name, (on, edit) in TRICK_EDITS.items():
        if on(full):
            c = copy.deepcopy(full)
            edit(c)
            out[name] = c
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
    # with_mtp adds a trick rather than taking one out: written always, run only when --only names it.
    names = ["full"] + [n for n in variants if n in only or (not only and n not in OPT_IN)]
    with open(os.path.join(a.outdir, "order"), "w", encoding="utf-8") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
