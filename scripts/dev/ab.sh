#!/usr/bin/env bash
# Times two whole commands in turn, A B A B ..., and gives the ratio A/B pair by pair: on a shared or
# noisy machine a ratio of neighbouring runs holds when the machine's speed drifts, where two separate
# series would not. The docs' "N A/B pairs" figures are measured this way; quote the median.
# Usage: scripts/dev/ab.sh [-n PAIRS] [-w WARMUP] 'COMMAND_A' 'COMMAND_B'
#   each command is run by `sh -c` again and again (one that writes a run directory must clear it), its
#   output kept aside and shown when it fails; PAIRS default 5, WARMUP (runs of each, not counted)
#   default 1. Prints each pair's wall and CPU (user + system) seconds, to the millisecond, and their
#   ratios, then the median, minimum and maximum of the ratios (a pair whose B took no measurable time
#   has no ratio).
# Example: scripts/dev/ab.sh -n 6 'rm -rf /tmp/a && build/new/tfm train --config configs/tiny.json --out /tmp/a' \
#                               'rm -rf /tmp/b && build/old/tfm train --config configs/tiny.json --out /tmp/b'
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
usage() { tfm_usage; }
pairs=5 warmup=1
[ "${1:-}" != "--help" ] || { usage; exit 0; }
while getopts "n:w:h" opt; do
  case "$opt" in
    n) pairs="$OPTARG" ;;
    w) warmup="$OPTARG" ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { usage >&2; exit 2; }
[[ "$pairs" =~ ^[1-9][0-9]*$ && "$warmup" =~ ^[0-9]+$ ]] || tfm_fail "-n and -w take whole numbers (-n at least 1)"

timing="$(mktemp)" output="$(mktemp)"
trap 'rm -f "$timing" "$output"' EXIT
# One run of a command: sets `wall` and `cpu` (seconds); a failing command stops the comparison, with
# the end of what it printed.
run() {
  local status=0
  { TIMEFORMAT="%3R %3U %3S"; time sh -c "$1" > "$output" 2>&1; } 2> "$timing" || status=$?
  if [ "$status" -ne 0 ]; then
    tail -n 20 "$output" >&2
    tfm_fail "the command failed (exit $status): $1"
  fi
  read -r wall cpu < <(awk '{printf "%.3f %.3f\n", $1, $2 + $3}' "$timing")
}
# A over B to three decimals, or "-" when B took no measurable time.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.3f", a / b; else printf "-"}'; }
for ((i = 0; i < warmup; ++i)); do run "$1"; run "$2"; done
wall_ratios=() cpu_ratios=()
printf "%4s  %9s %9s %7s  %9s %9s %7s\n" pair "wall A" "wall B" "A/B" "cpu A" "cpu B" "A/B"
for ((i = 1; i <= pairs; ++i)); do
  run "$1"
  wall_a=$wall cpu_a=$cpu
  run "$2"
  wall_b=$wall cpu_b=$cpu
  wall_ratio=$(ratio "$wall_a" "$wall_b") cpu_ratio=$(ratio "$cpu_a" "$cpu_b")
  [ "$wall_ratio" = "-" ] || wall_ratios+=("$wall_ratio")
  [ "$cpu_ratio" = "-" ] || cpu_ratios+=("$cpu_ratio")
  printf "%4d  %8ss %8ss %6sx  %8ss %8ss %6sx\n" "$i" "$wall_a" "$wall_b" "$wall_ratio" "$cpu_a" "$cpu_b" "$cpu_ratio"
done
# The median (the mean of the middle two for an even count), the minimum and the maximum.
summary() {
  [ $# -gt 0 ] || { printf "none (B took no measurable time)"; return; }
  printf "%s\n" "$@" | sort -g | awk '{v[NR] = $1} END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3fx (%.3f-%.3f)", m, v[1], v[NR]}'
}
echo "A/B wall: $(summary "${wall_ratios[@]+"${wall_ratios[@]}"}"), cpu: $(summary "${cpu_ratios[@]+"${cpu_ratios[@]}"}")" \
  "over $pairs pairs (median, min-max)"
