#!/usr/bin/env bash
# Makes again every figure of README.md and docs/ that comes from a training run, with tfm alone (SVG, no
# Python): the runs, then the figures copied into docs/. A run or sweep point already finished under
# RUNS_DIR is not trained again, so a stopped call picks up where it was.
#
#   scripts/dev/figures.sh [RUNS_DIR] [TFM_BINARY]      (run from anywhere; RUNS_DIR default runs/figures)
#
# Figure                               made by
# docs/loss.svg                        tfm train configs/shakespeare_char.json; tfm plot loss
# docs/attention_layer{0,3}.svg        tfm attention on that run, the text of docs/insight.md
# docs/heads_shakespeare_char.svg      tfm heads --batches 50 on that run
# docs/attention_seq2seq_layer1.svg    tfm train configs/eng_fra_d2l.json; tfm attention --checkpoint last
# docs/sweep_{heads,gqa,topk,mixing}.svg  tfm sweep, the grids of docs/heads.md at train.max_steps=500
#                                      (a quarter of the steps of the tables there, to save CPU)
# Cost on the 2-core development machine shared with other jobs: ~45 minutes. One training at a time.
# (docs/bench_attention.svg comes from `tfm bench attention`, docs/board.png from scripts/dev/check_board.sh,
# and the speedrun and ablation figures from scripts/speedrun.sh and scripts/ablate.sh.)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
runs=${1:-runs/figures}
tfm_find_binary "${2:-}"
tfm=$TFM_BIN
cd "$TFM_ROOT"
mkdir -p "$runs"
docs=$TFM_ROOT/docs

# train CONFIG DIR [--set ...]: trains DIR unless its checkpoint is at train.max_steps already.
train() {
  local config=$1 dir=$2
  shift 2
  if [ -f "$dir/last.ckpt" ] && "$tfm" runs "$dir" --json | grep -q '"status": *"finished"'; then
    return
  fi
  if [ -f "$dir/last.ckpt" ]; then
    "$tfm" train --resume "$dir"
  else
    "$tfm" train --config "$config" --out "$dir" "$@"
  fi
}

sc=$runs/shakespeare_char
train configs/shakespeare_char.json "$sc"
"$tfm" plot loss "$sc" --out "$docs/loss.svg" --title "shakespeare_char: 4 layers, 4 heads, d_model 128"
"$tfm" attention --run "$sc" --text "ROMEO:
What light through yonder window breaks?" --out "$sc/attention"
cp "$sc/attention/attention_layer0.svg" "$sc/attention/attention_layer3.svg" "$docs/"
"$tfm" heads --run "$sc" --batches 50 --out "$sc/heads"
cp "$sc/heads/heads.svg" "$docs/heads_shakespeare_char.svg"

d2l=$runs/eng_fra_d2l
train configs/eng_fra_d2l.json "$d2l"
"$tfm" attention --run "$d2l" --checkpoint last --text "i'm home ." --out "$d2l/attention"
cp "$d2l/attention/attention_seq2seq_layer1.svg" "$docs/"

# The sweeps of docs/heads.md; each writes OUT/sweep.jsonl and OUT/sweep.svg.
sweep() {
  local name=$1
  shift
  "$tfm" sweep --config configs/shakespeare_char.json --set train.max_steps=500 "$@" --out "$runs/$name"
  cp "$runs/$name/sweep.svg" "$docs/$name.svg"
}
sweep sweep_heads --set model.n_kv_heads=null --grid model.n_heads=1,2,4,8,16,32
sweep sweep_gqa --set model.n_heads=8 --grid model.n_kv_heads=8,4,2,1
sweep sweep_topk --set model.n_heads=8 --set model.n_kv_heads=null --set model.head_gating=topk \
  --grid model.head_topk=1,2,4,8
sweep sweep_mixing --set model.n_heads=8 --set model.n_kv_heads=8 --set model.head_groups=2 \
  --grid model.head_mixing=none,talking_heads,group_mlp
echo "figures.sh: the figures are in docs/, their runs in $runs"
