#!/usr/bin/env bash
# bf16 mixed precision against fp32 (docs/performance-log.md section 6):
#  1. loss curves: the same small GPT (attn train gpt defaults: 2 layers, 4 heads, d_model 128,
#     context 64, batch 16), seed and data (this repository's README.md and docs/*.md, ~50 KB of
#     text) trained STEPS steps with --precision fp32 and --precision bf16; the loss every 25
#     steps side by side, as a markdown table;
#  2. `attn bench train` tokens/s with --precision fp32 and bf16, 1 and 2 threads, back to back.
#   usage: bench/bf16_train.sh [BUILD_DIR] [STEPS]   (default build, 300)
set -euo pipefail
ATTN=${1:-build}/attn
STEPS=${2:-300}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$here/README.md" "$here"/docs/*.md > "$work/text.txt"
for p in fp32 bf16; do
  "$ATTN" train gpt --data "$work/text.txt" --steps "$STEPS" --log-every 25 --seed 1 --threads 1 \
    --precision "$p" --checkpoint "$work/$p.safetensors" > "$work/$p.log"
done
echo "| step | fp32 loss | bf16 loss |"
echo "|---:|---:|---:|"
losses() { sed -n 's|^step *\([0-9]*\)/[0-9]* *loss *\([^ ]*\).*|\1 \2|p' "$1"; }
join <(losses "$work/fp32.log") <(losses "$work/bf16.log") | awk '{ printf "| %d | %s | %s |\n", $1, $2, $3 }'
f32=$(sed -n 's/^final loss: //p' "$work/fp32.log")
b16=$(sed -n 's/^final loss: //p' "$work/bf16.log")
echo
echo "final loss: fp32 $f32, bf16 $b16 (difference $(awk -v a="$f32" -v b="$b16" 'BEGIN { printf "%.2f", 100 * (b - a) / a }')% of fp32)"
echo
for p in fp32 bf16; do
  echo "== attn bench train --precision $p"
  "$ATTN" bench train --precision "$p" --threads 1,2 --steps 3
done
