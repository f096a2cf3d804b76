#!/usr/bin/env bash
# The trainer's CUDA check, run on a lent GPU machine from the repository root with the folder that
# tests/bench/gpu_bundle.py built carried along (default .devcheck):
#
#   run(command="bash tests/bench/gpu_check.sh", carry=[".devcheck"], timeout_s=480)
#
# What it shows, each on real Flickr8k pictures (the bundle's subset), with --device cuda (AMP, GradScaler):
#   1. vse: warm-up on cached features, then the whole backbone fine-tuned; SIGTERM in the middle of phase two,
#      then --resume to the end (a checkpoint written and read back on the GPU); evaluate and export after.
#   2. vse: the same recipe with only the last 5 blocks fine-tuned (the frozen trunk cached once on the GPU).
#   3. pvse with GloVe + bi-GRU (the papers' text side: a cuDNN GRU under autocast), whole backbone fine-tuned.
#   4. DistributedDataParallel on the NCCL backend (torchrun, one process; the CPU test covers two with gloo).
# Rows go to $OUT/gpu.json and $OUT/gpu.md (tests/bench/bench_finetune.py), logs to $OUT/logs.tgz.
#
# DEVICE=cpu FT=1 BLOCKS_ONLY=1 bash tests/bench/gpu_check.sh   rehearses the script on a CPU (minutes). A
# rehearsal leaves MiniLM's stub (90 MB apparent) and the backbone ONNX (23 MB) in the bundle: delete
# assets/minilm/model.onnx and assets/backbone/efficientnet_lite0.onnx before carrying it (64 MiB at most).
set -u
OUT=${OUT:-/tmp/gpu-check-out}
DEVICE=${DEVICE:-cuda}
FT=${FT:-10}
source tests/bench/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
$PY -c "import torch, onnxruntime as o; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
'ort', o.__version__, o.get_available_providers())"

bench() { $PY tests/bench/bench_finetune.py --home "$H" --out "$OUT/gpu.json" "$@"; local rc=$?; stamp "rc=$rc"; }
stamp() { echo "[$(date +%T)] $*"; }

if [ -z "${BLOCKS_ONLY:-}" ]; then
    # 1. whole backbone; stopped by SIGTERM after phase two's first epoch, then resumed.
    name=vse-whole
    stamp "$name: first run"
    $PY -m trainer train --method vse --data "$D" --device "$DEVICE" --finetune-epochs "$FT" \
        --out "$H/models/$name" --json-progress > "$H/models/$name-killed.jsonl" 2> "$H/models/$name-killed.err" &
    pid=$!
    until awk '/"phase"/ {p = 1} p && /"event": "epoch"/ {f = 1} END {exit !f}' "$H/models/$name-killed.jsonl"; do
        kill -0 $pid 2>/dev/null || break
        sleep 0.5
    done
    kill -TERM $pid 2>/dev/null
    wait $pid
    rc=$?
    stamp "$name: stopped with rc=$rc after: $(tail -1 "$H/models/$name-killed.jsonl" | cut -c1-200)"
    bench --run $name -- --method vse --data "$D" --device "$DEVICE" --finetune-epochs "$FT" --resume
    grep -c '"resumed"' "$H/models/$name.jsonl" | sed 's/^/resumed events: /'
    $PY -m trainer evaluate --model "$H/models/$name" --data "$D" --split dev --device "$DEVICE" --json \
        > "$H/models/$name-evaluate.json" && stamp "evaluate: $(tr -d ' \n' < "$H/models/$name-evaluate.json" | cut -c1-300)"
    $PY -m trainer export --model "$H/models/$name" --out "$H/models/$name-export" \
        && stamp "export: $(ls "$H/models/$name-export" | tr "\n" " ")"
fi

# 2. the last 5 blocks only.
bench --run vse-last5 -- --method vse --data "$D" --device "$DEVICE" --finetune-epochs "$FT" --finetune-blocks 5

if [ -z "${BLOCKS_ONLY:-}" ]; then
    # 3. pvse with GloVe + bi-GRU, whole backbone.
    bench --run pvse-glove -- --method pvse --data "$D" --device "$DEVICE" --finetune-epochs "$FT" \
        --set text_encoder=glove
    # 4. DDP over NCCL, one process, warm-up only.
    stamp "torchrun: NCCL"
    $PY -m torch.distributed.run --standalone --nproc_per_node 1 -m trainer train --method vse --data "$D" \
        --device "$DEVICE" --epochs 3 --out "$H/models/ddp" --json-progress > "$H/models/ddp.jsonl" \
        2> "$H/models/ddp.err"
    rc=$?
    stamp "torchrun rc=$rc: $(tail -1 "$H/models/ddp.jsonl" | cut -c1-200)"
fi

(cd "$H/models" && tar czf "$OUT/logs.tgz" --exclude='*.safetensors' --exclude='*.onnx' ./*.jsonl ./*.err \
    ./*/trainer_state.json ./*/metrics.json ./*.json ./*-export/manifest.json 2>/dev/null)
cat "$OUT/gpu.md" 2>/dev/null | tail -n +4
