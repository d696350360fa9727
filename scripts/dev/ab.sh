#!/usr/bin/env bash
# Times two whole commands in turn, A B A B ..., and gives the ratio A/B pair by pair: on a shared or
# noisy machine a ratio of neighbouring runs holds when the machine's speed drifts, where two separate
# series would not. The docs' "N A/B pairs" figures are measured this way; quote the median.
# Usage: scripts/dev/ab.sh [-n PAIRS] [-w WARMUP] 'COMMAND_A' 'COMMAND_B'
#   each command is run by `sh -c`, its output thrown away; PAIRS default 5, WARMUP (runs of each, not
#   counted) default 1. Prints each pair's wall and CPU (user + system) seconds and ratios, then the
#   median, minimum and maximum of the ratios.
# Example: scripts/dev/ab.sh -n 6 'build/new/tfm train --config configs/tiny.json --out /tmp/a' \
#                               'build/old/tfm train --config configs/tiny.json --out /tmp/b'
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

timing="$(mktemp)"
trap 'rm -f "$timing"' EXIT
# One run of a command: sets `wall` and `cpu` (seconds); a failing command stops the comparison.
run() {
  /usr/bin/time -o "$timing" -f "%e %U %S" sh -c "$1" > /dev/null 2>&1 ||
    tfm_fail "the command failed (exit $?): $1"
  read -r wall cpu < <(awk '{printf "%.3f %.3f\n", $1, $2 + $3}' "$timing")
}
for ((i = 0; i < warmup; ++i)); do run "$1"; run "$2"; done
wall_ratios=() cpu_ratios=()
printf "%4s  %9s %9s %7s  %9s %9s %7s\n" pair "wall A" "wall B" "A/B" "cpu A" "cpu B" "A/B"
for ((i = 1; i <= pairs; ++i)); do
  run "$1"
  wall_a=$wall cpu_a=$cpu
  run "$2"
  wall_b=$wall cpu_b=$cpu
  wall_ratio=$(awk -v a="$wall_a" -v b="$wall_b" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
  cpu_ratio=$(awk -v a="$cpu_a" -v b="$cpu_b" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
  wall_ratios+=("$wall_ratio") cpu_ratios+=("$cpu_ratio")
  printf "%4d  %8ss %8ss %6sx  %8ss %8ss %6sx\n" "$i" "$wall_a" "$wall_b" "$wall_ratio" "$cpu_a" "$cpu_b" "$cpu_ratio"
done
# The median (the mean of the middle two for an even count), the minimum and the maximum.
summary() {
  printf "%s\n" "$@" | sort -g | awk '{v[NR] = $1} END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3fx (%.3f-%.3f)", m, v[1], v[NR]}'
}
echo "A/B wall: $(summary "${wall_ratios[@]}"), cpu: $(summary "${cpu_ratios[@]}") over $pairs pairs (median, min-max)"
