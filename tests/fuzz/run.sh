#!/usr/bin/env bash
# Run each fuzz harness for a bounded time on a scratch copy of its committed seed corpus:
#   tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]      (targets: tests/fuzz/fuzz_*.c; default all)
# New inputs go to the scratch copy, so the committed corpus never changes; a crash, leak, timeout
# or out-of-memory input is kept under BUILD_DIR/fuzz-artifacts/TARGET/ and fails the run.
# Prints each target's executions (libFuzzer's stat::number_of_executed_units).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
secs=${2:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
build=$(cd "$build" && pwd) # libFuzzer runs in the scratch folder (its stray files land there)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$here"/fuzz_*.c; do targets+=("$(basename "$f" .c | sed 's/^fuzz_//')"); done
fi
declare -A dict=([json]=json.dict [config]=json.dict [safetensors]=safetensors.dict
                 [checkpoint]=safetensors.dict [image]=image.dict [tokenizer]=tokenizer.dict
                 [hf_config]=hf_config.dict)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/attn_fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
summary=()
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then echo "fuzz: no harness $bin (build the fuzz_all target)"; exit 2; fi
  corpus=$scratch/$t
  mkdir -p "$corpus"
  cp "$here/corpus/$t/"* "$corpus/" 2>/dev/null || true
  art=$build/fuzz-artifacts/$t
  rm -rf "$art"
  mkdir -p "$art"
  opts=(-max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 -max_len=16384
        -print_final_stats=1 -artifact_prefix="$art/")
  [ -n "${dict[$t]:-}" ] && opts+=(-dict="$here/${dict[$t]}")
  log=$scratch/$t.log
  echo "fuzz: $t for ${secs}s on $(ls "$corpus" | wc -l) seed inputs"
  (cd "$scratch" && "$bin" "${opts[@]}" "$corpus") >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\)[[:space:]]*DONE.*/\1/p' "$log" | tail -n 1)
  if [ $rc -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); the input is in $art:"
    tail -n 60 "$log"
    failed+=("$t")
    summary+=("$t: FAILED after ${execs:-?} executions")
  else
    rmdir "$art" 2>/dev/null || true
    summary+=("$t: ${execs:-?} executions in ${secs}s, $(ls "$corpus" | wc -l) corpus inputs, no failure")
  fi
done
printf 'fuzz: %s\n' "${summary[@]}"
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: failing targets: ${failed[*]}"; exit 1; }
