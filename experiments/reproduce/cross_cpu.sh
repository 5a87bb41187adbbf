#!/usr/bin/env bash
# Does a run reproduce bit for bit on another x86-64 CPU? experiments/reproduce/tiny.yaml (a warm start
# and 4 RL steps of three objectives, one thread) run natively and under qemu-user's emulation of each
# CPU model given (default: an AMD EPYC-Rome, a control for the emulator, and an Intel Haswell), each in
# a fresh warm-start cache, then `gspo-bench reproduce` of each against the native run.
#   experiments/reproduce/cross_cpu.sh OUT [MODEL ...]     (needs qemu-user: apt-get install qemu-user)
# About 25 s natively and 11 min per emulated CPU on 2 cores. GSPO_BENCH_NATIVE_KERNELS=1 in the
# environment runs the same without the kernel pins, for comparison.
set -euo pipefail
out=${1:?usage: cross_cpu.sh OUT [MODEL ...]}; shift
models=("${@:-EPYC-Rome}"); [ $# -gt 0 ] || models=(EPYC-Rome Haswell)
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$(command -v python)}
bench=$(dirname "$python")/gspo-bench
command -v qemu-x86_64 >/dev/null || { echo "cross_cpu.sh: qemu-x86_64 not found (apt-get install qemu-user)"; exit 2; }
run() {  # run NAME [emulator words...]
  local name=$1; shift
  rm -rf "$out/$name"
  local start=$(date +%s)
  GSPO_BENCH_CACHE="$out/$name/cache" "$@" "$python" "$bench" run "$here/tiny.yaml" --out "$out/$name/runs" \
    > "$out/$name.log" 2>&1
  echo "$name: $(( $(date +%s) - start )) s"
}
mkdir -p "$out"
run native
for model in "${models[@]}"; do
  run "$model" qemu-x86_64 -cpu "$model"
  "$python" "$bench" reproduce "$out/native/runs/tiny" "$out/$model/runs/tiny" || true
done
