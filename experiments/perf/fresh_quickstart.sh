#!/bin/bash
# `make quickstart` as a newcomer meets it: a fresh clone of REPO (default: this repository), empty pip
# and warm-start caches, every output line timestamped, then the wall time of each phase.
#   bash experiments/perf/fresh_quickstart.sh [REPO]
# Phases: install (up to .venv/.installed), start-up (to the warm start's first line), warm start (to
# its "trained:" line, or "shipped with the package:" where the package ships it), RL runs (to "results:"), report (to the answer), then the answer's lines.
set -u
repo=${1:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}
d=$(mktemp -d "${TMPDIR:-/tmp}/fresh-quickstart-XXXX")
git clone -q "$repo" "$d/c" && cd "$d/c" || exit 1
export GSPO_BENCH_CACHE="$d/cache" PIP_NO_CACHE_DIR=1
log="$d/quickstart.log"
echo "$(date +%s.%N) START $(git rev-parse --short HEAD) in $d" > "$log"
make quickstart 2>&1 | while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >> "$log"
echo "$(date +%s.%N) END rc=${PIPESTATUS[0]}" >> "$log"
grep -v "WARNING: Location" "$log"
awk 'NR == 1 { t0 = $1 } { t = $1 - t0 }
     /touch .venv\/.installed/ && !i { i = t } /starting weights/ && !w { w = t } /(trained|reused|shipped with the package): accuracy/ && !r { r = t }
     $2 == "results:" && !e { e = t } $2 == "answer:" && !a { a = t } /END rc=/ { z = t }
     END { printf "phases (s): install %.0f, start-up %.0f, warm start %.0f, RL runs %.0f, report %.0f; total %.0f (%.1f min)\n",
           i, w - i, r - w, e - r, a - e, z, z / 60 }' "$log"
echo "results: $d/c/runs/quickstart"
