#!/usr/bin/env bash
# Does a long phase two pay on the GPU? Three fine-tuning variants of vse trained side by side on one lent GPU,
# each for FT epochs with early stopping off (--patience FT), on the bundle of tests/bench/gpu_bundle.py:
#
#   run(command="BUNDLE=.devsend bash tests/bench/gpu_sweep.sh", carry=[".devsend"], timeout_s=300)
#
# whole: the whole backbone at the default rates; whole-fast: the whole backbone at 3e-5 / 4e-5; last5: the last
# 5 blocks at the default rates. Rows go to $OUT/<name>.json / .md (tests/bench/bench_finetune.py).
set -u
OUT=${OUT:-/tmp/gpu-sweep-out}
DEVICE=${DEVICE:-cuda}
FT=${FT:-30}
export POLYSEEK_HOME=${POLYSEEK_HOME:-/tmp/gpu-sweep-home}
source tests/bench/gpu_env.sh
stamp() { echo "[$(date +%T)] $*"; }
stamp "caching features (one short warm-up)"
$PY -m trainer train --method vse --data "$D" --device "$DEVICE" --epochs 1 --out "$H/models/cache" \
    > /dev/null 2> "$H/models/cache.err" || { tail -5 "$H/models/cache.err"; exit 1; }
common=(--method vse --data "$D" --device "$DEVICE" --finetune-epochs "$FT" --patience "$FT")
sweep() {
    local name=$1; shift
    $PY tests/bench/bench_finetune.py --home "$H" --out "$OUT/$name.json" --run "$name" -- "${common[@]}" "$@" \
        > /dev/null 2> "$H/models/$name.err"
    stamp "$name rc=$?"
}
stamp "three runs side by side"
sweep whole &
sweep whole-fast --finetune-lr 3e-5 --finetune-head-lr 4e-5 &
sweep last5 --finetune-blocks 5 &
wait
(cd "$H/models" && tar czf "$OUT/logs.tgz" ./*.jsonl ./*.err ./*/trainer_state.json ./*/metrics.json 2>/dev/null)
$PY - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    for r in json.loads(path.read_text()):
        print(r["name"], "warm-up", r["warmup_best_rsum"], "phase two", r["finetune_rsums"], "final", r["rsum"],
              "best epoch", r["best_epoch"], "phase-two s", r["finetune_s"], "GPU MiB", r.get("gpu_peak_mib"))
EOF
