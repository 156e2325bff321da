#!/usr/bin/env bash
# Regenerate every PyTorch fixture into DIR (default: the committed fixtures) with seed SEED.
# Usage: tests/parity/regen.sh [DIR] [SEED]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/fixtures}
seed=${2:-1234}
mkdir -p "$dir"
for script in "$here"/gen_*.py; do
  /usr/bin/python3 "$script" --out "$dir" --seed "$seed"
done
