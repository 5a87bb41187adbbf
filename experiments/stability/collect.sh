#!/usr/bin/env bash
# Copy a stability suite's runs into results/: every run's files but its checkpoint, lock and log, the
# suite file, and its report (report.html and the PDFs are .gitignored).
#   experiments/stability/collect.sh runs/stability/stability_stage1_grpo results/stability_cpu/stage1
set -euo pipefail
src=$1 dst=$2
mkdir -p "$dst"
for run in "$src"/*/; do
    [ -f "$run/status.json" ] || continue
    name=$(basename "$run")
    mkdir -p "$dst/$name"
    for f in config.yaml metrics.parquet layers.parquet eval.parquet provenance.json status.json; do
        [ -f "$run/$f" ] && cp "$run/$f" "$dst/$name/"
    done
done
cp "$src/suite.yaml" "$dst/"
[ -d "$src/report" ] && rm -rf "$dst/report" && cp -r "$src/report" "$dst/report"
echo "copied $(ls -d "$dst"/*/ | wc -l) folders to $dst"
