#!/usr/bin/env bash
# Data-parallel training over MPI (registered only when CMake found MPI):
#   usage: dist_test.sh ATTN MPIEXEC TEST_DIST WORK
# - test_dist (the library's collectives) on 2 and 3 ranks;
# - `attn train gpt` on 2 ranks (batch 4) and 3 ranks (batch 6): checkpoints byte-identical to one
#   process with the same --batch and --micro-batch (B/N);
# - --resume with another number of ranks (3 -> 1, 1 -> 2): bitwise as if never stopped;
# - ranks given different options stop at the start with a message, never hang;
# - a rank killed mid-run ends the job within seconds, and the last checkpoint still loads;
# - a rank stopped (SIGSTOP) with --timeout: the other sleeps while it waits, then ends the job
#   naming the stopped rank.
set -u
ATTN=$1 MPIEXEC=$2 TEST_DIST=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# stdin from /dev/null: mpirun would otherwise forward the test's stdin to rank 0
mpi() { local np=$1; shift; timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np "$np" "$@" </dev/null; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# a small text: the repository's README would do, but keep it self-contained
for i in $(seq 1 200); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * i % 97))"; done > data.txt
T=(train gpt --data data.txt --layers 1 --heads 2 --d-model 32 --context 16 --threads 1 --log-every 1000 --every 0)

for np in 2 3; do
  mpi "$np" "$TEST_DIST" > "test_dist.$np.out" 2>&1 || { cat "test_dist.$np.out"; fail "test_dist on $np ranks"; }
done

# N ranks on batch B == one process with --micro-batch B/N, byte for byte
for case in "2 4" "3 6"; do
  set -- $case
  np=$1 b=$2 m=$(($2 / $1))
  "$ATTN" "${T[@]}" --steps 6 --batch "$b" --micro-batch "$m" --checkpoint "one.$np.st" > "one.$np.out" 2>&1 ||
    { cat "one.$np.out"; fail "one process, batch $b"; }
  mpi "$np" "$ATTN" "${T[@]}" --steps 6 --batch "$b" --checkpoint "ranks.$np.st" > "ranks.$np.out" 2>&1 ||
    { cat "ranks.$np.out"; fail "$np ranks, batch $b"; }
  cmp "one.$np.st" "ranks.$np.st" || fail "$np ranks on batch $b: checkpoint differs from one process with micro-batch $m"
  grep -q "data-parallel: $np ranks" "ranks.$np.out" || fail "$np ranks: no data-parallel line"
  [ "$(grep -c '^final loss' "ranks.$np.out")" = 1 ] || fail "$np ranks: rank 0 alone should print"
  tail -n 2 "one.$np.out" | head -n 1 > a.txt; tail -n 2 "ranks.$np.out" | head -n 1 > b.txt
  cmp -s a.txt b.txt || fail "$np ranks: final loss differs"
done

# --resume on another number of ranks: 3 ranks to step 3, then one process (batch 6, micro-batch 2)
mpi 3 "$ATTN" "${T[@]}" --steps 6 --batch 6 --stop-at 3 --checkpoint r31.st > r31.out 2>&1 || { cat r31.out; fail "3 ranks, --stop-at 3"; }
"$ATTN" "${T[@]}" --resume --checkpoint r31.st > r31b.out 2>&1 || { cat r31b.out; fail "resume 3 -> 1"; }
cmp one.3.st r31.st || fail "3 ranks then 1 process: differs from one uninterrupted process"
# and one process (batch 4, micro-batch 2) to step 3, then 2 ranks
"$ATTN" "${T[@]}" --steps 6 --batch 4 --micro-batch 2 --stop-at 3 --checkpoint r12.st > r12.out 2>&1 || fail "1 process, --stop-at 3"
mpi 2 "$ATTN" "${T[@]}" --resume --checkpoint r12.st > r12b.out 2>&1 || { cat r12b.out; fail "resume 1 -> 2"; }
cmp one.2.st r12.st || fail "1 process then 2 ranks: differs from one uninterrupted process"

# mismatched configuration: an error on every rank, not a hang
start=$(date +%s)
timeout 30 "$MPIEXEC" --oversubscribe --bind-to none -np 1 "$ATTN" "${T[@]}" --steps 5 --batch 4 --lr 1e-3 \
  --checkpoint mm.st : -np 1 "$ATTN" "${T[@]}" --steps 5 --batch 4 --lr 2e-3 --checkpoint mm.st < /dev/null > mm.out 2>&1
rc=$?
[ "$rc" != 0 ] || fail "mismatched --lr: exit status 0"
grep -q "ranks disagree on the options" mm.out || { cat mm.out; fail "mismatched --lr: no message"; }
[ $(( $(date +%s) - start )) -lt 20 ] || fail "mismatched --lr: took $(( $(date +%s) - start )) s"
[ ! -e mm.st ] || fail "mismatched --lr: a checkpoint was written"

# a rank killed mid-run: the job ends within seconds, the last checkpoint loads
timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np 2 "$ATTN" "${T[@]}" --steps 1000000 --batch 4 \
  --every 20 --checkpoint dead.st < /dev/null > dead.out 2>&1 &
pid=$!
for i in $(seq 1 200); do [ -e dead.st ] && break; sleep 0.1; done
[ -e dead.st ] || fail "no checkpoint written by the long run"
victim=""
for c in $(pgrep -f "checkpoint dead.st"); do
  tr '\0' '\n' < /proc/$c/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$c
done
if [ -z "$victim" ]; then
  fail "rank 1 of the long run not found"
  kill $pid
else
  sleep 0.3
  kill -9 "$victim"
  t0=$(date +%s.%N)
  for i in $(seq 1 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  t1=$(date +%s.%N)
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  kill -0 $pid 2>/dev/null && { fail "killed rank: the job still runs after $took s"; kill $pid; }
  wait $pid; rc=$?
  echo "killed rank 1: the job ended after $took s with status $rc"
  [ "$rc" != 0 ] || fail "killed rank: exit status 0"
  grep -q "rank 1" dead.out || { cat dead.out; fail "killed rank: no message naming rank 1"; }
  sleep 0.2
  pgrep -f "checkpoint dead.st" > /dev/null && fail "killed rank: processes left running"
  cp dead.st dead-copy.st
  "$ATTN" "${T[@]}" --resume --checkpoint dead-copy.st --stop-at 1 > dead-load.out 2>&1 ||
    { cat dead-load.out; fail "killed rank: the last checkpoint does not load"; }
fi

# a rank stopped (SIGSTOP) mid-run with --timeout 3: the other does not spin (it sleeps between
# polls), then ends the job naming the stopped rank
timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np 2 "$ATTN" "${T[@]}" --steps 1000000 --batch 4 \
  --every 20 --timeout 3 --checkpoint stop.st < /dev/null > stop.out 2>&1 &
pid=$!
for i in $(seq 1 200); do [ -e stop.st ] && break; sleep 0.1; done
r0="" r1=""
for c in $(pgrep -f "checkpoint stop.st"); do
  env=$(tr '\0' '\n' < /proc/$c/environ 2>/dev/null)
  echo "$env" | grep -qx OMPI_COMM_WORLD_RANK=0 && r0=$c
  echo "$env" | grep -qx OMPI_COMM_WORLD_RANK=1 && r1=$c
done
if [ -z "$r0" ] || [ -z "$r1" ]; then
  fail "the ranks of the stopped run not found"
  kill $pid
else
  kill -STOP "$r1"
  sleep 0.5
  cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
  c0=$(cpu "$r0"); sleep 1.5; c1=$(cpu "$r0")
  ticks=$(( c1 - c0 )) hz=$(getconf CLK_TCK)
  echo "stopped rank: rank 0 used $ticks ticks (of $hz a second) in 1.5 s of waiting"
  [ "$ticks" -lt $(( hz / 2 )) ] || fail "stopped rank: rank 0 spins ($ticks ticks in 1.5 s)"
  t0=$(date +%s.%N)
  for i in $(seq 1 300); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  t1=$(date +%s.%N)
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if kill -0 $pid 2>/dev/null; then fail "stopped rank: the job still runs after $took s more"; kill -CONT "$r1"; kill $pid; fi
  wait $pid; rc=$?
  echo "stopped rank 1: the job ended $took s after the 2 s of the CPU check, status $rc"
  [ "$rc" != 0 ] || fail "stopped rank: exit status 0"
  grep -q "no answer from rank(s) 1: stopped" stop.out || { cat stop.out; fail "stopped rank: no message naming rank 1"; }
  kill -CONT "$r1" 2>/dev/null; kill -9 "$r1" 2>/dev/null
  sleep 0.2
  pgrep -f "checkpoint stop.st" > /dev/null && fail "stopped rank: processes left running"
fi

if [ "$fails" -ne 0 ]; then echo "dist_test: $fails failure(s)"; exit 1; fi
echo "dist_test: all passed"
