#!/bin/sh
# Resume under MPI: a 2-rank run stopped after step 3 and resumed logs the same losses, bit for bit,
# as an uninterrupted 2-rank run; resuming it with another rank count is refused, naming both; a
# 1-rank MPI run logs what a plain run logs. Usage: test_mpi_resume.sh TFM SOURCE_DIR [MPIEXEC]
set -eu
tfm=$1 src=$2 mpiexec=${3:-mpirun}
mpi="$mpiexec --oversubscribe --allow-run-as-root"
dir=$(mktemp -d "${TMPDIR:-/tmp}/tfm_mpi_resume.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$src"
common="--config configs/tiny.json --set train.max_steps=6 --set train.log_interval=1 --set model.dropout=0.1"
losses() { sed -n 's/.*"step":\([0-9]*\).*"train_loss":\([^,}]*\).*/\1 \2/p' "$1/metrics.jsonl"; }
fail() { echo "FAILED: $*"; exit 1; }

$mpi -np 2 "$tfm" train $common --out "$dir/full" > "$dir/full.out" 2>&1 || { cat "$dir/full.out"; fail "2-rank run"; }
grep -q "mpi: 2 ranks x 1 thread" "$dir/full.out" || fail "no 'mpi: 2 ranks x 1 thread' line in the log"
grep -q "allreduce: .* ms/step" "$dir/full.out" || fail "no allreduce overhead line"
# mpirun gives its ranks a terminal of its own whatever its output is: written to a file, the log has no
# colours and no progress line.
! grep -q "$(printf '\033')" "$dir/full.out" || fail "terminal escape codes in the log mpirun wrote to a file"
$mpi -np 2 "$tfm" train $common --out "$dir/split" --stop-at 3 > "$dir/split1.out" 2>&1 || { cat "$dir/split1.out"; fail "2-rank run to step 3"; }
$mpi -np 2 "$tfm" train --resume "$dir/split" > "$dir/split2.out" 2>&1 || { cat "$dir/split2.out"; fail "2-rank resume"; }
losses "$dir/full" > "$dir/full.losses"
losses "$dir/split" > "$dir/split.losses"
[ "$(wc -l < "$dir/full.losses")" -eq 6 ] || fail "expected 6 logged steps, got $(wc -l < "$dir/full.losses")"
diff "$dir/full.losses" "$dir/split.losses" || fail "resumed losses differ from the uninterrupted run"
echo "2-rank resume: 6 losses identical"

# A different rank count is refused, naming both counts.
if "$tfm" train --resume "$dir/split" --set train.max_steps=8 > "$dir/wrong.out" 2>&1; then fail "1-process resume of a 2-rank run was accepted"; fi
grep -q "trained with 2 rank(s), this run has 1" "$dir/wrong.out" || { cat "$dir/wrong.out"; fail "error does not name both rank counts"; }
echo "resume with another rank count: refused"

# mpirun -np 1 equals a plain run.
$mpi -np 1 "$tfm" train $common --out "$dir/one" > "$dir/one.out" 2>&1 || { cat "$dir/one.out"; fail "1-rank run"; }
"$tfm" train $common --out "$dir/plain" > "$dir/plain.out" 2>&1 || { cat "$dir/plain.out"; fail "plain run"; }
losses "$dir/one" > "$dir/one.losses"
losses "$dir/plain" > "$dir/plain.losses"
diff "$dir/one.losses" "$dir/plain.losses" || fail "1-rank MPI run differs from a plain run"
echo "1-rank MPI run = plain run"
