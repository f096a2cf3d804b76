# Sourced by the device scripts (gpu_check.sh, gpu_sweep.sh, device_indexing.sh) from the repository root: installs
# the carried wheels where the image lacks them, points PYTHONPATH and POLYSEEK_ASSETS at the checkout and the
# bundle, and exports the stock backbone's ONNX from the carried EfficientNet-Lite0 wheel. With a bundle made by
# gpu_bundle.py (a data/ folder), it also sets up POLYSEEK_HOME ($H) from the bundle's text cache, with a stub of
# MiniLM's weights whose size and mtime keep that cache's fingerprint, and sets D to the caption folder.
BUNDLE=${BUNDLE:-.devcheck}
PY=${PY:-python3}
ROOT=$PWD
mkdir -p "$OUT"
if [ -d "$BUNDLE/wheels" ] && ! $PY -c "import efficientnet_lite_pytorch, faiss, sqlite_utils" 2>/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$BUNDLE"/wheels/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 POLYSEEK_ASSETS=$ROOT/$BUNDLE/assets
if [ -d "$BUNDLE/data" ]; then
    export POLYSEEK_HOME=${POLYSEEK_HOME:-/tmp/gpu-check-home}
    H=$POLYSEEK_HOME
    D=$ROOT/$BUNDLE/data
    rm -rf "$H" && mkdir -p "$H/models" && cp -r "$BUNDLE/home/." "$H/"
    read -r size mtime < "$BUNDLE/assets/minilm_stat.txt"
    truncate -s "$size" "$BUNDLE/assets/minilm/model.onnx"
    touch -d "@${mtime:0:${#mtime}-9}.${mtime:${#mtime}-9}" "$BUNDLE/assets/minilm/model.onnx"
fi
if [ ! -f "$BUNDLE/assets/backbone/efficientnet_lite0.onnx" ]; then
    $PY -c "from pathlib import Path; from trainer.prepare import _export_backbone; \
_export_backbone(Path('$BUNDLE/assets/backbone'))" 2>/dev/null || exit 1
fi
